"""Fixtures of the real-browser suite: which STOMP-over-WebSocket endpoints to point chromium at.

Targets (``browser_target`` is parametrised over them; each skips with its reason when unavailable):

* ``sansmq-<kind>``: our broker started in-process through ``servers.running`` with one WebSocket
  listener (protocol string ``SANSMQ_WS_PROTOCOL``). Skips while the engine has no WebSocket
  session (the listener then refuses the upgrade).
* ``env``: an external broker, opt-in: ``SANSMQ_BROWSER_TARGET=host:port`` (path ``/ws``, or
  ``SANSMQ_BROWSER_PATH``), login ``SANSMQ_BROWSER_LOGIN``/``SANSMQ_BROWSER_PASSCODE`` (guest/guest),
  e.g. RabbitMQ Web-STOMP. Set ``SANSMQ_BROWSER_DISCONNECT_RECEIPT=1`` if it answers DISCONNECT's
  receipt (RabbitMQ 3.10 does not) and ``SANSMQ_BROWSER_CLEAN_CLOSE=1`` if it always completes the
  WebSocket closing handshake (RabbitMQ's Web-STOMP sometimes drops TCP right after its Close frame).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from browserkit import BrowserTarget, browser_skip_reason, ws_handshake_ok
from browserkit import run_stompjs_page as _run_page

#: the listener protocol string our broker's WebSocket (STOMP over WS) session registers under
SANSMQ_WS_PROTOCOL = os.environ.get("SANSMQ_BROWSER_WS_PROTOCOL", "ws")
SANSMQ_KINDS = ("asyncio", "threads", "trio")
TARGETS = [*(f"sansmq-{kind}" for kind in SANSMQ_KINDS), "env"]


@pytest.fixture(scope="session")
def browser_ready() -> None:
    """Skip unless headless chromium, node and the npm packages are installed. scripts/test.sh
    installs them and sets SANSMQ_REQUIRE_BROWSER=1, so there a missing browser fails the run."""
    reason = browser_skip_reason()
    if reason is not None:
        if os.environ.get("SANSMQ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser tests required but not runnable: {reason}")
        pytest.skip(reason)


def _env_target() -> BrowserTarget:
    spec = os.environ.get("SANSMQ_BROWSER_TARGET")
    if not spec:
        pytest.skip("no external target: set SANSMQ_BROWSER_TARGET=host:port (e.g. RabbitMQ Web-STOMP)")
    host, _, port = spec.rpartition(":")
    if not port.isdigit():
        raise pytest.UsageError(f"SANSMQ_BROWSER_TARGET must be host:port, not {spec!r}")
    return BrowserTarget(
        name=f"env {spec}",
        host=host or "127.0.0.1",
        port=int(port),
        path=os.environ.get("SANSMQ_BROWSER_PATH", "/ws"),
        login=os.environ.get("SANSMQ_BROWSER_LOGIN", "guest"),
        passcode=os.environ.get("SANSMQ_BROWSER_PASSCODE", "guest"),
        disconnect_receipt=os.environ.get("SANSMQ_BROWSER_DISCONNECT_RECEIPT", "0") == "1",
        clean_close=os.environ.get("SANSMQ_BROWSER_CLEAN_CLOSE", "0") == "1",
    )


def _sansmq_target(kind: str) -> Iterator[BrowserTarget]:
    servers = pytest.importorskip("servers", reason="the servers package is not importable")
    assert kind in servers.SERVER_KINDS, f"sansmq has no {kind!r} server"
    with servers.running(kind, [(SANSMQ_WS_PROTOCOL, "127.0.0.1", 0)]) as srv:
        host, port = srv.address(SANSMQ_WS_PROTOCOL)
        reason = ws_handshake_ok(host, port)
        # our own endpoint must answer: a broken /ws is a failure, never a skip
        assert reason is None, f"sansmq ({kind}) does not serve STOMP over WebSocket: {reason}"
        yield BrowserTarget(name=f"sansmq {kind}", host=host, port=port)


@pytest.fixture(params=TARGETS)
def browser_target(request: pytest.FixtureRequest, browser_ready: None) -> Iterator[BrowserTarget]:
    """A live STOMP-over-WebSocket endpoint (started here when it is ours)."""
    name: str = request.param
    if name == "env":
        target = _env_target()
        reason = ws_handshake_ok(target.host, target.port, target.path)
        if reason is not None:
            pytest.skip(f"SANSMQ_BROWSER_TARGET is not serving: {reason}")
        yield target
    else:
        yield from _sansmq_target(name.removeprefix("sansmq-"))


@pytest.fixture
def run_stompjs_page(browser_ready: None) -> Callable[..., dict[str, Any]]:
    """``browserkit.run_stompjs_page`` behind the chromium skip check."""
    return _run_page
