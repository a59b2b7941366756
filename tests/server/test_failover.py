"""Failover: a backend lost while serving hands its requests in flight to the next backend in
the fallback chain, and none is lost. The failing backend is a fixture plugin
(tests/fixtures/faulty-plugin): the CPU tier's executor ranked above every real backend,
failing every step from a chosen one on with a device error."""
import os
import shutil
import threading

import httpx
import openai

from conftest import ROOT, Server

# Rows computed one way whatever the batch, on one thread, for the failing plugin and the CPU
# tier alike, so greedy text up to the failure is the CPU tier's alone. After it each request
# recomputes its tokens so far as one prompt chunk, whose attention sums in another order than
# one-row decodes: a near-tie may then go the other way, as after a preemption.
CPU = "[plugins.cpu]\npanels = false\nthreads = 1\n"
PROMPTS = ["Name three colours.", "Count from one to ten.", "What is a cat?", "Write a haiku about rain."]


def streams(server):
    """The four prompts streamed at once, 24 tokens each: (text, finish reason, completion
    tokens) per prompt."""
    out, errors = {}, []

    def one(i):
        try:
            c = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=300)
            text, finish, tokens = "", None, None
            for chunk in c.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": PROMPTS[i]}], max_tokens=24, temperature=0,
                    stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
            out[i] = (text, finish, tokens)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return [out[i] for i in range(len(PROMPTS))]


def test_a_backend_lost_mid_serving_hands_its_streams_to_the_next_and_none_is_lost(tmp_path):
    alone = Server(plugins=CPU)
    try:
        expected = streams(alone)
    finally:
        alone.stop()
    # The fixture under a backend plugin's name in a directory of its own; the CPU tier comes
    # from the binary's directory.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(os.path.join(ROOT, "target", "debug", "libzinc_fixture_faulty.so"),
                plugins / "libzinc_backend_faulty.so")
    config = f'search_paths = ["{plugins}"]\n[plugins.faulty]\nfail_from_step = "12"\n' + CPU
    server = Server(plugins=config, backend=None)
    try:
        status = httpx.get(server.base + "/v1/status", timeout=10).json()
        assert status["backend"] == "faulty", status["backend"]
        got = streams(server)
        # Every stream ends whole: its 24 tokens, none sent twice.
        assert all(finish == "length" and tokens == 24 for _, finish, tokens in got), got
        # Up to the failure (step 12: the prompts, then about ten tokens each) the text is the
        # CPU tier's alone.
        for (text, _, _), (alone_text, _, _) in zip(got, expected):
            assert len(os.path.commonprefix([text, alone_text])) >= 20, (text, alone_text)
        status = httpx.get(server.base + "/v1/status", timeout=10).json()
        assert status["backend"] == "cpu" and status["failovers"] == 1, status
        assert server.metric("zinc:failovers_total") == 1
        # Every page of the failed backend's pool is gone with it; the new pool is free again.
        assert status["kv_pages"]["used"] == 0, status["kv_pages"]
        server.log.seek(0)
        assert "backend faulty failed; serving on cpu" in server.log.read()
    finally:
        server.stop()
