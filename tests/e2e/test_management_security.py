"""The management listener against a hostile web page and hostile clients, over real sockets:
cross-site form posts (415 for a body that is not JSON), foreign Origins on changes (403), framing
headers, deeply nested JSON (400, not 500), and slow clients (slowloris) that must neither exhaust
the connection slots nor hold one forever."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from e2ekit import ops_server, wait_until

from servers.management import OpsListeners
from servers.management.channel import DeadlineChannel

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


class Api:
    def __init__(self, ops: OpsListeners) -> None:
        self.port = ops.bound["http"][1]
        self.prometheus = ops.bound["prometheus"][1]

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers={"Authorization": AUTH, **(headers or {})})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(data) if data[:1] in (
                b"{", b"[") else data
        finally:
            conn.close()

    def user_exists(self, name: str) -> bool:
        return self.request("GET", f"/api/users/{name}")[0] == 200


@pytest.fixture()
def api() -> Iterator[Api]:
    with ops_server() as (_, ops):
        yield Api(ops)


JSON = {"Content-Type": "application/json"}
ADMIN_DOC = json.dumps({"users": [{"name": "mallory", "password": "x", "tags": "administrator"}]}).encode()


def test_a_cross_site_text_plain_form_post_cannot_create_an_administrator(api: Api) -> None:
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, _, body = api.request("POST", "/api/definitions", ADMIN_DOC, {"Content-Type": kind})
        assert status == 415 and body["error"] == "unsupported_media_type", (kind, status, body)
    status, _, _ = api.request("POST", "/api/definitions", ADMIN_DOC, {})  # no type at all
    assert status == 415
    assert not api.user_exists("mallory")
    assert api.request("POST", "/api/definitions", ADMIN_DOC, {"Content-Type": "application/json; charset=utf-8"}
                       )[0] in (200, 204)
    assert api.user_exists("mallory")


def test_a_put_without_a_body_needs_no_content_type(api: Api) -> None:
    assert api.request("PUT", "/api/vhosts/empty-put")[0] == 201  # curl -X PUT, as RabbitMQ's docs do


def test_foreign_origins_are_refused_on_changes(api: Api) -> None:
    here = f"http://127.0.0.1:{api.port}"
    for origin in ("http://evil.example", f"https://127.0.0.1:{api.port}", "http://127.0.0.1:1", "null"):
        status, _, body = api.request("PUT", "/api/vhosts/from-evil", b"{}", {**JSON, "Origin": origin})
        assert status == 403 and body["error"] == "forbidden", origin
        assert api.request("DELETE", "/api/vhosts/%2F", None, {"Origin": origin})[0] == 403
    assert api.request("GET", "/api/vhosts/from-evil")[0] == 404
    assert api.request("GET", "/api/overview", None, {"Origin": "http://evil.example"})[0] == 200  # reads: no CORS
    assert api.request("PUT", "/api/vhosts/from-here", b"{}", {**JSON, "Origin": here})[0] == 201
    proxied = {"X-Forwarded-Host": "mq.example.com", "X-Forwarded-Proto": "https"}  # TLS ended by a proxy
    assert api.request("PUT", "/api/vhosts/via-proxy", b"{}", {**JSON, **proxied,
                                                                "Origin": "https://mq.example.com"})[0] == 201
    assert api.request("PUT", "/api/vhosts/via-proxy2", b"{}", {**JSON, **proxied,
                                                                 "Origin": "http://mq.example.com"})[0] == 403


def test_every_answer_refuses_framing(api: Api) -> None:
    for path, user in (("/api/overview", AUTH), ("/api/overview", "Basic eDp5"), ("/", AUTH), ("/nope.js", AUTH)):
        status, headers, _ = api.request("GET", path, headers={"Authorization": user})
        assert headers["x-frame-options"] == "DENY", (path, status)
        assert "frame-ancestors 'none'" in headers["content-security-policy"]


@pytest.mark.parametrize("doc", [b"[" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
                                 json.dumps({"arguments": json.loads("[" * 200 + "]" * 200)}).encode()])
def test_deeply_nested_json_is_a_400(api: Api, doc: bytes) -> None:
    status, _, body = api.request("PUT", "/api/queues/%2F/deep", doc, JSON)
    assert status == 400 and body["error"] == "bad_request" and "nested deeper" in body["reason"]
    status, _, body = api.request("POST", "/api/definitions", doc, JSON)
    assert status == 400 and "nested deeper" in body["reason"]
    assert api.request("GET", "/api/queues/%2F/deep")[0] == 404


def _slow_clients(port: int, n: int, stop: threading.Event) -> list[socket.socket]:
    """``n`` clients sending a request head a line at a time, never finishing it."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)

    def trickle() -> None:
        while not stop.wait(0.5):
            for s in socks:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    threading.Thread(target=trickle, daemon=True).start()
    return socks


def test_two_hundred_slow_clients_do_not_take_the_api_and_metrics_offline(api: Api) -> None:
    stop = threading.Event()
    socks = _slow_clients(api.port, 200, stop) + _slow_clients(api.prometheus, 200, stop)
    try:
        time.sleep(1.0)  # they are all in, trickling
        started = time.monotonic()
        assert api.request("GET", "/api/overview", timeout=5)[0] == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{api.prometheus}/metrics", timeout=5) as resp:
            assert resp.status == 200
        assert time.monotonic() - started < 5
    finally:
        stop.set()
        for s in socks:
            s.close()


def test_a_request_head_must_arrive_within_the_deadline(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DeadlineChannel, "header_timeout", 1.0)
    stop = threading.Event()
    slow = _slow_clients(api.port, 1, stop)[0]
    silent = socket.create_connection(("127.0.0.1", api.port), timeout=5)  # says nothing at all
    try:
        started = time.monotonic()

        def closed(s: socket.socket) -> bool:
            try:
                s.settimeout(0.2)
                return s.recv(4096) == b""
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True

        wait_until(lambda: closed(slow), 8, "the slow client to be closed")
        wait_until(lambda: closed(silent), 8, "the silent client to be closed")
        assert time.monotonic() - started < 6  # the deadline (1 s) plus a loop turn, not the 30 s idle timeout
        assert api.request("GET", "/api/overview")[0] == 200  # a prompt request is unaffected
    finally:
        stop.set()
        slow.close()
        silent.close()
