"""Broker.shutdown (each protocol's close) and the operator log lines, simulated with engine.testing."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from enginetest_helpers import connected, new_net

from amqpproto import spec
from engine import Config
from engine._session import SUBSCRIPTION_BYTES
from engine.config import User
from engine.testing import SimNetwork
from stompproto import Error

SHUTDOWN = "broker forced connection closure with reason 'shutdown'"


def three_clients(net: SimNetwork) -> tuple[Any, Any, Any]:
    stomp = connected(net)
    amqp = net.connect(protocol="amqp")
    assert isinstance(amqp.amqp_open(), spec.ConnectionOpenOk)
    amqp.open_channel(1)
    ws = net.connect_ws()
    ws.stomp_connect()
    return stomp, amqp, ws


def test_shutdown_sends_each_protocol_its_close() -> None:
    net = new_net()
    stomp, amqp, ws = three_clients(net)
    net.broker.shutdown(net.now)
    net.run_until_idle()
    err = stomp.frames(Error)[-1]
    assert (err.headers["message"], err.body) == ("CONNECTION_FORCED", SHUTDOWN.encode())
    close = amqp.of(spec.ConnectionClose)[-1]
    assert (close.reply_code, close.reply_text) == (320, f"CONNECTION_FORCED - {SHUTDOWN}")
    # the WebSocket client gets the inner STOMP ERROR, then Close 1001 (going away)
    assert ws.data_messages()[-1].data.startswith("ERROR\nmessage:CONNECTION_FORCED\n")
    assert ws.close_frame.code == 1001
    assert stomp.server_closed and amqp.server_closed and ws.server_closed
    assert net.broker.sessions == {}


def test_shutdown_is_deterministic() -> None:
    logs = []
    for _ in range(2):
        net = new_net(seed=7)
        three_clients(net)
        net.broker.shutdown(net.now)
        net.run_until_idle()
        logs.append(net.log)
    assert logs[0] == logs[1]


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_connection_lines_carry_peer_user_vhost_protocol_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sansmq.engine")
    net = new_net()
    stomp, amqp, ws = three_clients(net)
    assert [(r.conn_id, r.protocol, r.peer) for r in _events(caplog, "connection.accepted")] == [
        (1, "stomp", "127.0.0.1:40001"), (2, "amqp", "127.0.0.1:40002"), (3, "ws", "127.0.0.1:40003")]
    assert [(r.user, r.vhost, r.protocol) for r in _events(caplog, "connection.authenticated")] == [
        ("guest", "/", "stomp"), ("guest", "/", "amqp"), ("guest", "/", "stomp/ws")]
    stomp.close()  # EOF without DISCONNECT
    amqp.call(spec.ConnectionClose(200, "bye", 0, 0))
    ws.ws_close(1000)
    net.run_until_idle()
    closed = {r.conn_id: r for r in _events(caplog, "connection.closed")}
    assert closed[1].reason == "client unexpectedly closed TCP connection"
    assert closed[2].reason == "client closed the connection"
    assert closed[3].reason == "client sent WebSocket Close 1000" and closed[3].protocol == "stomp/ws"
    assert all((r.user, r.vhost) == ("guest", "/") for r in closed.values())
    assert closed[1].getMessage() == (
        "closing connection 1 (127.0.0.1:40001, stomp, vhost: '/', user: 'guest'): client unexpectedly closed TCP connection")


def test_auth_failures_say_why(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sansmq.engine")
    cfg = Config()
    cfg.users["app"] = User("app", "pw", vhosts=("staging",))
    cfg.vhosts = ("/", "staging")
    net = new_net(cfg)
    remote = ("10.1.2.3", 5555)
    err = net.connect(peer=remote).stomp_connect({"login": "guest", "passcode": "guest"})
    assert isinstance(err, Error) and err.headers["message"] == "Access refused: user 'guest' can only connect via localhost"
    err = net.connect().stomp_connect({"login": "app", "passcode": "nope"})
    assert err.headers["message"] == "Access refused: user 'app' - invalid credentials"  # the client is not told which
    err = net.connect().stomp_connect({"login": "app", "passcode": "pw", "host": "/"})
    assert err.body == b"access to vhost '/' refused for user 'app'"
    close = net.connect(peer=remote, protocol="amqp").amqp_open()
    assert close.reply_text == "ACCESS_REFUSED - user 'guest' can only connect via localhost"
    close = net.connect(protocol="amqp").amqp_open("ghost", "x")
    assert close.reply_code == 403 and "For details see the broker logfile" in close.reply_text
    close = net.connect(protocol="amqp").amqp_open("app", "pw", vhost="/")
    assert close.reply_code == 530
    failed = _events(caplog, "auth.failed")
    assert [(r.user, r.mechanism, r.protocol, r.reason) for r in failed] == [
        ("guest", "login header", "stomp", "user 'guest' can only connect via localhost"),
        ("app", "login header", "stomp", "wrong passcode for user 'app'"),
        ("app", "login header", "stomp", "access to vhost '/' refused for user 'app'"),
        ("guest", "PLAIN", "amqp", "user 'guest' can only connect via localhost"),
        ("ghost", "PLAIN", "amqp", "no such user 'ghost'"),
        ("app", "PLAIN", "amqp", "access to vhost '/' refused for user 'app'"),
    ]
    assert failed[0].peer == "10.1.2.3:5555" and all(r.levelno == logging.WARNING for r in failed)
    assert not _events(caplog, "connection.authenticated")


def test_memory_alarm_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sansmq.engine")
    cfg = Config()
    cfg.limits.memory_high_watermark = 1000
    net = new_net(cfg)
    producer = connected(net)
    producer.send_raw(b"SEND\ndestination:/queue/big\n\n" + b"x" * 2000 + b"\x00")
    net.run_until_idle()
    on, = _events(caplog, "alarm.set")
    assert (on.alarm, on.queued_bytes, on.watermark, on.levelno) == ("memory", 2000, 1000, logging.WARNING)
    consumer = connected(net)
    consumer.send_raw(b"SUBSCRIBE\nid:1\ndestination:/queue/big\n\n\x00")
    net.run_until_idle()
    off, = _events(caplog, "alarm.clear")
    assert (off.queued_bytes, off.levelno) == (SUBSCRIPTION_BYTES, logging.INFO)  # the subscription counts
