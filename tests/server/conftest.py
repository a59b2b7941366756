"""Starts real `zinc serve` processes on loopback for the server tests.

Each server gets a free port (--port 0; the URL is read from its first line of output) and
is stopped with SIGTERM at the end, which must exit cleanly.
"""
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZINC = os.environ.get("ZINC_BIN", os.path.join(ROOT, "target", "debug", "zinc"))


def key_hash(key):
    return hashlib.sha256(key.encode()).hexdigest()


# CPU plugin options for servers whose tests compare greedy outputs across batching, cache
# hits or preemption: the weight panels that prompt chunks take by default compute a row
# differently from the one-row kernels, which may flip a near-tie.
BATCH_INVARIANT = "[plugins.cpu]\npanels = false\n"


class Server:
    def __init__(self, args=(), tenants=None, plugins=None, backend="cpu"):
        self.dir = tempfile.mkdtemp(prefix="zinc-server-")
        defaults = [] if "--kv-tokens" in args else ["--kv-tokens", "16384"]
        config = []
        if plugins is not None:
            path = os.path.join(self.dir, "plugins.toml")
            with open(path, "w") as f:
                f.write(plugins)
            config = ["--config", path]
        # Forced to the CPU tier unless told otherwise (None: the best backend, with failover).
        forced = ["--backend", backend] if backend else []
        cmd = [ZINC, *config, *forced, "serve", "--port", "0", *defaults, *args]
        if tenants is not None:
            path = os.path.join(self.dir, "tenants.toml")
            with open(path, "w") as f:
                f.write(tenants)
            cmd += ["--tenants", path]
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://[^ ]+/v1", line)
        if not m:
            self.proc.kill()
            self.log.seek(0)
            raise RuntimeError(f"zinc serve did not start: {line!r}\n{self.log.read()}")
        self.url = m.group(0)
        self.base = self.url[: -len("/v1")]
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def metrics(self):
        r = httpx.get(self.base + "/metrics", headers={"Authorization": "Bearer admin-key"}, timeout=10)
        assert r.status_code == 200, r.text
        text = r.text
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name_labels, value = line.rsplit(" ", 1)
            out[name_labels] = float(value)
        return out

    def metric(self, name, **labels):
        total = 0.0
        for k, v in self.metrics().items():
            if k.split("{")[0] == name and all(f'{a}="{b}"' in k for a, b in labels.items()):
                total += v
        return total

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("zinc serve did not stop within 30 s of SIGTERM")
            assert code == 0, f"zinc serve exited with {code} after SIGTERM"


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


TENANTS = f"""
max_queued_total = 64
admin_key_sha256 = "{key_hash('admin-key')}"

[[tenants]]
name = "alice"
key_sha256 = "{key_hash('alice-key')}"
weight = 1.0

[[tenants]]
name = "bob"
key_sha256 = "{key_hash('bob-key')}"
weight = 1.0

[[tenants]]
name = "tiny"
key_sha256 = "{key_hash('tiny-key')}"
kv_page_quota = 8
max_running = 1
max_queued = 1

[[tenants]]
name = "capped"
key_sha256 = "{key_hash('capped-key')}"
kv_page_quota = 16
max_running = 4

[[tenants]]
name = "batchy"
key_sha256 = "{key_hash('batchy-key')}"
priority = "batch"

[[shared_prefixes]]
text = "<|im_start|>system\\nShared system prompt for every tenant of this test server, long enough to fill several KV pages of sixteen tokens each, so that the prefix cache can be exercised across tenants.<|im_end|>\\n"
"""


@pytest.fixture(scope="module")
def tenant_server():
    s = Server(tenants=TENANTS, plugins=BATCH_INVARIANT)
    yield s
    s.stop()
