"""Framing rules (RFC 6455 section 5), limits and the close handshake, on open connections."""
import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsframe_helpers import chunkings, close_payload, drain, frame, normalise

from wsframe import (
    CLIENT,
    NEED_DATA,
    SERVER,
    BytesMessage,
    CloseConnection,
    Connection,
    ConnectionState,
    LocalProtocolError,
    Ping,
    Pong,
    RemoteProtocolError,
    TextMessage,
)

TEXT, BIN, CLOSE, PING, PONG, CONT = 1, 2, 8, 9, 10, 0


def server(**kw) -> Connection:
    kw.setdefault("permessage_deflate", None)
    return Connection(SERVER, handshake=False, **kw)


def client(**kw) -> Connection:
    kw.setdefault("permessage_deflate", None)
    return Connection(CLIENT, handshake=False, rng=lambda n: b"\x01\x02\x03\x04"[:n] * (n // 4 or 1), **kw)


def all_modes(make, data: bytes, eof: bool = False) -> list:
    """Events for whole / bytewise / random feeding, asserting the three agree."""
    results = [drain(make(), chunks, eof) for chunks in chunkings(data)]
    assert results[0] == results[1] == results[2]
    return results[0]


@pytest.mark.parametrize("n,form", [(0, 7), (125, 7), (126, 16), (65535, 16), (65536, 64), (200_000, 64)])
def test_payload_length_forms(n, form):
    payload = bytes(range(256)) * (n // 256) + bytes(n % 256)
    data = frame(BIN, payload)
    assert len(data) == n + {7: 2, 16: 4, 64: 10}[form] + 4
    events = drain(server(), [data])
    assert events == [BytesMessage(payload)]
    # the writer picks the same minimal form
    out = client().send(BytesMessage(payload))
    assert out[:2 + {7: 0, 16: 2, 64: 8}[form]] == data[:2 + {7: 0, 16: 2, 64: 8}[form]]
    assert drain(server(), [out]) == [BytesMessage(payload)]


def test_writer_length_forms_are_minimal():
    srv = server()
    for n, head in [(125, b"\x82\x7d"), (126, b"\x82\x7e\x00\x7e"), (65536, b"\x82\x7f" + (65536).to_bytes(8, "big"))]:
        out = srv.send(BytesMessage(b"x" * n))
        assert out.startswith(head) and len(out) == len(head) + n


@pytest.mark.parametrize("n,form", [(5, 16), (125, 16), (5, 64), (65535, 64)])
def test_non_minimal_lengths_are_rejected(n, form):
    assert drain(server(), [frame(BIN, b"x" * n, length_form=form)]) == [("error", 1002)]


def test_64bit_length_with_top_bit_set():
    data = b"\x82\xff" + (1 << 63 | 70000).to_bytes(8, "big") + b"abcd"
    assert drain(server(max_frame_size=1 << 64), [data]) == [("error", 1002)]


def test_masking_rules_per_role():
    # an unmasked client frame is a protocol error for the server ...
    assert drain(server(), [frame(TEXT, b"hi", key=None)]) == [("error", 1002)]
    # ... and a masked server frame one for the client
    assert drain(client(), [frame(TEXT, b"hi")]) == [("error", 1002)]
    assert drain(client(), [frame(TEXT, b"hi", key=None)]) == [TextMessage("hi")]


def test_client_masks_and_server_does_not():
    out = client().send(TextMessage("hello"))
    assert out[1] & 0x80 and out[2:6] == b"\x01\x02\x03\x04"
    assert drain(server(), [out]) == [TextMessage("hello")]
    plain = server().send(TextMessage("hello"))
    assert plain == b"\x81\x05hello"


@pytest.mark.parametrize("opcode", [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF])
def test_reserved_opcodes(opcode):
    assert drain(server(), [frame(opcode, b"")]) == [("error", 1002)]


@pytest.mark.parametrize("rsv", [1, 2, 4])
def test_reserved_bits_without_extension(rsv):
    assert drain(server(), [frame(TEXT, b"x", rsv=rsv)]) == [("error", 1002)]


def test_control_frame_rules():
    assert drain(server(), [frame(PING, b"x" * 125)]) == [Ping(b"x" * 125)]
    assert drain(server(), [frame(PING, b"x" * 126)]) == [("error", 1002)]
    assert drain(server(), [frame(PING, b"x", fin=False)]) == [("error", 1002)]
    with pytest.raises(LocalProtocolError):
        server().send(Ping(b"x" * 126))


def test_fragmentation_with_interleaved_control_frames():
    data = (
        frame(TEXT, "hé".encode()[:2], fin=False)
        + frame(PING, b"p1")
        + frame(CONT, "hé".encode()[2:] + b" w", fin=False)
        + frame(PONG, b"p2")
        + frame(CONT, b"orld")
        + frame(BIN, b"\x00\x01")
    )
    assert all_modes(server, data) == [Ping(b"p1"), Pong(b"p2"), TextMessage("hé world"), BytesMessage(b"\x00\x01")]


def test_deliver_fragments_mode():
    data = frame(TEXT, b"ab", fin=False) + frame(PING) + frame(CONT, b"\xc3", fin=False) + frame(CONT, b"\xa9")
    events = all_modes(lambda: server(deliver_fragments=True), data)
    assert events == [TextMessage("ab", False), Ping(b""), TextMessage("", False), TextMessage("é", True)]


@pytest.mark.parametrize(
    "data",
    [
        frame(CONT, b"x"),  # continuation without a message
        frame(TEXT, b"a", fin=False) + frame(TEXT, b"b"),  # new message inside a fragmented one
        frame(BIN, b"a", fin=False) + frame(BIN, b"b"),
    ],
)
def test_bad_fragment_sequences(data):
    assert drain(server(), [data])[-1] == ("error", 1002)


def test_utf8_validated_across_fragments():
    snowman = "☃".encode()
    ok = frame(TEXT, snowman[:1], fin=False) + frame(CONT, snowman[1:2], fin=False) + frame(CONT, snowman[2:])
    assert all_modes(server, ok) == [TextMessage("☃")]
    # invalid bytes fail at once, without waiting for the end of the message
    assert all_modes(server, frame(TEXT, b"ok\xff", fin=False)) == [("error", 1007)]
    # a truncated sequence fails when the message ends
    assert all_modes(server, frame(TEXT, snowman[:2])) == [("error", 1007)]
    assert all_modes(server, frame(TEXT, b"\xed\xa0\x80")) == [("error", 1007)]  # a UTF-16 surrogate


@pytest.mark.parametrize("code", [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4999])
def test_valid_close_codes(code):
    assert drain(server(), [frame(CLOSE, close_payload(code, "bye ✓".encode()))]) == [CloseConnection(code, "bye ✓")]


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535])
def test_invalid_close_codes(code):
    assert drain(server(), [frame(CLOSE, close_payload(code))]) == [("error", 1002)]
    if code != 1005:  # sending 1005 ("no status") means an empty Close payload
        with pytest.raises(LocalProtocolError):
            server().send(CloseConnection(code))


def test_close_payload_edge_cases():
    assert drain(server(), [frame(CLOSE, b"")]) == [CloseConnection(1005, "")]
    assert drain(server(), [frame(CLOSE, b"\x03")]) == [("error", 1002)]
    assert drain(server(), [frame(CLOSE, close_payload(1000, b"\xff"))]) == [("error", 1007)]
    srv = server()
    assert srv.send(CloseConnection(None)) == b"\x88\x00"
    with pytest.raises(LocalProtocolError):
        server().send(CloseConnection(1000, "x" * 124))
    assert server().send(CloseConnection(1000, "x" * 123))[:4] == b"\x88\x7d\x03\xe8"


def test_close_handshake_initiated_by_peer():
    srv = server()
    srv.receive_data(frame(CLOSE, close_payload(1001, b"away")))
    ev = srv.next_event()
    assert ev == CloseConnection(1001, "away") and srv.state is ConnectionState.CLIENT_CLOSING
    # the side that has not closed yet may still send, then completes the handshake
    assert srv.send(TextMessage("last words")) == b"\x81\x0alast words"
    assert srv.send(ev.response()) == b"\x88\x02\x03\xe9"
    assert srv.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        srv.send(TextMessage("too late"))


def test_close_handshake_initiated_locally():
    cli = client()
    assert cli.send(CloseConnection(1000))[:2] == b"\x88\x82"
    assert cli.state is ConnectionState.CLIENT_CLOSING
    with pytest.raises(LocalProtocolError):
        cli.send(TextMessage("after close"))
    # the peer may still send data before its Close
    events = drain(cli, [frame(TEXT, b"x", key=None) + frame(CLOSE, close_payload(1000), key=None)])
    assert events == [TextMessage("x"), CloseConnection(1000, "")]
    assert cli.state is ConnectionState.CLOSED


def test_data_after_peer_close_is_an_error():
    assert drain(server(), [frame(CLOSE, close_payload(1000)) + frame(TEXT, b"x")]) == [
        CloseConnection(1000, ""),
        ("error", 1002),
    ]


def test_eof_without_close_reports_1006():
    assert all_modes(server, frame(TEXT, b"partial")[:5], eof=True) == [CloseConnection(1006, "connection lost without a Close frame")]
    srv = server()
    assert drain(srv, [frame(TEXT, b"ok")], eof=True)[0] == TextMessage("ok")
    assert srv.state is ConnectionState.CLOSED


def test_frame_size_limit_fails_before_the_payload_arrives():
    srv = server(max_frame_size=1000)
    srv.receive_data(frame(BIN, b"x" * 1001)[:8])  # header only
    with pytest.raises(RemoteProtocolError) as err:
        srv.next_event()
    assert err.value.hint == CloseConnection(1009, err.value.hint.reason)
    # the error sticks, and the hint can still be sent
    with pytest.raises(RemoteProtocolError):
        srv.next_event()
    assert srv.state is ConnectionState.FAILED
    out = srv.send(err.value.hint)
    assert out[0] == 0x88 and out[2:4] == b"\x03\xf1" and srv.state is ConnectionState.CLOSED


def test_message_size_limit_across_fragments():
    data = frame(BIN, b"x" * 600, fin=False) + frame(CONT, b"x" * 400)
    assert drain(server(max_message_size=1000), [data]) == [BytesMessage(b"x" * 1000)]
    assert drain(server(max_message_size=999), [data]) == [("error", 1009)]
    assert drain(server(max_message_size=999, deliver_fragments=True), [data]) == [BytesMessage(b"x" * 600, False), ("error", 1009)]


def test_events_before_an_error_are_delivered_in_order():
    data = frame(TEXT, b"one") + frame(PING, b"p") + frame(7, b"")
    assert all_modes(server, data) == [TextMessage("one"), Ping(b"p"), ("error", 1002)]


def test_outgoing_fragmentation():
    cli = client()
    out = cli.send(TextMessage("ab", message_finished=False)) + cli.send(Ping(b"!")) + cli.send(TextMessage("c"))
    assert normalise(drain(server(), [out])) == [("ping", b"!"), ("text", "abc")]
    with pytest.raises(LocalProtocolError):
        cli.send(TextMessage("x", message_finished=False))
        cli.send(BytesMessage(b"y"))


def test_ping_response_helper():
    srv = server()
    (ping,) = drain(srv, [frame(PING, b"stamp")])
    assert srv.send(ping.response()) == b"\x8a\x05stamp"


def test_empty_continuation_frames_do_not_accumulate():
    srv = server()
    data = frame(BIN, b"a", fin=False) + frame(CONT, b"", fin=False) * 5000 + frame(CONT, b"b")
    srv.receive_data(data[: len(data) - 7])
    assert srv.next_event() is NEED_DATA
    assert len(srv._messages._parts) == 1  # white-box: only the non-empty fragment is held
    srv.receive_data(data[len(data) - 7 :])
    assert srv.next_event() == BytesMessage(b"ab")


def test_bytes_after_the_end_are_dropped():
    srv = server()
    drain(srv, [frame(CLOSE, close_payload(1000))])
    srv.send(CloseConnection(1000))
    srv.receive_data(frame(TEXT, b"x" * 1000))
    assert len(srv._buf) == 0 and srv.state is ConnectionState.CLOSED  # white-box: nothing kept
    failed = server()
    assert drain(failed, [frame(7, b"")]) == [("error", 1002)]
    held = len(failed._buf)  # the offending frame itself
    failed.receive_data(b"\x00" * 1000)
    assert len(failed._buf) == held
    with pytest.raises(RemoteProtocolError):
        failed.next_event()



@given(
    texts=st.lists(st.text(max_size=20), min_size=1, max_size=4),
    garbage=st.binary(min_size=1, max_size=30),
    mode=st.integers(0, 2),
)
def test_trailing_garbage_never_changes_the_events_before_it(texts, garbage, mode):
    cli = client()
    clean = b"".join(cli.send(TextMessage(t)) for t in texts)
    expected = [TextMessage(t) for t in texts]
    events = drain(server(), chunkings(clean + garbage)[mode])
    assert events[: len(expected)] == expected
    rest = events[len(expected) :]
    # garbage is a protocol error, or an incomplete frame (waits), or happens to be valid frames
    assert all(isinstance(e, (TextMessage, BytesMessage, Ping, Pong, CloseConnection)) or e[0] == "error" for e in rest)
