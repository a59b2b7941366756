#!/usr/bin/env python3
"""Soak test: a real `zinc serve` under mixed, partly hostile load for a set time.

Workers of four tenants (two interactive, one batch, one with a small KV quota) send, at
random: chat and completion requests, streamed or not, with tools or a JSON schema now and
then; long prompts; streams the client abandons part-way (a disconnect); streams whose client
stops reading (a stall, cancelled by the server after --stream-stall-secs); malformed bodies,
oversize prompts and wrong keys. At the end, with every client gone, it checks:

  * no response was a 5xx and the server never died (no panic);
  * every request completed or was refused with a 4xx (429 included);
  * KV pages back to zero in use, no request running or waiting;
  * the resident memory of the server at the end near where it stood a quarter of the way in
    (a leak grows it with every request; a warmed-up server stays flat);
  * /metrics agrees with the client: requests finished per tenant at least the completed ones
    the client counted; stalled streams counted, never more than were left unread (one held
    for 40 s may also end by itself before its buffers fill).

    python3 scripts/soak.py --minutes 20         # the documented run (starts target/release/zinc)
    python3 scripts/soak.py --minutes 2 --zinc target/debug/zinc

Prints a summary and exits non-zero on any violation.
"""
import argparse
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = {"editor": "editor-key", "chat": "chat-key", "indexer": "indexer-key", "small": "small-key"}


def sha(k):
    return hashlib.sha256(k.encode()).hexdigest()


TENANTS = f"""
max_queued_total = 128
admin_key_sha256 = "{sha('admin-key')}"
[[tenants]]
name = "editor"
key_sha256 = "{sha(KEYS['editor'])}"
weight = 2.0
[[tenants]]
name = "chat"
key_sha256 = "{sha(KEYS['chat'])}"
[[tenants]]
name = "indexer"
key_sha256 = "{sha(KEYS['indexer'])}"
priority = "batch"
[[tenants]]
name = "small"
key_sha256 = "{sha(KEYS['small'])}"
kv_page_quota = 24
max_running = 2
max_queued = 2
"""

WORDS = "the river a lighthouse keeper counted ships in winter and wrote letters to nobody".split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Soak:
    def __init__(self, url, stall_secs):
        self.url = url
        self.stall_secs = stall_secs
        self.lock = threading.Lock()
        self.outcomes = Counter()
        self.completed = Counter()
        self.violations = []
        self.stalls = 0

    def note(self, kind, tenant=None, ok=True):
        with self.lock:
            self.outcomes[kind] += 1
            if ok and tenant:
                self.completed[tenant] += 1

    def bad(self, what):
        with self.lock:
            self.violations.append(what)

    def check_status(self, r, what):
        if r.status_code >= 500:
            self.bad(f"{what}: HTTP {r.status_code} {r.text[:200]}")
            return False
        return True

    def request(self, rng, tenant):
        key = KEYS[tenant]
        h = {"Authorization": f"Bearer {key}"}
        choice = rng.random()
        with httpx.Client(base_url=self.url, headers=h, timeout=120) as c:
            if choice < 0.35:
                body = {"messages": [{"role": "user", "content": text(rng, rng.randint(3, 40))}],
                        "max_tokens": rng.randint(1, 48), "temperature": rng.choice([0, 0.7, 1.2])}
                if rng.random() < 0.15:
                    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
                r = c.post("/chat/completions", json=body)
                if self.check_status(r, "chat"):
                    self.note(f"chat {r.status_code}", tenant, r.status_code == 200)
            elif choice < 0.55:
                self.stream(c, rng, tenant, abandon=rng.random() < 0.4)
            elif choice < 0.65:
                r = c.post("/completions", json={"prompt": text(rng, rng.randint(300, 900)), "max_tokens": 4})
                if self.check_status(r, "long prompt"):
                    self.note(f"long {r.status_code}", tenant, r.status_code == 200)
            elif choice < 0.75:
                bad = rng.choice([b"{not json", b'{"messages": 5}', b'{"prompt": "x", "max_tokens": -3}',
                                  b'{"prompt": "x", "temperature": "hot"}', b'{"messages": []}'])
                r = c.post("/completions" if b"prompt" in bad else "/chat/completions", content=bad,
                           headers={"Content-Type": "application/json"})
                if self.check_status(r, "malformed") and r.status_code // 100 != 4:
                    self.bad(f"malformed body {bad!r} answered {r.status_code}")
                self.note(f"malformed {r.status_code}", None, False)
            elif choice < 0.82:
                r = c.post("/completions", json={"prompt": text(rng, 20000), "max_tokens": 8})
                if self.check_status(r, "oversize") and r.status_code // 100 != 4:
                    self.bad(f"oversize prompt answered {r.status_code}")
                self.note(f"oversize {r.status_code}", None, False)
            elif choice < 0.88:
                r = httpx.post(self.url + "/completions", json={"prompt": "hi", "max_tokens": 2},
                               headers={"Authorization": "Bearer wrong"}, timeout=30)
                if r.status_code != 401:
                    self.bad(f"wrong key answered {r.status_code}")
                self.note(f"wrong key {r.status_code}", None, False)
            elif choice < 0.91:
                # Not the small tenant: its KV quota refuses a long reply up front.
                self.stall(rng, KEYS["chat" if tenant == "small" else tenant])
            else:
                r = c.post("/completions", json={"prompt": text(rng, 12), "max_tokens": rng.randint(1, 32),
                                                 "logprobs": 2, "seed": rng.randint(0, 99)})
                if self.check_status(r, "completion"):
                    self.note(f"completion {r.status_code}", tenant, r.status_code == 200)

    def stream(self, c, rng, tenant, abandon):
        body = {"messages": [{"role": "user", "content": text(rng, 10)}], "max_tokens": rng.randint(8, 96),
                "stream": True, "ignore_eos": True}
        with c.stream("POST", "/chat/completions", json=body) as r:
            if not self.check_status(r, "stream"):
                return
            if r.status_code != 200:
                self.note(f"stream {r.status_code}", None, False)
                return
            n, stop_at = 0, rng.randint(1, 10)
            done = False
            for line in r.iter_lines():
                if line.startswith("data: "):
                    n += 1
                    if line == "data: [DONE]":
                        done = True
                    elif '"error"' in line and '"server_error"' in line:
                        self.bad(f"stream error event: {line[:200]}")
                if abandon and n >= stop_at:
                    break
            self.note("stream abandoned" if abandon and not done else "stream done", tenant, done)

    def stall(self, rng, key):
        host, port = self.url.removeprefix("http://").removesuffix("/v1").rsplit(":", 1)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(port)))
        body = json.dumps({"prompt": text(rng, 8), "max_tokens": 1800, "stream": True, "ignore_eos": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
                  + b"\r\n\r\n" + body)
        # Hold the socket unread long enough for the reply to fill the buffers (a few hundred
        # tokens, at a loaded server's pace) and wait out the stall limit, then drop it.
        time.sleep(self.stall_secs + 40)
        s.close()
        with self.lock:
            self.stalls += 1
        self.note("stall", None, False)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+)", f.read())
    return int(m.group(1))


def metrics(url):
    r = httpx.get(url.removesuffix("/v1") + "/metrics", headers={"Authorization": "Bearer admin-key"}, timeout=10)
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def metric(m, name, **labels):
    return sum(v for k, v in m.items() if k.split("{")[0] == name and all(f'{a}="{b}"' in k for a, b in labels.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--zinc", default=os.path.join(ROOT, "target", "release", "zinc"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stall-secs", type=float, default=3)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="zinc-soak-")
    with open(os.path.join(d, "tenants.toml"), "w") as f:
        f.write(TENANTS)
    log = open(os.path.join(d, "server.log"), "w+")
    proc = subprocess.Popen([args.zinc, "--backend", "cpu", "serve", "--port", "0", "--tenants",
                             os.path.join(d, "tenants.toml"), "--kv-tokens", "8192", "--ctx", "2048",
                             "--stream-stall-secs", str(args.stall_secs)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
    url = re.search(r"http://[^ ]+/v1", proc.stdout.readline()).group(0)
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    soak = Soak(url, args.stall_secs)
    start = time.time()
    end = start + args.minutes * 60
    # The baseline of resident memory is taken a quarter of the way in, once concurrent steps,
    # the grammar compiler's tables and the KV pages that load touches have been allocated: a
    # leak keeps growing after it, a warmed-up server stays flat.
    base = {}

    def baseline():
        time.sleep(args.minutes * 15)
        if proc.poll() is None:
            base["rss"] = rss_kib(proc.pid)
            print(f"soak: resident {base['rss'] // 1024} MiB a quarter of the way in (the baseline)", flush=True)

    threading.Thread(target=baseline, daemon=True).start()
    print(f"soak: {args.workers} workers for {args.minutes} min against {url}", flush=True)

    def worker(i):
        r = random.Random(args.seed * 1000 + i)
        while time.time() < end:
            try:
                soak.request(r, r.choice(list(KEYS)))
            except (httpx.TransportError, OSError) as e:
                if proc.poll() is not None:
                    soak.bad(f"the server exited with {proc.returncode}")
                    return
                soak.note(f"client error {type(e).__name__}", None, False)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(30)
        if proc.poll() is None and any(t.is_alive() for t in threads):
            m = metrics(url)
            print(f"soak: {int(end - time.time())} s left; running {metric(m, 'zinc:num_requests_running'):.0f}, "
                  f"KV {metric(m, 'zinc:kv_cache_usage_perc'):.2f}, resident {rss_kib(proc.pid) // 1024} MiB, "
                  f"{sum(soak.outcomes.values())} requests", flush=True)
    for t in threads:
        t.join()
    # Every client is gone: the server must be back to idle.
    deadline = time.time() + 30
    m = {}
    while time.time() < deadline and proc.poll() is None:
        m = metrics(url)
        if metric(m, "zinc:num_requests_running") == 0 and metric(m, "zinc:kv_cache_usage_perc") == 0 \
                and metric(m, "zinc:num_requests_waiting") == 0:
            break
        time.sleep(0.5)
    if proc.poll() is not None:
        soak.bad(f"the server exited with {proc.returncode}")
    else:
        if metric(m, "zinc:num_requests_running") or metric(m, "zinc:num_requests_waiting"):
            soak.bad("requests still running or waiting 30 s after the last client")
        if metric(m, "zinc:kv_cache_usage_perc"):
            soak.bad(f"KV pages still in use: {metric(m, 'zinc:kv_cache_usage_perc')}")
        for tenant, n in soak.completed.items():
            finished = metric(m, "zinc:tenant_requests_total", tenant=tenant)
            if finished < n:
                soak.bad(f"/metrics has {finished:.0f} finished requests for {tenant}, the client completed {n}")
        stalled = metric(m, "zinc:streams_stalled_total")
        if stalled > soak.stalls or (soak.stalls and not stalled):
            soak.bad(f"{soak.stalls} streams were left unread, /metrics counted {stalled:.0f} stalls")
        end_rss = rss_kib(proc.pid)
        base_rss = base.get("rss", end_rss)
        # Allocator slack settles within a small fraction of the warmed-up size.
        if end_rss > base_rss * 1.1 + 32 * 1024:
            soak.bad(f"resident memory grew from {base_rss // 1024} to {end_rss // 1024} MiB")
        print(f"soak: resident {base_rss // 1024} MiB at the baseline, {end_rss // 1024} MiB at the end; "
              f"stalls {soak.stalls} sent, {stalled:.0f} counted")
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
            if code != 0:
                soak.bad(f"zinc serve exited with {code} after SIGTERM")
        except subprocess.TimeoutExpired:
            proc.kill()
            soak.bad("zinc serve did not stop within 30 s of SIGTERM")
    log.seek(0)
    if "panicked" in log.read():
        soak.bad("the server log has a panic")
    print("soak: outcomes " + ", ".join(f"{k} {v}" for k, v in sorted(soak.outcomes.items())))
    print("soak: completed per tenant " + ", ".join(f"{k} {v}" for k, v in sorted(soak.completed.items())))
    if soak.violations:
        print(f"soak: {len(soak.violations)} violations (server log: {log.name})")
        for v in soak.violations[:30]:
            print("  " + v)
        sys.exit(1)
    print("soak: no violations")


if __name__ == "__main__":
    main()
