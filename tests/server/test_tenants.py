"""Tenants over real sockets: keys, limits (429 with Retry-After), quotas, prefix-cache
isolation between tenants, and shared prefixes."""
import threading
import time

import httpx
import openai
import pytest


def client(server, key):
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=120)


def test_missing_or_unknown_key_is_401(tenant_server):
    r = httpx.post(tenant_server.url + "/completions", json={"prompt": "hi", "max_tokens": 1})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        client(tenant_server, "wrong").completions.create(model="m", prompt="hi", max_tokens=1)
    assert client(tenant_server, "alice-key").completions.create(model="m", prompt="hi", max_tokens=1).choices


def test_the_bearer_scheme_is_matched_in_any_case_and_no_other_scheme_is(tenant_server):
    for scheme in ["Bearer", "bearer", "BEARER"]:
        r = httpx.get(tenant_server.url + "/usage", headers={"Authorization": f"{scheme} alice-key"})
        assert r.status_code == 200 and r.json()["tenant"] == "alice", (scheme, r.text)
    r = httpx.get(tenant_server.url + "/usage", headers={"Authorization": "Basic alice-key"})
    assert r.status_code == 401, r.text


def test_request_over_the_tenant_quota_is_400(tenant_server):
    # tiny's quota is 8 pages = 128 tokens.
    with pytest.raises(openai.BadRequestError) as e:
        client(tenant_server, "tiny-key").completions.create(model="m", prompt="hello", max_tokens=200)
    assert "quota" in str(e.value)


def test_queue_limit_answers_429_with_retry_after(tenant_server):
    # tiny may run 1 request and queue 1: the third concurrent one is refused.
    c = client(tenant_server, "tiny-key")
    first_started = threading.Event()
    results = {}

    def long_stream(name):
        stream = c.completions.create(model="m", prompt="Count slowly:", max_tokens=100, stream=True, temperature=0)
        for i, _ in enumerate(stream):
            if i == 1:
                first_started.set()
        results[name] = "done"

    t1 = threading.Thread(target=long_stream, args=("one",))
    t1.start()
    assert first_started.wait(60)
    t2 = threading.Thread(target=long_stream, args=("two",))
    t2.start()
    # Wait until the second is queued behind the first (max_running = 1).
    deadline = time.time() + 20
    while tenant_server.metric("zinc:tenant_requests_waiting", tenant="tiny") < 1 and time.time() < deadline:
        time.sleep(0.05)
    r = httpx.post(tenant_server.url + "/completions", json={"prompt": "third", "max_tokens": 5},
                   headers={"Authorization": "Bearer tiny-key"})
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["type"] == "rate_limit_error"
    t1.join(120)
    t2.join(120)
    assert results == {"one": "done", "two": "done"}
    assert tenant_server.metric("zinc:tenant_rejected_total", tenant="tiny") >= 1


PROMPT = ("Tenant isolation check. " * 12) + "Please answer briefly."


def test_one_tenant_never_hits_another_tenants_private_pages(tenant_server):
    a, b = client(tenant_server, "alice-key"), client(tenant_server, "bob-key")
    first = a.completions.create(model="m", prompt=PROMPT, max_tokens=1)
    assert first.usage.prompt_tokens >= 48
    again = a.completions.create(model="m", prompt=PROMPT, max_tokens=1)
    assert again.usage.prompt_tokens_details.cached_tokens >= 32, "alice reuses her own pages"
    other = b.completions.create(model="m", prompt=PROMPT, max_tokens=1)
    assert other.usage.prompt_tokens_details.cached_tokens == 0, "bob must not hit alice's pages"


def test_declared_shared_prefix_is_shared_across_tenants(tenant_server):
    system = ("Shared system prompt for every tenant of this test server, long enough to fill several KV "
              "pages of sixteen tokens each, so that the prefix cache can be exercised across tenants.")
    msgs = lambda q: [{"role": "system", "content": system}, {"role": "user", "content": q}]
    client(tenant_server, "alice-key").chat.completions.create(model="m", messages=msgs("Hi from alice"), max_tokens=1)
    r = client(tenant_server, "bob-key").chat.completions.create(model="m", messages=msgs("Hello from bob"), max_tokens=1)
    # Whole pages are shared, and the page holding the prefix's tail is copied (copy-on-write),
    # so bob reuses the declared prefix to the token: not a whole number of pages.
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached >= 32 and cached % 16 != 0, r.usage
    u = httpx.get(tenant_server.url + "/usage", headers={"Authorization": "Bearer bob-key"}).json()
    assert u["tenant"] == "bob" and u["prefix_cache_hits"] >= 1 and u["cached_prompt_tokens"] >= 16


def test_usage_is_per_tenant(tenant_server):
    ua = httpx.get(tenant_server.url + "/usage", headers={"Authorization": "Bearer alice-key"}).json()
    ub = httpx.get(tenant_server.url + "/usage", headers={"Authorization": "Bearer batchy-key"}).json()
    assert ua["tenant"] == "alice" and ua["prompt_tokens"] > 0
    assert ub["tenant"] == "batchy" and ub["prompt_tokens"] == 0


COUNT_PROMPT = ", ".join(str(i) for i in range(1, 89)) + ","  # about 350 tokens


def _count(c, n):
    r = c.completions.create(model="m", prompt=COUNT_PROMPT, max_tokens=n, temperature=0)
    return r.choices[0].text


def _preemption_case(swap_mib):
    from conftest import BATCH_INVARIANT, TENANTS, Server
    # 32 KV pages (512 tokens) in all. The batch stream (about 350 prompt tokens and 100
    # generated) needs about 28 of them, so interactive requests can only run by preempting it.
    s = Server(args=["--ctx", "512", "--kv-tokens", "512", "--swap-mib", str(swap_mib)], tenants=TENANTS,
               plugins=BATCH_INVARIANT)
    try:
        batch, alice = client(s, "batchy-key"), client(s, "alice-key")
        alone = _count(batch, 100)
        results = {}
        t = threading.Thread(target=lambda: results.setdefault("batch", _count(batch, 100)))
        t.start()
        deadline = time.time() + 60
        while s.metric("zinc:tenant_kv_pages", tenant="batchy") < 22 and time.time() < deadline:
            time.sleep(0.02)
        hi = [threading.Thread(target=lambda k=k: results.setdefault(k, alice.completions.create(
            model="m", prompt=f"Question {k}: " + "describe the sea. " * 12, max_tokens=40, temperature=0).choices[0].text))
              for k in range(2)]
        for h in hi:
            h.start()
        for h in hi:
            h.join(300)
        t.join(300)
        preemptions = s.metric("zinc:num_preemptions_total")
        print(f"preemptions: {preemptions:.0f} (swap budget {swap_mib} MiB)")
        assert preemptions >= 1, "the batch stream should have been preempted"
        # Preempted and resumed (swap-in or recompute), the greedy output must be unchanged.
        assert results["batch"] == alone
        assert all(results[k] for k in range(2))
    finally:
        s.stop()


def test_preemption_by_swapping_keeps_the_batch_output_exact():
    _preemption_case(swap_mib=256)


def test_preemption_by_recompute_keeps_the_batch_output_exact():
    _preemption_case(swap_mib=0)


def test_copy_on_write_prefix_gives_the_same_answer_as_no_cache(tenant_server):
    from conftest import BATCH_INVARIANT, TENANTS, Server
    system = ("Shared system prompt for every tenant of this test server, long enough to fill several KV "
              "pages of sixteen tokens each, so that the prefix cache can be exercised across tenants.")
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "List three colours."}]
    client(tenant_server, "alice-key").chat.completions.create(
        model="m", messages=[{"role": "system", "content": system}, {"role": "user", "content": "Warm the cache."}], max_tokens=2)
    cached = client(tenant_server, "bob-key").chat.completions.create(model="m", messages=msgs, max_tokens=24, temperature=0)
    assert cached.usage.prompt_tokens_details.cached_tokens > 0
    fresh_server = Server(tenants=TENANTS, plugins=BATCH_INVARIANT)
    try:
        fresh = client(fresh_server, "bob-key").chat.completions.create(model="m", messages=msgs, max_tokens=24, temperature=0)
    finally:
        fresh_server.stop()
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert cached.choices[0].message.content == fresh.choices[0].message.content


def test_a_tenant_at_its_kv_quota_waits_without_blocking_others(tenant_server):
    # capped may hold 16 pages (256 tokens). Each of its requests reserves ~10 pages (a short
    # prompt plus 150 tokens), so only one runs at a time, although max_running is 4; another
    # tenant's request is admitted meanwhile.
    capped, bob = client(tenant_server, "capped-key"), client(tenant_server, "bob-key")
    done = {}

    def run(name):
        r = capped.completions.create(model="m", prompt="1, 2, 3, 4, 5,", max_tokens=150, temperature=0)
        done[name] = (time.time(), r.usage.completion_tokens)

    t1 = threading.Thread(target=run, args=("first",))
    t1.start()
    deadline = time.time() + 30
    while tenant_server.metric("zinc:tenant_requests_running", tenant="capped") < 1 and time.time() < deadline:
        time.sleep(0.02)
    t2 = threading.Thread(target=run, args=("second",))
    t2.start()
    time.sleep(0.5)
    assert tenant_server.metric("zinc:tenant_requests_running", tenant="capped") == 1
    assert tenant_server.metric("zinc:tenant_requests_waiting", tenant="capped") == 1
    r = bob.completions.create(model="m", prompt="Hello", max_tokens=4)
    assert r.choices[0].text is not None
    bob_done = time.time()
    t1.join(120)
    t2.join(120)
    assert bob_done < done["first"][0], "bob must not wait behind the capped tenant's queue"
    assert done["second"][0] > done["first"][0]
    assert tenant_server.metric("zinc:tenant_kv_pages", tenant="capped") <= 16


def _batch_streams(server, n, max_tokens):
    """Starts `n` batchy streams of `max_tokens` tokens each and returns once all are running,
    with the threads and the list their completion-token counts are appended to."""
    batch, done = client(server, "batchy-key"), []

    def stream(k):
        r = batch.completions.create(model="m", prompt=f"Batch job {k}: describe a river.", max_tokens=max_tokens,
                                     temperature=0.7, extra_body={"ignore_eos": True})
        done.append(r.usage.completion_tokens)

    threads = [threading.Thread(target=stream, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    deadline = time.time() + 60
    while server.metric("zinc:tenant_requests_running", tenant="batchy") < n and time.time() < deadline:
        time.sleep(0.01)
    return threads, done


def test_an_interactive_prompt_gets_its_step_without_batch_decodes(tenant_server):
    # batchy (batch class) keeps four long streams decoding; alice (interactive) asks three
    # short questions meanwhile. Each of alice's prompts must run in a step of its own — the
    # batch streams' decodes wait that one step (counted on /metrics) — and the batch streams
    # must still get every token they asked for.
    before = tenant_server.metric("zinc:batch_decodes_deferred_total")
    alice = client(tenant_server, "alice-key")
    threads, done = _batch_streams(tenant_server, 4, 200)
    for k in range(3):
        r = alice.completions.create(model="m", prompt=f"Quick question {k}: name a colour.", max_tokens=4,
                                     extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 4
    still_running = tenant_server.metric("zinc:tenant_requests_running", tenant="batchy")
    for t in threads:
        t.join(300)
    deferred = tenant_server.metric("zinc:batch_decodes_deferred_total") - before
    print(f"batch decodes deferred for alice's prompts: {deferred:.0f}")
    assert still_running >= 1, "the batch streams ended before alice's questions: nothing was tested"
    assert deferred >= 3, f"alice's prompts shared their steps with batch decodes ({deferred:.0f} deferred)"
    assert done == [200] * 4, f"batch streams lost tokens: {done}"


def test_batch_steps_stay_short_while_an_interactive_tenant_is_active(tenant_server):
    # Sixteen batch streams decode together; one short interactive request makes the engine
    # keep batch steps about as long as that request's step for the next seconds, so the
    # sixteen take turns (counted on /metrics) and each still gets every token.
    before = tenant_server.metric("zinc:batch_decodes_shortened_total")
    alice = client(tenant_server, "alice-key")
    threads, done = _batch_streams(tenant_server, 16, 120)
    alice.completions.create(model="m", prompt="Hi.", max_tokens=2, extra_body={"ignore_eos": True})
    for t in threads:
        t.join(300)
    shortened = tenant_server.metric("zinc:batch_decodes_shortened_total") - before
    print(f"batch decodes left to a later step while alice was active: {shortened:.0f}")
    assert shortened > 0, "batch steps kept all sixteen decodes while an interactive tenant was active"
    assert done == [120] * 16, f"batch streams lost tokens: {done}"


def test_metrics_need_the_operators_key_where_tenants_exist(tenant_server):
    # They name every tenant and its usage.
    url = tenant_server.base + "/metrics"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer alice-key"}, timeout=10).status_code == 401
    r = httpx.get(url, headers={"Authorization": "Bearer admin-key"}, timeout=10)
    assert r.status_code == 200 and 'tenant="alice"' in r.text
