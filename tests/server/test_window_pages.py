"""Window pages on a real sliding-window model: Gemma 3 270M (512-key windows on five of every
six layers) served on the CPU tier. A long request's full-attention pages grow with its
context while its window pages stay at about one window's worth, and the greedy text is the
same as with every layer's keys kept for every position (`--kv-window-seqs 0`)."""
import os

import httpx
import openai

from conftest import BATCH_INVARIANT, ROOT, Server

GEMMA3 = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")

# About 1,500 tokens: three times the 512-key window.
PROMPT = " ".join(
    f"Entry {i}: the river town of Ashford keeps its {i}th lantern lit from dusk until dawn, "
    f"and the keeper writes the hour in a ledger."
    for i in range(46)
) + " The keeper's ledger says"

# Pages a decoding sequence may hold for 512-key windows: the window, the 64-key tile kernels
# may start before it, and the page being filled (engine/sequence.rs `window_pages_for`).
WINDOW_PAGES_PER_SEQUENCE = (512 + 64 + 15) // 16 + 2


def stream_and_watch(server):
    """Streams a greedy completion of PROMPT; returns its text and the server's page gauges
    read while it was running (after its 12th token)."""
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=300)
    text, seen, gauges = "", 0, None
    stream = client.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0, stream=True)
    for chunk in stream:
        text += chunk.choices[0].text
        seen += 1
        if seen == 12:
            status = httpx.get(server.base + "/v1/status", timeout=10).json()
            gauges = {
                "kv_pages_used": status["kv_pages"]["used"],
                "kv_window_pages_used": status["kv_window_pages"]["used"],
                "kv_window_pages_total": status["kv_window_pages"]["total"],
            }
    assert gauges is not None, f"the stream ended after {seen} chunks"
    return text, gauges


def test_a_long_gemma3_request_holds_one_window_of_window_pages_and_the_same_text():
    assert os.path.isfile(GEMMA3), "run scripts/fetch-model.sh gemma3 (scripts/test.sh does)"
    common = ["--model", GEMMA3, "--kv-tokens", "4096"]
    windowed = Server(args=common, plugins=BATCH_INVARIANT)
    try:
        text, gauges = stream_and_watch(windowed)
        assert gauges["kv_window_pages_total"] > 0
        # The full pages cover the whole context (~1,500 tokens: over 90 pages); the window
        # pages only what the windows read.
        assert gauges["kv_pages_used"] > 80, gauges
        assert 0 < gauges["kv_window_pages_used"] <= WINDOW_PAGES_PER_SEQUENCE, gauges
        after = httpx.get(windowed.base + "/v1/status", timeout=10).json()["kv_window_pages"]
        assert after["used"] == 0, "released with the request"
        assert windowed.metric("zinc:kv_window_pages_total") == gauges["kv_window_pages_total"]
        # The same prompt again: its full pages come from the prefix cache with the window
        # pages that its first new token's window reads, and the text is the same.
        client = openai.OpenAI(base_url=windowed.url, api_key="none", max_retries=0, timeout=300)
        again = client.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens > 1200, again.usage
        assert again.choices[0].text == text
    finally:
        windowed.stop()
    whole = Server(args=[*common, "--kv-window-seqs", "0"], plugins=BATCH_INVARIANT)
    try:
        whole_text, whole_gauges = stream_and_watch(whole)
        assert whole_gauges["kv_window_pages_total"] == 0
        assert whole_gauges["kv_pages_used"] == gauges["kv_pages_used"]
    finally:
        whole.stop()
    assert text == whole_text and len(text) > 0
