"""A real browser speaks STOMP over WebSocket: @stomp/stompjs in headless Debian chromium.

The page (stomp_page.html/.js) connects with subprotocol v12.stomp, subscribes with ack:client,
publishes 1,000 messages, receives and acks each in order, disconnects, then reconnects to prove
nothing is left to redeliver. Run against RabbitMQ with
``SANSMQ_BROWSER_TARGET=127.0.0.1:15674 pytest tests/browser``; install with
scripts/install-browser-deps.sh.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from browserkit import BrowserTarget

COUNT = 1000


def test_stompjs_client_ack_round_trip(
    browser_target: BrowserTarget,
    run_stompjs_page: Callable[..., dict[str, Any]],
    record_property: Callable[[str, object], None],
) -> None:
    result = run_stompjs_page(browser_target, count=COUNT, timeout=120.0)
    record_property("timing", json.dumps(result["timing"]))
    print(f"\n{browser_target.name}: {json.dumps(result['timing'])}, {result.get('msgs_per_s')} msg/s")
    assert result["ok"], (result["errors"], result["browser_log"])
    # The page checks all of this itself; restated so a page regression cannot pass silently.
    assert result["subprotocol"] == "v12.stomp"
    assert result["version"] == "1.2"
    assert result["received"] == result["acked"] == COUNT
    assert result["mismatches"] == 0
    assert result["redelivered"] == 0
    assert result["close"]["code"] in (1000, 1005)
    if browser_target.clean_close:
        assert result["close"]["wasClean"]
    if browser_target.disconnect_receipt:
        assert result["disconnect_receipt"]


#: id -> (STOMP versions offered, extra page parameters). Each offers one version, so the page
#: also checks that the WebSocket subprotocol (v10/v11/v12.stomp) matched the STOMP version.
VARIANTS = {
    "stomp-1.1": ("1.1", {}),
    "stomp-1.0": ("1.0", {}),
    "binary-frames": ("1.2", {"binary": 1}),
    # idle 3 s with 500 ms heart-beats: stompjs drops the socket after 2 silent periods, and the
    # page also requires at least one heart-beat EOL from the broker while idle.
    "heart-beats": ("1.2", {"heartbeat": "500,500", "idle_ms": 3000}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_stompjs_variants(
    variant: str, browser_target: BrowserTarget, run_stompjs_page: Callable[..., dict[str, Any]]
) -> None:
    versions, extra = VARIANTS[variant]
    result = run_stompjs_page(browser_target, count=100, versions=versions, extra=extra, timeout=60.0)
    assert result["ok"], (result["errors"], result["browser_log"])
    assert result["subprotocol"] == f"v{versions.replace('.', '')}.stomp"
    assert result["received"] == 100 and result["redelivered"] == 0
    if "idle_ms" in extra:
        assert result["heartbeats_in_idle"] >= 1


def test_page_catches_missing_acks(
    browser_target: BrowserTarget, run_stompjs_page: Callable[..., dict[str, Any]]
) -> None:
    """Self-test of the verify phase: messages left unacked must come back on the next connection."""
    result = run_stompjs_page(browser_target, count=20, extra={"unacked_tail": 5}, timeout=60.0)
    assert result["received"] == 20 and result["acked"] == 15
    assert result["redelivered"] == 5, (result["errors"], result["browser_log"])
    assert result["ok"], result["errors"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_page_reports_an_unreachable_broker(run_stompjs_page: Callable[..., dict[str, Any]]) -> None:
    """The harness must fail loudly, not hang or pass, when there is nothing to talk to."""
    result = run_stompjs_page(_closed_port(), count=5, timeout=30.0)
    assert result["ok"] is False
    assert result["phase"] == "done"
    assert result["received"] == 0
    assert any("closed before CONNECTED" in e for e in result["errors"]), result["errors"]
