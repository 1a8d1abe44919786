"""The example frames of the STOMP 1.0, 1.1 and 1.2 specifications, written out as literals
(``^@`` = NUL), parsed by a connection in the right role, state and version."""

from __future__ import annotations

import pytest
from stomp_helpers import client_at, feed, server_at

from stompproto import (
    CLIENT,
    SERVER,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    Connection,
    Disconnect,
    Error,
    Message,
    Nack,
    Receipt,
    Send,
    Subscribe,
    Unsubscribe,
)

ERROR_BODY_12 = (
    b"The message:\n-----\nMESSAGE\ndestined:/queue/a\nreceipt:message-12345\n\n"
    b"Hello queue a!\n-----\nDid not contain a destination header, which is REQUIRED\n"
    b"for message propagation.\n"
)
ERROR_BODY_11 = ERROR_BODY_12.replace(b"12345\n\n", b"12345\n\n\n")
ERROR_BODY_10 = (
    b"The message:\n-----\nMESSAGE\ndestined:/queue/a\n\nHello queue a!\n-----\n"
    b"Did not contain a destination header, which is required \nfor message propagation.\n"
)

# (version, wire bytes, expected event). Client frames go to a server, server frames to a client.
EXAMPLES = [
    # ---- STOMP 1.0 (headers are not trimmed: " <username>" keeps its space, like RabbitMQ)
    ("1.0", b"CONNECT\nlogin: <username>\npasscode:<passcode>\n\n\x00",
     Connect({"login": " <username>", "passcode": "<passcode>"})),
    ("1.0", b"CONNECTED\nsession: <session-id>\n\n\x00", Connected({"session": " <session-id>"})),
    ("1.0", b"SEND\ndestination:/queue/a\n\nhello queue a\n\x00",
     Send({"destination": "/queue/a"}, b"hello queue a\n")),
    ("1.0", b"SUBSCRIBE\ndestination: /queue/foo\nack: client\n\n\x00",
     Subscribe({"destination": " /queue/foo", "ack": " client"})),
    ("1.0", b"UNSUBSCRIBE\ndestination: /queue/a\n\n\x00", Unsubscribe({"destination": " /queue/a"})),
    ("1.0", b"BEGIN\ntransaction: <transaction-identifier>\n\n\x00",
     Begin({"transaction": " <transaction-identifier>"})),
    ("1.0", b"COMMIT\ntransaction: <transaction-identifier>\n\n\x00",
     Commit({"transaction": " <transaction-identifier>"})),
    ("1.0", b"ACK\nmessage-id: <message-identifier>\ntransaction: <transaction-identifier>\n\n\x00",
     Ack({"message-id": " <message-identifier>", "transaction": " <transaction-identifier>"})),
    ("1.0", b"ABORT\ntransaction: <transaction-identifier>\n\n\x00",
     Abort({"transaction": " <transaction-identifier>"})),
    ("1.0", b"DISCONNECT\n\n\x00", Disconnect({})),
    ("1.0", b"SEND\ndestination:/queue/a\nreceipt:message-12345\n\nHello a!\x00",
     Send({"destination": "/queue/a", "receipt": "message-12345"}, b"Hello a!")),
    ("1.0", b"MESSAGE\ndestination:/queue/a\nmessage-id: <message-identifier>\n\nhello queue a\x00",
     Message({"destination": "/queue/a", "message-id": " <message-identifier>"}, b"hello queue a")),
    ("1.0", b"RECEIPT\nreceipt-id:message-12345\n\n\x00", Receipt({"receipt-id": "message-12345"})),
    ("1.0", b"ERROR\nmessage: malformed packet received\n\n" + ERROR_BODY_10 + b"\x00",
     Error({"message": " malformed packet received"}, ERROR_BODY_10)),
    # ---- STOMP 1.1
    ("1.1", b"CONNECT\naccept-version:1.1\nhost:stomp.github.org\n\n\x00",
     Connect({"accept-version": "1.1", "host": "stomp.github.org"})),
    ("1.1", b"CONNECTED\nversion:1.1\n\n\x00", Connected({"version": "1.1"})),
    ("1.1", b"CONNECT\naccept-version:1.0,1.1,2.0\nhost:stomp.github.org\n\n\x00",
     Connect({"accept-version": "1.0,1.1,2.0", "host": "stomp.github.org"})),
    ("1.1", b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\n\x00",
     Send({"destination": "/queue/a", "content-type": "text/plain"}, b"hello queue a\n")),
    ("1.1", b"SUBSCRIBE\nid:0\ndestination:/queue/foo\nack:client\n\n\x00",
     Subscribe({"id": "0", "destination": "/queue/foo", "ack": "client"})),
    ("1.1", b"UNSUBSCRIBE\nid:0\n\n\x00", Unsubscribe({"id": "0"})),
    ("1.1", b"ACK\nsubscription:0\nmessage-id:007\ntransaction:tx1\n\n\x00",
     Ack({"subscription": "0", "message-id": "007", "transaction": "tx1"})),
    ("1.1", b"BEGIN\ntransaction:tx1\n\n\x00", Begin({"transaction": "tx1"})),
    ("1.1", b"COMMIT\ntransaction:tx1\n\n\x00", Commit({"transaction": "tx1"})),
    ("1.1", b"ABORT\ntransaction:tx1\n\n\x00", Abort({"transaction": "tx1"})),
    ("1.1", b"SEND\ndestination:/queue/a\nreceipt:message-12345\n\nhello queue a\x00",
     Send({"destination": "/queue/a", "receipt": "message-12345"}, b"hello queue a")),
    ("1.1", b"MESSAGE\nsubscription:0\nmessage-id:007\ndestination:/queue/a\n"
            b"content-type:text/plain\n\nhello queue a\x00",
     Message({"subscription": "0", "message-id": "007", "destination": "/queue/a",
              "content-type": "text/plain"}, b"hello queue a")),
    ("1.1", b"RECEIPT\nreceipt-id:message-12345\n\n\x00", Receipt({"receipt-id": "message-12345"})),
    ("1.1", b"MESSAGE\nfoo:World\nfoo:Hello\ndestination:/a\nmessage-id:1\nsubscription:0\n\n\x00",
     Message({"foo": "World", "destination": "/a", "message-id": "1", "subscription": "0"})),
    ("1.1", b"ERROR\nreceipt-id:message-12345\ncontent-type:text/plain\ncontent-length:171\n"
            b"message: malformed frame received\n\n" + ERROR_BODY_11 + b"\x00",
     Error({"receipt-id": "message-12345", "content-type": "text/plain", "content-length": "171",
            "message": " malformed frame received"}, ERROR_BODY_11)),
    # ---- STOMP 1.2
    ("1.2", b"CONNECT\naccept-version:1.2\nhost:stomp.github.org\n\n\x00",
     Connect({"accept-version": "1.2", "host": "stomp.github.org"})),
    ("1.2", b"CONNECTED\nversion:1.2\n\n\x00", Connected({"version": "1.2"})),
    ("1.2", b"SEND\ndestination:/queue/a\nreceipt:message-12345\n\nhello queue a^@\x00",
     Send({"destination": "/queue/a", "receipt": "message-12345"}, b"hello queue a^@")),
    ("1.2", b"SUBSCRIBE\nid:0\ndestination:/queue/foo\nack:client\n\n\x00",
     Subscribe({"id": "0", "destination": "/queue/foo", "ack": "client"})),
    ("1.2", b"UNSUBSCRIBE\nid:0\n\n\x00", Unsubscribe({"id": "0"})),
    ("1.2", b"ACK\nid:12345\ntransaction:tx1\n\n\x00", Ack({"id": "12345", "transaction": "tx1"})),
    ("1.2", b"NACK\nid:12345\n\n\x00", Nack({"id": "12345"})),
    ("1.2", b"BEGIN\ntransaction:tx1\n\n\x00", Begin({"transaction": "tx1"})),
    # The spec's DISCONNECT example omits the blank line before ^@ (a typo); with it:
    ("1.2", b"DISCONNECT\nreceipt:77\n\n\x00", Disconnect({"receipt": "77"})),
    ("1.2", b"RECEIPT\nreceipt-id:77\n\n\x00", Receipt({"receipt-id": "77"})),
    ("1.2", b"MESSAGE\nsubscription:0\nmessage-id:007\ndestination:/queue/a\n"
            b"content-type:text/plain\n\nhello queue a\x00",
     Message({"subscription": "0", "message-id": "007", "destination": "/queue/a",
              "content-type": "text/plain"}, b"hello queue a")),
    ("1.2", b"ERROR\nreceipt-id:message-12345\ncontent-type:text/plain\ncontent-length:170\n"
            b"message:malformed frame received\n\n" + ERROR_BODY_12 + b"\x00",
     Error({"receipt-id": "message-12345", "content-type": "text/plain", "content-length": "170",
            "message": "malformed frame received"}, ERROR_BODY_12)),
]


def _receiver(version, event):
    command = event.command
    if command == "CONNECT":
        return Connection(SERVER)
    if command == "CONNECTED":
        client = Connection(CLIENT)
        client.send(Connect({"accept-version": "1.0,1.1,1.2", "host": "h"}))
        return client
    if command in ("MESSAGE", "RECEIPT", "ERROR"):
        return client_at(version)
    return server_at(version)


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize(("version", "wire", "expected"), EXAMPLES)
def test_spec_example(version, wire, expected, crlf):
    if crlf:  # the same frame with CRLF head lines (accepted for every version)
        head, sep, rest = wire.partition(b"\n\n")
        wire = head.replace(b"\n", b"\r\n") + b"\r\n\r\n" + rest
    for sizes in (None, [1]):
        events, err = feed(_receiver(version, expected), wire, sizes)
        assert err is None
        assert events == [expected]


def test_spec_negotiation_example_picks_1_1():
    server = Connection(SERVER, versions=("1.0", "1.1"))
    events, err = feed(server, b"CONNECT\naccept-version:1.0,1.1,2.0\nhost:stomp.github.org\n\n\x00")
    assert err is None and server.version == "1.1"
    assert server.send(server.connected_frame()) == b"CONNECTED\nversion:1.1\n\n\x00"


def test_spec_receipt_then_send_serialises_like_the_example():
    client = client_at("1.2")
    frame = Send({"destination": "/queue/a", "receipt": "message-12345"}, b"hello queue a")
    assert client.send(frame) == (
        b"SEND\ndestination:/queue/a\nreceipt:message-12345\ncontent-length:13\n\nhello queue a\x00"
    )
