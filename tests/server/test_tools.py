"""Tool calls through the official `openai` client on the default model (whose template knows
no tools: zinc describes them in the system message and reads `<tool_call>` blocks back):
forced calls (`required`, a named function, one call or several), a round trip with the tool's
result, the same call streamed as tool-call deltas, and refusals."""
import json

import httpx
import openai
import pytest


def client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                   "required": ["zone"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def test_required_call_round_trip(server):
    c = client(server)
    r = c.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                  parallel_tool_calls=False, max_tokens=80, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id
    assert call.function.name in ("get_weather", "get_time")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
    # The call and the tool's result go back; the model answers in prose.
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                             "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    final = c.chat.completions.create(model="m", messages=history, tools=[WEATHER, TIME], tool_choice="none",
                                      max_tokens=40, temperature=0)
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content.strip()
    # With tool_choice none the tools are left out of the prompt; the call and its result are in.
    bare = c.chat.completions.create(model="m", messages=ASK, max_tokens=1, temperature=0)
    assert final.usage.prompt_tokens > bare.usage.prompt_tokens + 20


def test_named_choice_calls_that_function(server):
    r = client(server).chat.completions.create(
        model="m", messages=ASK, tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=60, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    assert set(json.loads(calls[0].function.arguments)) == {"zone"}


def test_streamed_call_matches_the_whole_one(server):
    c = client(server)
    kw = dict(model="m", messages=ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
              max_tokens=80, temperature=0)
    whole = c.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    calls, finish, content = {}, None, ""
    for chunk in c.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
    assert finish == "tool_calls"
    assert content == ""
    assert list(calls) == [0]
    assert calls[0]["name"] == whole.function.name
    assert json.loads(calls[0]["arguments"]) == json.loads(whole.function.arguments)


def test_auto_choice_answers_in_prose_or_a_well_formed_call(server):
    r = client(server).chat.completions.create(model="m", messages=ASK, tools=[WEATHER], max_tokens=80,
                                               temperature=0)
    m = r.choices[0].message
    if m.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls"
        for call in m.tool_calls:
            assert call.function.name == "get_weather"
            json.loads(call.function.arguments)
    else:
        assert m.content.strip() and "<tool_call>" not in m.content


@pytest.mark.parametrize("extra,param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
])
def test_bad_tool_requests_answer_400(server, extra, param):
    r = httpx.post(server.url + "/chat/completions", json={"messages": ASK, "max_tokens": 5, **extra}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_history_with_malformed_calls_is_refused(server):
    bad = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]
    r = httpx.post(server.url + "/chat/completions", json={"messages": bad, "max_tokens": 5}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
