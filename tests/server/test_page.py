"""The built-in page (`GET /`) and the status JSON it polls (`GET /v1/status`), over HTTP.

The page itself is driven in a real browser by tests/browser/test_page_browser.py.
"""
import re
import threading
import time

import httpx
import openai


def test_page_is_one_offline_file(server):
    r = httpx.get(server.base + "/", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    # Everything inline: no script, style or image from another host (it must work offline).
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", r.text), "the page loads something from elsewhere"
    assert "/v1/chat/completions" in r.text and "/v1/status" in r.text


def test_status_follows_a_stream_and_gives_its_pages_back(server):
    before = httpx.get(server.url + "/status", timeout=10).json()
    assert before["backend"] == "cpu" and before["scope"] == "all" and before["tenants_file"] is False
    k = before["kv_pages"]
    assert k["used"] + k["cached"] + k["free"] == k["total"] > 0
    seen = {}

    def watch():
        deadline = time.time() + 30
        while time.time() < deadline and "running" not in seen:
            s = httpx.get(server.url + "/status", timeout=10).json()
            if s["requests"]["running"] >= 1 and s["kv_pages"]["used"] > 0:
                seen["running"] = s
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    c = openai.OpenAI(base_url=server.url, api_key="none")
    n = 0
    for chunk in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Count to fifty."}],
                                           max_tokens=96, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}):
        n += 1
    watcher.join()
    assert "running" in seen, "the status never showed the running stream"
    after = httpx.get(server.url + "/status", timeout=10).json()
    assert after["requests"]["running"] == 0 and after["kv_pages"]["used"] == 0
    assert after["tokens"]["generated"] - before["tokens"]["generated"] == 96
    assert after["latency"]["time_to_first_token"]["count"] == before["latency"]["time_to_first_token"]["count"] + 1


def test_status_shows_a_tenant_its_own_row_and_no_prompts(tenant_server):
    url = tenant_server.url + "/status"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    marker = "zebra-marker-4711"
    bob = openai.OpenAI(base_url=tenant_server.url, api_key="bob-key")
    bob.chat.completions.create(model="m", messages=[{"role": "user", "content": marker}], max_tokens=4)
    alice = httpx.get(url, headers={"Authorization": "Bearer alice-key"}, timeout=10)
    assert alice.status_code == 200
    a = alice.json()
    assert a["scope"] == "tenant" and a["tenant"] == "alice"
    assert [t["name"] for t in a["tenants"]] in ([], ["alice"])
    assert "bob" not in alice.text and marker not in alice.text
    admin = httpx.get(url, headers={"Authorization": "Bearer admin-key"}, timeout=10).json()
    assert admin["scope"] == "all" and "bob" in [t["name"] for t in admin["tenants"]]
    assert marker not in str(admin)
