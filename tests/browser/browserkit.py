"""Run tests/browser/stomp_page.html in Debian's headless chromium and return its JSON result.

Reusable outside this folder (put tests/browser on sys.path, or use the conftest fixture)::

    from browserkit import run_stompjs_page, browser_skip_reason
    result = run_stompjs_page(15674, count=1000, login="guest", passcode="guest")
    assert result["ok"], result["errors"]

The page is served by a private http.server thread on 127.0.0.1 (stompjs comes from node_modules,
never a CDN); tools/browser/run_page.mjs drives chromium through playwright-core.
Install the prerequisites with scripts/install-browser-deps.sh.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BrowserTarget",
    "CHROMIUM",
    "browser_skip_reason",
    "page_url",
    "run_stompjs_page",
    "static_server_port",
    "ws_handshake_ok",
]

HERE = Path(__file__).resolve().parent
#: the npm project (stompjs, playwright-core, the driver script) lives outside tests/, so
#: third-party node_modules never mix with the project's tests
NODE_DIR = HERE.parents[1] / "tools" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
STOMPJS_BUNDLE = NODE_DIR / "node_modules" / "@stomp" / "stompjs" / "bundles" / "stomp.umd.min.js"
PLAYWRIGHT = NODE_DIR / "node_modules" / "playwright-core"
INSTALL_HINT = "run scripts/install-browser-deps.sh"

#: URL path -> (file, content type). Only these are served: the static server exposes nothing else.
_FILES = {
    "/stomp_page.html": (HERE / "stomp_page.html", "text/html; charset=utf-8"),
    "/stomp_page.js": (HERE / "stomp_page.js", "text/javascript; charset=utf-8"),
    "/stomp.umd.min.js": (STOMPJS_BUNDLE, "text/javascript; charset=utf-8"),
}


@dataclass(slots=True, frozen=True)
class BrowserTarget:
    """A STOMP-over-WebSocket endpoint for the page: ws://host:port/path."""

    name: str
    host: str
    port: int
    path: str = "/ws"
    login: str | None = "guest"
    passcode: str | None = "guest"
    vhost: str | None = None
    #: whether the target answers DISCONNECT's receipt (RabbitMQ 3.10 Web-STOMP closes without it)
    disconnect_receipt: bool = True
    #: whether the close must be a completed closing handshake (RabbitMQ may drop TCP first)
    clean_close: bool = True

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{self.path}"


def browser_skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when chromium, node and npm packages exist."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} ({INSTALL_HINT})"
    if shutil.which("node") is None:
        return "node is not installed (needed to drive chromium through playwright-core)"
    missing = [p for p in (STOMPJS_BUNDLE, PLAYWRIGHT) if not p.exists()]
    if missing:
        return f"npm packages missing: {', '.join(str(p.relative_to(NODE_DIR.parents[1])) for p in missing)} ({INSTALL_HINT})"
    return None


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        entry = _FILES.get(urllib.parse.urlsplit(self.path).path)
        if entry is None:
            self.send_error(404)
            return
        body = entry[0].read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", entry[1])
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean


@functools.cache
def static_server_port() -> int:
    """Port of the page server (one per process, daemon thread, started on first use)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="browser-static", daemon=True).start()
    return httpd.server_address[1]


def page_url(target: BrowserTarget | int | str, **params: Any) -> str:
    """URL of the page for ``target``: a BrowserTarget, a port on 127.0.0.1 (path /ws), or a ws:// URL."""
    query: dict[str, Any] = {}
    if isinstance(target, BrowserTarget):
        query.update(url=target.url, login=target.login, passcode=target.passcode, vhost=target.vhost)
        query["disconnect_receipt"] = int(target.disconnect_receipt)
        query["clean_close"] = int(target.clean_close)
    elif isinstance(target, int):
        query["url"] = f"ws://127.0.0.1:{target}/ws"
    elif isinstance(target, str) and target.startswith(("ws://", "wss://")):
        query["url"] = target
    else:
        raise ValueError(f"target must be a BrowserTarget, a port or a ws:// URL, not {target!r}")
    query.update(params)
    clean = {k: v for k, v in query.items() if v is not None}
    return f"http://127.0.0.1:{static_server_port()}/stomp_page.html?{urllib.parse.urlencode(clean)}"


def run_stompjs_page(
    target: BrowserTarget | int | str,
    *,
    count: int = 1000,
    destination: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    vhost: str | None = None,
    versions: str = "1.2",
    timeout: float = 120.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the page once in headless chromium and return its JSON result (``result["ok"]``,
    ``["errors"]``, ``["timing"]``, ...). Raises RuntimeError when the page produced no result;
    a broker-side failure is reported in the result, not raised."""
    reason = browser_skip_reason()
    if reason is not None:
        raise RuntimeError(reason)
    params: dict[str, Any] = {
        "count": count,
        "dest": destination,
        "versions": versions,
        "login": login,
        "passcode": passcode,
        "vhost": vhost,
        # the page gives up a little before the driver does, so its partial result still arrives
        "timeout_ms": int(max(timeout - 20.0, timeout * 0.75) * 1000),
        **(extra or {}),
    }
    url = page_url(target, **{k: v for k, v in params.items() if v is not None})
    cmd = ["node", str(NODE_DIR / "run_page.mjs"), url, "--timeout-ms", str(int(timeout * 1000)), "--chromium", CHROMIUM]
    env = {**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}
    try:
        proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout + 30.0)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"chromium driver did not finish within {timeout + 30.0:.0f}s") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"no result from the page (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["browser_log"] = proc.stderr[-4000:]
    return result


def ws_handshake_ok(host: str, port: int, path: str = "/ws", subprotocol: str = "v12.stomp", timeout: float = 3.0) -> str | None:
    """None when ``host:port`` answers a WebSocket upgrade on ``path`` with 101 and ``subprotocol``,
    else a one-line reason (used to skip with a clear message when a target is not serving)."""
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {subprotocol}\r\n\r\n"
    ).encode()
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 16384:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        return f"no WebSocket endpoint at {host}:{port}{path}: {exc}"
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    if " 101 " not in status + " ":
        return f"{host}:{port}{path} did not upgrade to WebSocket (got {status or 'connection closed'!r})"
    if f"sec-websocket-protocol: {subprotocol}".encode() not in head.lower():
        return f"{host}:{port}{path} upgraded without subprotocol {subprotocol}"
    return None
