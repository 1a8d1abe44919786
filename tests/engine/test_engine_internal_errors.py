"""Internal errors (a bug met while serving a connection) are logged on ``sansmq.engine`` with their
traceback and the connection they close, which gets 541 (issue 17, item 2); other connections
carry on."""

from __future__ import annotations

import logging

import pytest
from enginetest_helpers import connected, new_net, send
from test_engine_amqp import amqp, declare

import amqpproto
from amqpproto import spec
from engine.amqp import channel as _amqp_channel

#: these inject a bug by patching a codec class or instance: a compiled class cannot be patched, so they
#: run on the pure-Python build only (the normal suite); scripts/test-compiled.sh skips them
PATCHES_CODEC = pytest.mark.skipif(amqpproto.COMPILED, reason="patches a codec class: not possible compiled")


def _boom(*args: object) -> None:
    raise RuntimeError("boom")


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sansmq.engine"]


@pytest.mark.parametrize("where", ["session", pytest.param("codec", marks=PATCHES_CODEC)])
def test_amqp_internal_error_is_logged_and_closes_that_connection_with_541(
        where: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="sansmq.engine")
    net = new_net(strict=False)
    victim, bystander = amqp(net), amqp(net)
    declare(bystander, "q")
    if where == "session":  # a handler of the session raises
        monkeypatch.setitem(_amqp_channel._HANDLERS, spec.QueuePurge, _boom)
    else:  # the victim's codec meets a bug of its own while parsing: it reports 541 itself
        conn = net.broker.sessions[victim.conn_id].conn

        def broken(*args: object) -> None:
            raise KeyError("codec bug")

        monkeypatch.setattr(conn, "_on_method", broken)
    victim.send(spec.QueuePurge(queue="q", channel=1))
    net.run_until_idle()
    close = victim.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 541
    [record] = _records(caplog)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert f"internal error on connection {victim.conn_id} (AmqpSession" in record.getMessage()
    assert ("boom" if where == "session" else "codec bug") in caplog.text and "Traceback" in caplog.text
    assert net.broker.internal_errors
    assert isinstance(declare(bystander, "q", passive=True), spec.QueueDeclareOk)  # unharmed


def test_stomp_internal_error_is_logged(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from engine.stomp import session as _stomp_session
    from stompproto import Send

    caplog.set_level(logging.ERROR, logger="sansmq.engine")
    net = new_net(strict=False)
    c = connected(net)
    monkeypatch.setitem(_stomp_session._HANDLERS, Send, _boom)
    send(c, "/queue/q", b"x")
    net.run_until_idle()
    [record] = _records(caplog)
    assert "StompSession" in record.getMessage() and record.exc_info is not None
    assert c.server_closed


@PATCHES_CODEC
def test_a_stomp_codec_bug_is_logged_and_that_connection_gets_an_error_frame(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """stompproto re-types a bug of its own as a RemoteProtocolError whose ERROR says "internal
    error" (the codec convention); the session logs its cause like any internal error."""
    from stompproto import Error
    from stompproto._readers import FrameReader

    caplog.set_level(logging.ERROR, logger="sansmq.engine")
    net = new_net(strict=False)
    victim, bystander = connected(net), connected(net)

    server_reader = net.broker.sessions[victim.conn_id].conn._reader
    real = FrameReader.next

    def broken(self: FrameReader, *args: object) -> object:  # only the server's side of the victim
        if self is server_reader:
            raise KeyError("codec bug")
        return real(self, *args)

    monkeypatch.setattr(FrameReader, "next", broken)
    send(victim, "/queue/q", b"x")
    net.run_until_idle()
    monkeypatch.undo()
    [error] = victim.frames(Error)
    assert error.headers["message"] == "internal error" and victim.server_closed
    [record] = _records(caplog)
    assert "StompSession" in record.getMessage() and "codec bug" in caplog.text and "Traceback" in caplog.text
    send(bystander, "/queue/q", b"ok")  # unharmed
    net.run_until_idle()
    assert not bystander.server_closed


@PATCHES_CODEC
def test_a_websocket_codec_bug_is_logged_and_that_connection_gets_1011(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from wsframe._readers import FrameReader

    caplog.set_level(logging.ERROR, logger="sansmq.engine")
    net = new_net(strict=False)
    victim = net.connect_ws()
    assert victim.accepted is not None

    server_reader = net.broker.sessions[victim.conn_id].ws._reader
    real = FrameReader.next_frame

    def broken(self: FrameReader) -> object:  # only the server's side of the victim
        if self is server_reader:
            raise IndexError("codec bug")
        return real(self)

    monkeypatch.setattr(FrameReader, "next_frame", broken)
    victim.send_raw(b"\x81\x80\x00\x00\x00\x00")  # an empty masked text frame
    net.run_until_idle()
    monkeypatch.undo()
    assert victim.close_frame is not None and victim.close_frame.code == 1011 and victim.server_closed
    [record] = _records(caplog)
    assert "codec bug" in caplog.text and record.exc_info is not None
