"""Log-probabilities through the official `openai` client: chat's `logprobs` / `top_logprobs`
(whole and streamed), completions' `logprobs: N`, and `echo` with `max_tokens: 0` scoring a
prompt as evaluation harnesses do (lm-evaluation-harness's `local-completions`), checked
against `zinc perplexity` on the same tokens."""
import json
import math
import os
import subprocess
import tempfile

import openai
import pytest

from conftest import BATCH_INVARIANT, ROOT, ZINC, Server

# A text of well over 64 tokens on the default model.
TEXT = (
    "The library opens at nine in the morning and closes at six in the evening. Visitors may "
    "borrow up to five books at a time, and each loan lasts three weeks. Reference works, "
    "maps and rare editions stay in the reading room. A quiet floor upstairs has desks for "
    "study, and the café by the entrance serves tea, coffee and small cakes until five."
)


def client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def test_chat_logprobs_describe_each_generated_token(server):
    r = client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    choice = r.choices[0]
    content = choice.logprobs.content
    assert len(content) == r.usage.completion_tokens
    if choice.finish_reason == "length":
        assert "".join(t.token for t in content) == choice.message.content
    for t in content:
        assert t.logprob <= 0 and bytes(t.bytes).decode("utf-8", "replace") == t.token
        tops = [a.logprob for a in t.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        # Greedy: the token taken is the likeliest.
        assert t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6


def test_streamed_chat_logprobs_match_the_streamed_text(server):
    stream = client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=10, temperature=0, logprobs=True, stream=True, stream_options={"include_usage": True})
    text, tokens, usage = "", [], None
    for chunk in stream:
        if not chunk.choices:
            usage = chunk.usage
            continue
        c = chunk.choices[0]
        text += c.delta.content or ""
        if c.logprobs and c.logprobs.content:
            tokens += [t.token for t in c.logprobs.content]
    assert len(tokens) == usage.completion_tokens > 0
    assert "".join(tokens) == text


def test_completion_logprobs_list_tokens_and_offsets(server):
    r = client(server).completions.create(
        model="m", prompt="The capital of France is", max_tokens=6, temperature=0, logprobs=2)
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens == 6
    assert "".join(lp.tokens) == c.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for tok, p, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert p <= 0 and len(top) <= 2 and tok in top and abs(max(top.values()) - p) < 1e-6


def test_echo_scores_the_prompt_as_zinc_perplexity_does():
    # Both sides compute each row as it would be alone (the CPU tier's weight panels off): echo
    # asks for every prompt row's logits and perplexity for the second half's, and with panels
    # those products may take kernels whose roundings differ, which a small model's perplexity
    # over 31 tokens magnifies past the bound.
    s = Server(plugins=BATCH_INVARIANT)
    try:
        r = client(s).completions.create(model="m", prompt=TEXT, max_tokens=0, echo=True, logprobs=1)
    finally:
        s.stop()
    c = r.choices[0]
    lp = c.logprobs
    assert c.text == TEXT and r.usage.completion_tokens == 0
    n = r.usage.prompt_tokens
    assert n > 64 and len(lp.tokens) == len(lp.token_logprobs) == n
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(p is not None and p <= 0 for p in lp.token_logprobs[1:])
    # zinc perplexity over the first 64 tokens scores tokens 33..63, each from the row
    # before it, exactly what echo reported for them.
    with tempfile.TemporaryDirectory() as d:
        text, config = os.path.join(d, "text.txt"), os.path.join(d, "plugins.toml")
        with open(text, "w") as f:
            f.write(TEXT)
        with open(config, "w") as f:
            f.write(BATCH_INVARIANT)
        out = subprocess.run(
            [ZINC, "--config", config, "--backend", "cpu", "perplexity", "--json", "-f", text, "--ctx", "64",
             "--chunks", "1"],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ppl = json.loads(out.stdout)["ppl"]
    scored = lp.token_logprobs[33:64]
    from_echo = math.exp(-sum(scored) / len(scored))
    assert abs(from_echo / ppl - 1) < 1e-3, (from_echo, ppl)


def test_a_scored_prompt_can_still_generate(server):
    r = client(server).completions.create(
        model="m", prompt="One, two, three,", max_tokens=3, echo=True, logprobs=0, temperature=0)
    c = r.choices[0]
    assert c.text.startswith("One, two, three,")
    assert len(c.logprobs.tokens) == r.usage.prompt_tokens + r.usage.completion_tokens


@pytest.mark.parametrize("endpoint,body,param", [
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True,
                          "top_logprobs": 21}, "top_logprobs"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "echo": True}, "echo"),
    ("completions", {"prompt": "hi", "logprobs": 21}, "logprobs"),
    ("completions", {"prompt": "hi", "logprobs": "yes"}, "logprobs"),
    ("completions", {"prompt": "hi", "echo": True, "stream": True}, "echo"),
    ("completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
])
def test_bad_logprob_requests_are_refused_naming_the_field(server, endpoint, body, param):
    import httpx
    r = httpx.post(f"{server.url}/{endpoint}", json={"model": "m", "max_tokens": 2, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
