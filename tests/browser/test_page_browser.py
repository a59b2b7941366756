"""The built-in page in a real browser: Debian's Chromium driven by Playwright for Python,
against real `zinc serve` processes (the server tests' fixtures). Run by
scripts/test-browser.sh, which installs both.
"""
import os
import sys
import threading
import time

import httpx
import openai
import pytest
from playwright.sync_api import sync_playwright, expect

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "server"))
from conftest import TENANTS, Server  # noqa: E402

CHROMIUM = os.environ.get("ZINC_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tenant_server():
    s = Server(tenants=TENANTS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.errors = []
    pg.on("console", lambda m: m.type == "error" and pg.errors.append(m.text))
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    ctx.close()


def status(server, key=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(server.url + "/status", headers=h, timeout=10).json()


def test_a_message_streams_a_reply(server, page):
    page.goto(server.base + "/")
    expect(page.locator("#model")).to_have_text("SmolLM2-135M-Instruct.Q4_1")
    expect(page.locator("#where")).to_contain_text("backend cpu")
    page.fill("#maxtokens", "24")
    page.fill("#prompt", "Say hello in three words.")
    page.click("#send")
    reply = page.locator(".msg").nth(1)
    expect(reply.locator(".meta")).to_contain_text("tokens/s", timeout=30_000)
    assert reply.locator(".text").inner_text().strip(), "the reply is empty"
    assert page.errors == [], page.errors


def test_stop_cancels_the_reply_and_frees_its_pages(server, page):
    page.goto(server.base + "/")
    page.fill("#maxtokens", "3000")
    page.fill("#temperature", "1.5")
    page.fill("#prompt", "Write a very long story about a lighthouse keeper.")
    page.click("#send")
    reply = page.locator(".msg").nth(1)
    expect(reply.locator(".text")).not_to_have_text("", timeout=30_000)
    assert status(server)["kv_pages"]["used"] > 0
    page.click("#stop")
    expect(reply.locator(".meta")).to_have_text("stopped")
    deadline = time.time() + 10
    while status(server)["kv_pages"]["used"] != 0 and time.time() < deadline:
        time.sleep(0.1)
    s = status(server)
    assert s["kv_pages"]["used"] == 0 and s["requests"]["running"] == 0, s
    assert page.errors == [], page.errors


def test_the_runtime_view_follows_a_background_client(server, page):
    page.goto(server.base + "/")
    expect(page.locator("#running")).to_have_text("0", timeout=10_000)
    done = threading.Event()

    def generate():
        c = openai.OpenAI(base_url=server.url, api_key="none")
        for _ in c.completions.create(model="m", prompt="Once upon a time", max_tokens=400, stream=True,
                                      extra_body={"ignore_eos": True}):
            if done.is_set():
                break

    t = threading.Thread(target=generate)
    t.start()
    try:
        expect(page.locator("#running")).to_have_text("1", timeout=20_000)
        # The pool map colours the stream's pages and the chart gets points.
        expect(page.locator("#tenants tr")).to_have_count(1)
        expect(page.locator("#pagecount")).not_to_contain_text("(0 used")
        page.wait_for_function("document.getElementById('tps').textContent !== '–' && Number(document.getElementById('tps').textContent) > 0", timeout=20_000)
    finally:
        done.set()
        t.join()
    assert page.errors == [], page.errors


def test_a_wrong_key_is_refused_and_a_right_one_chats(tenant_server, page):
    page.goto(tenant_server.base + "/")
    expect(page.locator("#keybox")).to_be_visible(timeout=10_000)
    expect(page.locator("#model")).to_have_text("this server needs an API key")
    page.fill("#key", "not-a-key")
    page.click("#savekey")
    expect(page.locator("#model")).to_have_text("the key was refused", timeout=10_000)
    page.fill("#prompt", "Hello")
    page.click("#send")
    expect(page.locator("#error")).to_contain_text("API key", timeout=10_000)
    page.fill("#key", "alice-key")
    page.click("#savekey")
    expect(page.locator("#scope")).to_have_text("(yours: alice)", timeout=10_000)
    page.fill("#maxtokens", "8")
    page.fill("#prompt", "Hello")
    page.click("#send")
    expect(page.locator(".msg").last.locator(".meta")).to_contain_text("tokens/s", timeout=30_000)
    # Console errors from the refused requests (HTTP 401) are the browser's own reports.
    assert all("401" in e for e in page.errors), page.errors
