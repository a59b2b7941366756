"""Structured outputs through the official `openai` client: `response_format` (JSON object and
JSON schema, via `chat.completions.parse` with Pydantic models) and zinc's `grammar` extension,
enforced by constrained decoding on the default model; refused and hostile grammars."""
import enum
import json
import threading
import time
from typing import List, Optional

import httpx
import openai
import pydantic
import pytest


def client(server, key="none"):
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=120)


class Colour(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    # Bounded like every other field, so that the whole object fits max_tokens whatever a small
    # greedy model writes: an unbounded integer may run on digit after digit.
    population: int = pydantic.Field(ge=0, le=2_000_000_000)


class Country(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    capital: City
    flag_colours: List[Colour] = pydantic.Field(max_length=3)
    motto: Optional[str] = pydantic.Field(default=None, max_length=24)


class Step(pydantic.BaseModel):
    explanation: str = pydantic.Field(max_length=40)
    output: int


class Solution(pydantic.BaseModel):
    steps: List[Step] = pydantic.Field(max_length=3)
    final_answer: int


@pytest.mark.parametrize("model,question", [
    (Country, "Describe France as JSON."),
    (Solution, "Solve 8x + 7 = -23 step by step."),
    (City, "Give me a city."),
])
def test_parse_returns_valid_instances(server, model, question):
    r = client(server).chat.completions.parse(
        model="m", messages=[{"role": "user", "content": question}], response_format=model,
        max_tokens=200, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(choice.message.parsed, model), choice.message.content
    # The text itself is what the schema allows: it validates on its own.
    model.model_validate_json(choice.message.content)


def test_json_object_mode_and_sampling(server):
    c = client(server)
    for seed in (1, 2, 3):
        r = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "List two fruits as a JSON object."}],
            response_format={"type": "json_object"}, max_tokens=120, temperature=1.0, seed=seed)
        text = r.choices[0].message.content
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(text), dict), text
        else:
            assert text.lstrip().startswith("{"), text


def test_streamed_schema_output_is_the_same_json(server):
    c = client(server)
    fmt = {"type": "json_schema", "json_schema": {"name": "pick", "schema": {
        "type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no", "maybe"]}},
        "required": ["answer"], "additionalProperties": False}}}
    msgs = [{"role": "user", "content": "Is the sky blue?"}]
    whole = c.chat.completions.create(model="m", messages=msgs, response_format=fmt, max_tokens=30,
                                      temperature=0).choices[0].message.content
    parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="m", messages=msgs, response_format=fmt, max_tokens=30, temperature=0, stream=True) if ch.choices]
    assert "".join(parts) == whole
    assert json.loads(whole)["answer"] in ("yes", "no", "maybe")


def test_lark_grammar_extension_on_both_endpoints(server):
    c = client(server)
    grammar = 'start: "The answer is " ANSWER "."\nANSWER: /[0-9]{1,3}/'
    r = c.completions.create(model="m", prompt="Question: what is 6 times 7?\n", max_tokens=20, temperature=0,
                             extra_body={"grammar": grammar})
    assert r.choices[0].finish_reason == "stop"
    text = r.choices[0].text
    assert text.startswith("The answer is ") and text.endswith(".") and text[14:-1].isdigit(), text
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Yes or no?"}], max_tokens=5,
                                  temperature=0, extra_body={"grammar": 'start: "yes" | "no"'})
    assert r.choices[0].message.content in ("yes", "no")


@pytest.mark.parametrize("extra,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"$ref": "https://example.invalid/schema.json"}}}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"grammar": "start: undefined_rule"}, "grammar"),
    ({"grammar": "start: \"a\"", "response_format": {"type": "json_object"}}, "grammar"),
])
def test_refused_grammars_answer_400_naming_the_field(server, extra, param):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **extra}
    r = httpx.post(server.url + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]


def hostile_schemas():
    def nested(levels):
        schema = {"type": "string"}
        for _ in range(levels):
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
        return schema
    huge_enum = {"type": "string", "enum": [f"value-{i}-{'x' * (i % 17)}" for i in range(30000)]}
    alternatives = {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}},
                               "required": [f"k{i}"], "additionalProperties": False} for i in range(3000)]}
    # 100 levels are past the JSON reader's depth limit; 40 reach the grammar compiler.
    return [nested(100), nested(40), huge_enum, alternatives]


def test_hostile_schemas_neither_stall_other_streams_nor_the_server(server):
    """While hostile schemas are compiled and decoded, another client's stream keeps its pace:
    no gap between its tokens approaches the time the hostile requests take."""
    gaps, done = [], threading.Event()

    def steady():
        last = time.monotonic()
        with httpx.stream("POST", server.url + "/completions", json={
                "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": True,
                "stream": True}, timeout=300) as r:
            for line in r.iter_lines():
                now = time.monotonic()
                if line.startswith("data: {"):
                    gaps.append(now - last)
                last = now
        done.set()

    t = threading.Thread(target=steady)
    t.start()
    time.sleep(1.0)
    outcomes = []
    started = time.monotonic()
    for schema in hostile_schemas():
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
                "response_format": {"type": "json_schema", "json_schema": {"name": "h", "schema": schema}}}
        r = httpx.post(server.url + "/chat/completions", json=body, timeout=120)
        outcomes.append((r.status_code, r.text[:200]))
        assert r.status_code in (200, 400), r.text
        if r.status_code == 400:
            err = r.json()["error"]
            # Nesting past the JSON reader's depth limit is refused as a body, before any schema.
            assert err["param"] == "response_format" or "recursion limit" in err["message"], err
    hostile_time = time.monotonic() - started
    t.join(timeout=300)
    assert done.is_set()
    assert len(gaps) >= 100
    print(outcomes, hostile_time, max(gaps[5:]))
    assert max(gaps[5:]) < max(1.0, hostile_time / 4), (max(gaps), hostile_time, outcomes)
    ok = client(server).completions.create(model="m", prompt="Hi", max_tokens=2)
    assert ok.choices[0].text is not None
