"""Connections as a hostile client holds them: stalled headers, more sockets than the cap,
an unauthenticated body, SIGTERM with a connection half open."""
import socket
import time

import httpx

from conftest import TENANTS, Server


def _connect(server):
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=15)
    return s


def _closed_within(sock, seconds):
    """Whether the server closes `sock` (or answers and closes it) within `seconds`."""
    sock.settimeout(seconds)
    start = time.time()
    try:
        while time.time() - start < seconds:
            if not sock.recv(4096):
                return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True
    return False


def test_partial_headers_are_cut_off_after_the_header_timeout():
    s = Server(args=["--header-timeout-secs", "1"])
    try:
        sock = _connect(s)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert _closed_within(sock, 10), "a connection stalled in its headers must be closed"
        assert httpx.get(s.base + "/health", timeout=10).status_code == 200
    finally:
        s.stop()


def test_connections_over_the_cap_are_closed_and_the_server_keeps_serving():
    s = Server(args=["--max-connections", "4", "--header-timeout-secs", "30"])
    try:
        idle = [_connect(s) for _ in range(4)]
        time.sleep(0.5)
        extra = _connect(s)
        assert _closed_within(extra, 10), "a fifth connection must be closed at once"
        for sock in idle:
            sock.close()
        time.sleep(0.5)
        assert httpx.get(s.base + "/health", timeout=10).status_code == 200
    finally:
        s.stop()


def test_an_unauthenticated_body_is_refused_before_it_is_sent():
    s = Server(tenants=TENANTS)
    try:
        sock = _connect(s)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n")
        sock.settimeout(10)
        head = sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 401"), head[:100]
    finally:
        s.stop()


def test_sigterm_ends_the_server_despite_a_stalled_connection():
    # A connection that never finishes its headers (their timeout 120 s) holds the shutdown
    # only for the grace period (1 s here; 10 by default).
    s = Server(args=["--header-timeout-secs", "120", "--shutdown-grace-secs", "1"])
    sock = _connect(s)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    time.sleep(0.3)
    start = time.time()
    s.stop()  # asserts a clean exit within 30 s
    assert time.time() - start < 6
    sock.close()


def test_a_public_bind_without_tenants_refuses_to_start():
    import subprocess

    from conftest import ROOT, ZINC
    r = subprocess.run([ZINC, "--backend", "cpu", "serve", "--host", "0.0.0.0", "--port", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--tenants" in r.stderr and "--insecure-open" in r.stderr, r.stderr[-500:]


def test_a_foreign_host_or_origin_is_refused(server):
    # DNS rebinding names the attacker's host; a cross-site page sends its origin.
    assert httpx.get(server.base + "/health", headers={"Host": "evil.example"}, timeout=10).status_code == 403
    r = httpx.post(server.url + "/completions", json={"prompt": "Hi", "max_tokens": 1},
                   headers={"Origin": "https://evil.example"}, timeout=30)
    assert r.status_code == 403 and "evil.example" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/completions", json={"prompt": "Hi", "max_tokens": 1},
                   headers={"Origin": server.base}, timeout=30)
    assert r.status_code == 200


def test_requests_without_a_seed_sample_differently(server):
    texts = set()
    for _ in range(3):
        r = httpx.post(server.url + "/completions", timeout=60,
                       json={"prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.5, "top_k": 0,
                             "top_p": 1.0, "ignore_eos": True})
        texts.add(r.json()["choices"][0]["text"])
    assert len(texts) > 1, texts


def test_a_declared_length_over_the_limit_is_refused_before_the_body(server):
    sock = _connect(server)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 50000000\r\n\r\n")
    sock.settimeout(10)
    head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 413"), head[:100]
    sock.close()


def test_a_stream_nobody_reads_is_cancelled_and_its_pages_freed():
    s = Server(args=["--stream-stall-secs", "1"])
    try:
        host, port = s.base.removeprefix("http://").rsplit(":", 1)
        sock = socket.socket()
        # A small receive window: the server's buffers fill after a few hundred events.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        body = (b'{"messages":[{"role":"user","content":"Tell a long story."}],"max_tokens":6000,'
                b'"stream":true,"ignore_eos":true}')
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        # Never read. The request must be cancelled (not run to its 6,000 tokens) while the
        # socket stays open, and its pages come back.
        deadline = time.time() + 60
        while time.time() < deadline and s.metric("zinc:streams_stalled_total") < 1:
            time.sleep(0.2)
        assert s.metric("zinc:streams_stalled_total") == 1, "the unread stream was not cancelled within 60 s"
        while time.time() < deadline and s.metric("zinc:kv_cache_usage_perc") > 0:
            time.sleep(0.1)
        assert s.metric("zinc:kv_cache_usage_perc") == 0
        assert s.metric("zinc:num_requests_running") == 0
        sock.close()
    finally:
        s.stop()
