"""Connection behaviour: a full client<->server session in memory, feeding modes, framing,
content assembly, heartbeats, errors with their reply codes and hints."""

from __future__ import annotations

import struct

import pytest
from amqp_strategies import CI, HANDSHAKE, drain, feed, method, pair
from hypothesis import given
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import _state as S
from amqpproto import spec


def frame(ftype: int, ch: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", ftype, ch, len(payload)) + payload + end


def method_frame(m) -> bytes:
    return frame(1, m.channel, spec.ENCODERS[type(m)](m))


def header_frame(ch: int, size: int, props=b"\x00\x00", class_id: int = 60) -> bytes:
    return frame(2, ch, struct.pack(">HHQ", class_id, 0, size) + props)


def transfer(src: a.Connection, dst: a.Connection, *events) -> list:
    return feed(dst, b"".join(src.send(e) for e in events))


# ---- a full session, SERVER role driven by a CLIENT role -------------------------------------
def test_full_session_server_role():
    c, s = pair(channels=(1, 2))
    # declare, bind, consume
    assert transfer(c, s, a.QueueDeclare(queue="q", durable=True, channel=1)) == [
        a.QueueDeclare(queue="q", durable=True, channel=1)]
    transfer(s, c, a.QueueDeclareOk(queue="q", message_count=0, consumer_count=0, channel=1))
    transfer(c, s, a.ExchangeDeclare(exchange="x", type="topic", channel=1))
    transfer(s, c, a.ExchangeDeclareOk(channel=1))
    transfer(c, s, a.QueueBind(queue="q", exchange="x", routing_key="k.#", channel=1))
    transfer(s, c, a.QueueBindOk(channel=1))
    transfer(c, s, a.ConfirmSelect(channel=1))
    transfer(s, c, a.ConfirmSelectOk(channel=1))
    transfer(c, s, a.BasicQos(prefetch_count=10, channel=2))
    transfer(s, c, a.BasicQosOk(channel=2))
    transfer(c, s, a.BasicConsume(queue="q", consumer_tag="ct", channel=2))
    assert transfer(s, c, a.BasicConsumeOk(consumer_tag="ct", channel=2)) == [
        a.BasicConsumeOk(consumer_tag="ct", channel=2)]

    # publish a message larger than frame_max (split on send, reassembled on receive)
    big = bytes(range(256)) * 2000
    props = a.BasicProperties(content_type="text/plain", delivery_mode=2,
                              headers={"h": 1, "nested": {"l": [1, "x", None]}})
    pub = a.BasicPublish(exchange="x", routing_key="k.1", properties=props, body=big, channel=1)
    wire = c.send(pub)
    assert wire.count(b"\xce\x03\x00\x01") == -(-len(big) // (131072 - 8))
    assert feed(s, wire) == [pub]
    assert transfer(s, c, a.BasicAck(delivery_tag=1, channel=1)) == [
        a.BasicAck(delivery_tag=1, channel=1)]
    # deliver, ack, nack, reject, get
    dl = a.BasicDeliver("ct", 1, False, "x", "k.1", props, big, channel=2)
    assert transfer(s, c, dl) == [dl]
    transfer(c, s, a.BasicAck(delivery_tag=1, channel=2))
    empty = a.BasicDeliver("ct", 2, True, "x", "k.1", a.BasicProperties(), b"", channel=2)
    assert transfer(s, c, empty) == [empty]
    assert transfer(c, s, a.BasicNack(delivery_tag=2, requeue=False, channel=2),
                    a.BasicReject(delivery_tag=3, channel=2)) == [
        a.BasicNack(delivery_tag=2, requeue=False, channel=2),
        a.BasicReject(delivery_tag=3, channel=2)]
    transfer(c, s, a.BasicGet(queue="q", channel=1))
    get_ok = a.BasicGetOk(5, False, "x", "k", 3, a.BasicProperties(priority=3), b"g", channel=1)
    assert transfer(s, c, get_ok) == [get_ok]
    transfer(c, s, a.BasicGet(queue="q", channel=1))
    assert transfer(s, c, a.BasicGetEmpty(channel=1)) == [a.BasicGetEmpty(channel=1)]
    ret = a.BasicReturn(312, "NO_ROUTE", "x", "nowhere", a.BasicProperties(), b"r", channel=1)
    assert transfer(s, c, ret) == [ret]
    # flow, blocked, update-secret, server-initiated cancel
    assert transfer(s, c, a.ChannelFlow(active=False, channel=2)) == [
        a.ChannelFlow(active=False, channel=2)]
    transfer(c, s, a.ChannelFlowOk(active=False, channel=2))
    assert transfer(s, c, a.ConnectionBlocked(reason="low memory"), a.ConnectionUnblocked()) == [
        a.ConnectionBlocked(reason="low memory"), a.ConnectionUnblocked()]
    transfer(c, s, a.ConnectionUpdateSecret(new_secret=b"tok", reason="refresh"))
    transfer(s, c, a.ConnectionUpdateSecretOk())
    assert transfer(s, c, a.BasicCancel(consumer_tag="ct", channel=2)) == [
        a.BasicCancel(consumer_tag="ct", channel=2)]
    # channel close initiated by the server, connection close by the client
    transfer(s, c, a.ChannelClose(406, "PRECONDITION_FAILED", 60, 80, channel=2))
    assert c.channel_state(2) == S.CH_CLOSING_BY_SERVER
    transfer(c, s, a.ChannelCloseOk(channel=2))
    assert c.channel_state(2) == s.channel_state(2) == S.CH_CLOSED
    with pytest.raises(a.LocalProtocolError):
        c.send(a.BasicPublish(channel=2))
    transfer(c, s, a.ConnectionClose(200, "bye"))
    with pytest.raises(a.LocalProtocolError):  # only close-ok may follow
        s.send(a.ChannelOpenOk(channel=1))
    transfer(s, c, a.ConnectionCloseOk())
    assert c.state == s.state == S.CLOSED


def test_server_refuses_login():
    c, s = a.Connection(a.CLIENT), a.Connection(a.SERVER)
    for who, ev in HANDSHAKE[:3]:
        src, dst = (c, s) if who == "c" else (s, c)
        assert transfer(src, dst, ev) == [ev]
    user, pw = a.parse_sasl_response("PLAIN", s_ev_response := HANDSHAKE[2][1].response)
    assert (user, pw) == ("guest", "guest") and s_ev_response.startswith(b"\0")
    transfer(s, c, a.ConnectionClose(403, "ACCESS_REFUSED", 10, 11))
    transfer(c, s, a.ConnectionCloseOk())
    assert c.state == s.state == S.CLOSED


def test_secure_round():
    c, s = a.Connection(a.CLIENT), a.Connection(a.SERVER)
    for who, ev in HANDSHAKE[:3]:
        transfer(*((c, s) if who == "c" else (s, c)), ev)
    assert transfer(s, c, a.ConnectionSecure(challenge=b"nonce")) == [
        a.ConnectionSecure(challenge=b"nonce")]
    transfer(c, s, a.ConnectionSecureOk(response=b"answer"))
    for who, ev in HANDSHAKE[3:]:
        assert transfer(*((c, s) if who == "c" else (s, c)), ev) == [ev]
    assert c.state == s.state == S.OPEN


@pytest.mark.parametrize("mech,make", [("PLAIN", a.plain_response),
                                       ("AMQPLAIN", a.amqplain_response)])
def test_sasl(mech, make):
    assert a.parse_sasl_response(mech, make("ü-user", "p\0w" if mech == "AMQPLAIN" else "pw")) \
        == ("ü-user", "p\0w" if mech == "AMQPLAIN" else "pw")
    with pytest.raises(ValueError):
        a.parse_sasl_response(mech, b"\x05garbage")
    with pytest.raises(ValueError):
        a.parse_sasl_response("EXTERNAL", b"")


def test_amqplain_wire_format():
    # LOGIN/PASSWORD table entries without the 4-byte table size
    assert a.amqplain_response("u", "p") == \
        b"\x05LOGINS\x00\x00\x00\x01u\x08PASSWORDS\x00\x00\x00\x01p"


# ---- feeding modes -----------------------------------------------------------------------
def _session_bytes():
    """Everything a client sends in a session, and the events a server must see."""
    c = a.Connection(a.CLIENT)
    events = [ev for who, ev in HANDSHAKE if who == "c"]
    out = b""
    for who, ev in HANDSHAKE:  # the server's replies only advance the client's state
        if who == "c":
            out += c.send(ev)
        else:
            c.receive_data(s_send(ev))
            drain(c)
    more = [a.ChannelOpen(channel=1)]
    out += c.send(more[0])
    c.receive_data(frame(1, 1, spec.ENCODERS[spec.ChannelOpenOk](a.ChannelOpenOk(channel=1))))
    drain(c)
    for i in range(3):
        m = a.BasicPublish(routing_key=f"k{i}", properties=a.BasicProperties(message_id=str(i)),
                           body=b"b" * (i * 70000), channel=1)
        out += c.send(m)
        more.append(m)
    more.append(a.Heartbeat())
    out += c.send(a.Heartbeat())
    return out, events + more


def s_send(ev):
    """Serialise a server event without state (test helper)."""
    return frame(1, ev.channel, spec.ENCODERS[type(ev)](ev))


def test_three_feeding_modes():
    data, expected = _session_bytes()
    whole, bytewise = a.Connection(a.SERVER), a.Connection(a.SERVER)
    ev_whole = _drive_server(whole, data, None)
    ev_bytes = _drive_server(bytewise, data, [1] * len(data))
    assert ev_whole == ev_bytes == [a.ProtocolHeader()] + expected[1:]


def _drive_server(s, data, chunks):
    """Feed a server, answering the handshake as it goes, return every event."""
    replies = {a.ProtocolHeader: a.ConnectionStart(mechanisms=b"PLAIN"),
               a.ConnectionStartOk: a.ConnectionTune(2047, 131072, 0),
               a.ConnectionOpen: a.ConnectionOpenOk(),
               a.ChannelOpen: a.ChannelOpenOk(channel=1)}
    got = []
    chunks = chunks or [len(data)]
    i = 0
    for n in chunks:
        s.receive_data(data[i:i + n])
        i += n
        while (ev := s.next_event()) is not a.NEED_DATA:  # reply before parsing on
            got.append(ev)
            if type(ev) in replies:
                s.send(replies[type(ev)])
    return got


@CI
@given(cuts=st.lists(st.integers(1, 5000), min_size=1, max_size=60))
def test_random_chunks(cuts):
    data, expected = _session_bytes()
    assert _drive_server(a.Connection(a.SERVER), data, cuts + [len(data)]) == \
        [a.ProtocolHeader()] + expected[1:]


# ---- round trips of every method through two connections ---------------------------------
CHANNEL_METHODS = [c for c in spec.METHODS.values()
                   if c.CLASS_ID not in (10,) and c not in (spec.ChannelOpen, spec.ChannelOpenOk,
                                                            spec.ChannelClose,
                                                            spec.ChannelCloseOk)]


@pytest.mark.parametrize("cls", CHANNEL_METHODS, ids=lambda c: c.NAME)
@CI
@given(data=st.data())
def test_channel_method_roundtrip(cls, data):
    c, s = pair(channels=(1, 7))
    m = data.draw(method(cls, channel=st.sampled_from([1, 7])))
    src, dst = (c, s) if cls.BY_CLIENT else (s, c)
    wire = src.send(m)
    assert feed(dst, wire) == [m]
    dst2 = pair(channels=(1, 7))[1 if cls.BY_CLIENT else 0]
    assert feed(dst2, wire, [1] * len(wire)) == [m]


@pytest.mark.parametrize("cls", [c for c in spec.METHODS.values() if c.CLASS_ID == 10],
                         ids=lambda c: c.NAME)
@CI
@given(data=st.data())
def test_connection_method_codec_roundtrip(cls, data):
    m = data.draw(method(cls))
    payload = spec.ENCODERS[cls](m)
    assert spec.DECODERS[cls.INDEX](payload, 0) == m


# ---- framing --------------------------------------------------------------------------
def test_frame_max_enforced_from_the_7_byte_header():
    c, s = pair(frame_max=4096)
    s.receive_data(struct.pack(">BHI", 3, 1, 5000))  # only the header, no payload
    with pytest.raises(a.RemoteProtocolError) as ei:
        s.next_event()
    assert ei.value.reply_code == 501 and isinstance(ei.value.hint, a.ConnectionClose)
    assert ei.value.hint.reply_code == 501 and ei.value.fatal


def test_body_split_at_negotiated_frame_max():
    c, s = pair(frame_max=4096)
    body = b"z" * 10000
    wire = c.send(a.BasicPublish(body=body, channel=1))
    sizes, i = [], 0
    while i < len(wire):
        t, ch, n = struct.unpack_from(">BHI", wire, i)
        assert n + 8 <= 4096 and wire[i + 7 + n] == 0xCE
        sizes.append((t, n))
        i += 8 + n
    assert [t for t, _ in sizes] == [1, 2, 3, 3, 3] and sum(n for t, n in sizes if t == 3) == 10000
    assert feed(s, wire)[0].body == body


def test_method_too_big_for_frame_max_is_local_error():
    c, s = pair(frame_max=4096)
    with pytest.raises(a.LocalProtocolError):
        c.send(a.QueueDeclare(arguments={"x": "y" * 5000}, channel=1))


def test_tune_negotiation():
    c = a.Connection(a.CLIENT, frame_max=65536, channel_max=100, heartbeat=0)
    ok = c.tune_ok(a.ConnectionTune(channel_max=2047, frame_max=131072, heartbeat=60))
    assert (ok.channel_max, ok.frame_max, ok.heartbeat) == (100, 65536, 60)


def test_server_rejects_tune_ok_above_its_limits():
    c, s = a.Connection(a.CLIENT), a.Connection(a.SERVER, frame_max=8192)
    for who, ev in HANDSHAKE[:3]:
        transfer(*((c, s) if who == "c" else (s, c)), ev)
    transfer(s, c, s.tune())
    with pytest.raises(a.RemoteProtocolError) as ei:
        transfer(c, s, a.ConnectionTuneOk(channel_max=1, frame_max=131072, heartbeat=0))
    assert ei.value.reply_code == 530


@pytest.mark.parametrize("tune_ok, text", [
    (a.ConnectionTuneOk(channel_max=0, frame_max=8192), "negotiated channel_max = 0 (no limit) is higher than "
                                                        "the maximum allowed value (2047)"),
    (a.ConnectionTuneOk(channel_max=4000, frame_max=8192), "negotiated channel_max = 4000 is higher than the "
                                                           "maximum allowed value (2047)"),
    (a.ConnectionTuneOk(channel_max=10, frame_max=0), "negotiated frame_max = 0 is higher than the maximum "
                                                      "allowed value (8192)"),
    (a.ConnectionTuneOk(channel_max=10, frame_max=100), "negotiated frame_max = 100 is lower than the minimum "
                                                        "allowed value (4096)"),
])
def test_tune_ok_refusals_have_rabbitmqs_texts(tune_ok, text):
    c, s = a.Connection(a.CLIENT), a.Connection(a.SERVER, frame_max=8192, channel_max=2047)
    for who, ev in HANDSHAKE[:3]:
        transfer(*((c, s) if who == "c" else (s, c)), ev)
    transfer(s, c, s.tune())
    err = _err(s, method_frame(tune_ok))  # raw: the client codec would refuse to send some of them
    assert (err.reply_code, err.hint.reply_text) == (530, text)


def test_eof():
    c, s = pair()
    s.receive_data(b"")
    assert isinstance(s.next_event(), a.ConnectionClosed)
    c2, s2 = pair()
    s2.receive_data(b"\x01\x00")
    s2.receive_data(b"")
    with pytest.raises(a.RemoteProtocolError):
        s2.next_event()


# ---- protocol header ----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [b"AMQP\x00\x00\x08\x00", b"AMQP\x01\x01\x00\x09",
                                 b"GET / HTTP/1.1\r\n", b"\x01\x00\x00"])
def test_wrong_header_is_answered_with_ours(bad):
    s = a.Connection(a.SERVER)
    s.receive_data(bad)
    with pytest.raises(a.RemoteProtocolError) as ei:
        s.next_event()
    assert ei.value.hint == a.ProtocolHeader()
    assert s.send(ei.value.hint) == b"AMQP\x00\x00\x09\x01"
    assert s.state == S.CLOSED
    with pytest.raises(a.RemoteProtocolError):  # stays failed
        s.next_event()


def test_client_sees_server_refusing_its_header():
    c = a.Connection(a.CLIENT)
    c.send(a.ProtocolHeader())
    c.receive_data(b"AMQP\x00\x00")
    assert c.next_event() is a.NEED_DATA  # waits for all 8 bytes
    c.receive_data(b"\x08\x00")
    with pytest.raises(a.RemoteProtocolError) as ei:
        c.next_event()
    assert ei.value.hint is None


# ---- errors and their reply codes -------------------------------------------------------
def _err(conn, data) -> a.RemoteProtocolError:
    conn.receive_data(data)
    with pytest.raises(a.RemoteProtocolError) as ei:
        while conn.next_event() is not a.NEED_DATA:
            pass
    return ei.value


CASES = {
    "frame-end missing": (501, frame(1, 1, b"\x00\x3c\x00\x50" + b"\x00" * 9, end=b"\x00")),
    "unknown frame type": (501, frame(7, 1, b"")),
    "heartbeat on channel 1": (501, frame(8, 1, b"")),
    "method args truncated": (502, frame(1, 1, b"\x00\x3c\x00\x50\x00")),
    "method args too long": (502, frame(1, 1, spec.ENCODERS[spec.BasicAck](
        a.BasicAck(channel=1)) + b"\x00")),
    "bad table type": (502, frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x00\x00\x00"
                                  b"\x00\x00\x00\x04\x01k?\x00")),
    "connection method on channel 1": (503, method_frame(a.ConnectionBlocked(channel=1))),
    "channel not open": (504, method_frame(a.BasicQos(channel=3))),
    "channel method on channel 0": (504, frame(1, 0, spec.ENCODERS[spec.BasicQos](
        a.BasicQos()))),
    "channel opened twice": (504, method_frame(a.ChannelOpen(channel=1))),
    "header without method": (505, header_frame(1, 0)),
    "body without header": (505, frame(3, 1, b"abc")),
    "method while content expected": (505, method_frame(a.BasicPublish(channel=1))
                                      [:-1] + b"\xce" + method_frame(a.BasicQos(channel=1))),
    "body larger than announced": (505, method_frame(a.BasicPublish(channel=1))
                                   + header_frame(1, 2) + frame(3, 1, b"abc")),
    "header for another class": (505, method_frame(a.BasicPublish(channel=1))
                                 + header_frame(1, 2, class_id=50)),
    "unknown method": (540, frame(1, 1, b"\x00\x3c\x03\xe7")),
}
# build a 100-deep nested table for queue.declare arguments
_inner = b"V"
for _ in range(100):
    _inner = b"A" + struct.pack(">I", len(_inner)) + _inner
_tbl = b"\x01k" + _inner
CASES["nesting too deep"] = (506, frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x00\x00" +
                                        struct.pack(">I", len(_tbl)) + _tbl))
# a server receiving basic.deliver (only servers send it)
CASES["server-only method from client"] = (503, method_frame(a.BasicDeliver(channel=1)))


@pytest.mark.parametrize("name", list(CASES))
def test_hard_errors(name):
    code, data = CASES[name]
    c, s = pair(channel_max=2047)
    err = _err(s, data)
    assert err.reply_code == code, err
    assert isinstance(err.hint, a.ConnectionClose) and err.hint.reply_code == code
    assert code in spec.HARD_ERRORS
    # the hint can be sent, and the close handshake can complete
    assert err.fatal == (name == "frame-end missing")  # only a lost frame boundary is fatal
    s.send(err.hint)
    if not err.fatal:
        feed(s, method_frame(a.BasicQos(channel=1)))  # discarded while closing
        assert feed(s, method_frame(a.ConnectionCloseOk())) == [a.ConnectionCloseOk()]
        assert s.state == S.CLOSED


def test_channel_max_bounds_open_channels_not_numbers():
    """RabbitMQ's rule: any channel number 1..65535 may be opened; channel_max caps how many are
    open at once (530 NOT_ALLOWED with RabbitMQ's text past it)."""
    c, s = pair(channels=(65535, 3000), channel_max=3)  # open-ok sent on 65535 too
    assert feed(s, method_frame(a.ChannelOpen(channel=9))) == [a.ChannelOpen(channel=9)]
    c, s = pair(channels=(65535, 3000, 7), channel_max=3)
    err = _err(s, method_frame(a.ChannelOpen(channel=9)))
    assert err.reply_code == 530
    assert err.hint.reply_text == "number of channels opened (3) has reached the negotiated channel_max (3)"


def test_soft_error_content_too_large_keeps_connection():
    c, s = pair(channels=(1, 2), max_body_size=10)
    wire = c.send(a.BasicPublish(body=b"x" * 11, channel=1))
    s.receive_data(wire)
    with pytest.raises(a.RemoteProtocolError) as ei:
        s.next_event()
    assert ei.value.reply_code == 311
    assert ei.value.hint == a.ChannelClose(311, "message size 11 is larger than configured max size 10", 60, 40,
                                            channel=1)
    assert s.next_event() is a.NEED_DATA  # the oversized body is skipped
    m = a.BasicPublish(body=b"ok", channel=2)
    assert transfer(c, s, m) == [m]  # other channels keep working
    feed(c, s.send(ei.value.hint))
    assert transfer(c, s, a.ChannelCloseOk(channel=1)) == [a.ChannelCloseOk(channel=1)]
    assert s.channel_state(1) == S.CH_CLOSED


def test_local_errors():
    c, s = pair()
    with pytest.raises(a.LocalProtocolError):
        c.send(a.BasicDeliver(channel=1))  # only servers deliver
    with pytest.raises(a.LocalProtocolError):
        c.send(a.BasicQos(channel=5))  # not open
    with pytest.raises(a.LocalProtocolError):
        c.send(a.BasicQos(channel=0))
    with pytest.raises(a.LocalProtocolError):
        c.send(a.ConnectionBlocked(channel=1))
    with pytest.raises(a.LocalProtocolError):
        c.send(a.QueueDeclare(queue="q" * 300, channel=1))  # shortstr over 255 bytes
    with pytest.raises(a.LocalProtocolError):
        c.send(a.ConnectionOpen())  # already open
    # not an event: the compiled build (mypyc) checks send()'s declared argument type first
    with pytest.raises((a.LocalProtocolError, TypeError) if a.COMPILED else a.LocalProtocolError):
        c.send(object())
    assert c.state == S.OPEN  # misuse changes nothing


def test_discard_after_we_close_a_channel():
    c, s = pair()
    transfer(c, s, a.ChannelClose(200, "bye", channel=1))
    # in-flight traffic from the server on that channel is dropped, content included
    dl = method_frame(a.BasicDeliver(channel=1)) + header_frame(1, 3) + frame(3, 1, b"abc")
    assert feed(c, dl) == []
    assert transfer(s, c, a.ChannelCloseOk(channel=1)) == [a.ChannelCloseOk(channel=1)]


# ---- state tables: every (sender, state, method) of the connection table ----------------
CONN_METHODS = [c for c in spec.METHODS.values() if c.CLASS_ID == 10]
CONN_STATES = [S.AWAIT_START_OK, S.AWAIT_SECURE_OR_TUNE, S.AWAIT_SECURE_OK, S.AWAIT_TUNE_OK,
               S.AWAIT_OPEN, S.AWAIT_OPEN_OK, S.OPEN, S.CLOSING_BY_CLIENT, S.CLOSING_BY_SERVER]


@pytest.mark.parametrize("state", CONN_STATES)
@pytest.mark.parametrize("role", [a.CLIENT, a.SERVER], ids=["client", "server"])
def test_connection_table_exhaustive(state, role):
    for cls in CONN_METHODS:
        m = cls()
        allowed = S.CONNECTION_TABLE.get((role, state, cls))
        sender = a.Connection(role)
        sender.state = state
        if allowed is None:
            with pytest.raises(a.LocalProtocolError):
                sender.send(m)
            assert sender.state == state
        else:
            sender.send(m)
            assert sender.state == allowed
        receiver = a.Connection(a.SERVER if role is a.CLIENT else a.CLIENT)
        receiver.state = state
        receiver.receive_data(method_frame(m))
        closing_by_receiver = S.CLOSING_BY.get(state) is receiver.our_role
        if allowed is not None:
            assert receiver.next_event() == m and receiver.state == allowed
        elif closing_by_receiver:
            assert receiver.next_event() is a.NEED_DATA  # discarded while closing
        else:
            with pytest.raises(a.RemoteProtocolError) as ei:
                receiver.next_event()
            assert ei.value.reply_code == 503


CH_STATES = [S.CH_CLOSED, S.CH_OPENING, S.CH_OPEN, S.CH_CLOSING_BY_CLIENT,
             S.CH_CLOSING_BY_SERVER]
CH_MGMT = [spec.ChannelOpen, spec.ChannelOpenOk, spec.ChannelClose, spec.ChannelCloseOk,
           spec.ChannelFlow, spec.BasicQos]


@pytest.mark.parametrize("state", CH_STATES)
@pytest.mark.parametrize("role", [a.CLIENT, a.SERVER], ids=["client", "server"])
def test_channel_table_exhaustive(state, role):
    for cls in CH_MGMT:
        m = cls(channel=1)
        allowed = S.CHANNEL_TABLE.get((role, state, cls))
        if allowed is None and cls in (spec.ChannelFlow, spec.BasicQos) and \
                (cls.BY_CLIENT if role is a.CLIENT else cls.BY_SERVER):
            allowed = S.CHANNEL_TABLE.get((role, state, S.ANY_METHOD))
        conns = pair(channels=(1,) if state != S.CH_CLOSED else ())
        sender = conns[0] if role is a.CLIENT else conns[1]
        receiver = conns[1] if role is a.CLIENT else conns[0]
        for conn in conns:
            if state != S.CH_CLOSED:
                conn._channels[1].state = state
        if allowed is None:
            with pytest.raises(a.LocalProtocolError):
                sender.send(m)
        else:
            sender.send(m)
            assert sender.channel_state(1) == allowed
        receiver.receive_data(method_frame(m))
        if allowed is not None:
            assert receiver.next_event() == m and receiver.channel_state(1) == allowed
        elif S.CH_DISCARDING.get(state) is receiver.our_role:
            assert receiver.next_event() is a.NEED_DATA
        else:
            with pytest.raises(a.RemoteProtocolError) as ei:
                receiver.next_event()
            assert ei.value.reply_code in (503, 504)


# ---- heartbeats ------------------------------------------------------------------------
def test_heartbeat_timers():
    c, s = a.Connection(a.CLIENT), a.Connection(a.SERVER)
    t = 100.0
    for who, ev in HANDSHAKE:
        if isinstance(ev, (a.ConnectionTune, a.ConnectionTuneOk)):
            ev = type(ev)(2047, 131072, 10)
        src, dst = (c, s) if who == "c" else (s, c)
        dst.receive_data(src.send(ev, now=t), now=t)
        drain(dst)
    assert c.heartbeat == s.heartbeat == 10
    assert c.get_timer() == t + 10  # send deadline first
    c.handle_timer(t + 5)
    assert c.next_event() is a.NEED_DATA
    c.handle_timer(t + 10)
    assert isinstance(c.next_event(), a.HeartbeatDue)
    assert c.get_timer() == t + 20  # now only the receive deadline
    hb = c.send(a.Heartbeat(), now=t + 10)
    assert hb == b"\x08\x00\x00\x00\x00\x00\x00\xce"
    s.receive_data(hb, now=t + 10)
    assert s.next_event() == a.Heartbeat()
    c.handle_timer(t + 20)
    assert isinstance(c.next_event(), a.PeerTimedOut)
    assert c.get_timer() is None


def test_no_heartbeat_when_negotiated_off():
    c, s = pair()
    assert c.get_timer() is None
    c.handle_timer(1e9)
    assert c.next_event() is a.NEED_DATA


def test_failed_send_leaves_state_untouched():
    c = a.Connection(a.CLIENT)
    c.send(a.ProtocolHeader())
    c.receive_data(s_send(a.ConnectionStart(mechanisms=b"PLAIN")))
    drain(c)
    with pytest.raises(a.LocalProtocolError):
        c.send(a.ConnectionStartOk(mechanism="M" * 300))  # shortstr too long
    assert c.state == S.AWAIT_START_OK
    c.send(a.ConnectionStartOk(response=a.plain_response("u", "p")))
    c.receive_data(s_send(a.ConnectionTune(0, 0, 0)))
    drain(c)
    with pytest.raises(a.LocalProtocolError):
        c.send(a.ConnectionTuneOk(frame_max=100))
    assert c.state == S.AWAIT_TUNE_OK


def test_hard_error_in_handshake_then_close():
    s = a.Connection(a.SERVER)
    s.receive_data(b"AMQP\x00\x00\x09\x01")
    assert s.next_event() == a.ProtocolHeader()
    s.send(a.ConnectionStart(mechanisms=b"PLAIN"))
    s.receive_data(method_frame(a.ConnectionOpen()))  # open before start-ok
    with pytest.raises(a.RemoteProtocolError) as ei:
        s.next_event()
    assert ei.value.reply_code == 503 and not ei.value.fatal
    assert ei.value.hint.class_id == 10 and ei.value.hint.method_id == 40
    assert s.state == S.ERROR
    s.send(ei.value.hint)
    assert s.state == S.CLOSING_BY_SERVER
    assert feed(s, method_frame(a.ConnectionCloseOk())) == [a.ConnectionCloseOk()]
    assert s.state == S.CLOSED


def test_channel_flow_pauses_our_content():
    c, s = pair()
    assert transfer(s, c, a.ChannelFlow(active=False, channel=1)) == [
        a.ChannelFlow(active=False, channel=1)]
    assert c.channel_paused(1)
    with pytest.raises(a.LocalProtocolError):
        c.send(a.BasicPublish(body=b"x", channel=1))
    c.send(a.ChannelFlowOk(active=False, channel=1))
    c.send(a.BasicAck(delivery_tag=1, channel=1))  # methods without content still flow
    transfer(s, c, a.ChannelFlow(active=True, channel=1))
    assert not c.channel_paused(1)
    assert transfer(c, s, a.BasicPublish(body=b"x", channel=1))[0].body == b"x"
    # the other direction: a client pausing deliveries; get-ok is exempt
    transfer(c, s, a.ChannelFlow(active=False, channel=1))
    with pytest.raises(a.LocalProtocolError):
        s.send(a.BasicDeliver(channel=1))
    s.send(a.BasicGetOk(channel=1))


def test_pre_encoded_properties():
    c, s = pair()
    props = a.BasicProperties(content_type="a/b", headers={"k": 1})
    raw = spec.encode_properties(props)
    wire = s.send(a.BasicDeliver("t", 1, False, "", "q", raw, b"body", channel=1))
    assert wire == s.send(a.BasicDeliver("t", 1, False, "", "q", props, b"body", channel=1))
    assert feed(c, wire)[0].properties == props


@pytest.mark.parametrize("cstate", [S.C_IDLE, S.C_HEADER, S.C_BODY])
@pytest.mark.parametrize("ftype", [S.METHOD, S.HEADER, S.BODY])
def test_content_table_exhaustive(cstate, ftype):
    c, s = pair()
    lead = {S.C_IDLE: b"",
            S.C_HEADER: method_frame(a.BasicPublish(channel=1)),
            S.C_BODY: method_frame(a.BasicPublish(channel=1)) + header_frame(1, 10)}[cstate]
    if lead:
        assert feed(s, lead) == []
    assert s._channels[1].cstate == cstate
    probe = {S.METHOD: method_frame(a.BasicQos(channel=1)), S.HEADER: header_frame(1, 5),
             S.BODY: frame(3, 1, b"ab")}[ftype]
    s.receive_data(probe)
    if (cstate, ftype) in S.CONTENT_TABLE:
        s.next_event()  # accepted (an event, or NEED_DATA while content is incomplete)
        assert s.state == S.OPEN
    else:
        with pytest.raises(a.RemoteProtocolError) as ei:
            s.next_event()
        assert ei.value.reply_code == spec.UNEXPECTED_FRAME


def test_client_start_ok_prefers_plain_and_falls_back_to_amqplain() -> None:
    import amqpproto as a

    conn = a.Connection(a.CLIENT)
    ok = conn.start_ok(a.ConnectionStart(mechanisms=b"AMQPLAIN PLAIN"), "u", "p", "prod")
    assert (ok.mechanism, bytes(ok.response)) == ("PLAIN", b"\x00u\x00p")
    assert ok.client_properties["product"] == "prod"
    assert ok.client_properties["capabilities"]["publisher_confirms"] is True
    ok = conn.start_ok(a.ConnectionStart(mechanisms=b"AMQPLAIN"), "u", "p", "prod")
    assert ok.mechanism == "AMQPLAIN"
    assert a.parse_sasl_response("AMQPLAIN", bytes(ok.response)) == ("u", "p")
