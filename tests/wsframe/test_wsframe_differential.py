"""Differential tests: the same wire bytes into wsframe and wsproto 1.3.2 must give the same
messages, pings, pongs and close codes (including the close code of a protocol error)."""
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsframe_helpers import MASK_KEY, chunkings, drain, frame, normalise, until_close, wsproto_events

from wsframe import CLIENT, SERVER, Connection

# 1014 is left out: wsproto predates its IANA registration and rejects it, wsframe accepts it
CLOSE_CODES = [0, 999, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1015, 1016, 2999, 3000, 4000, 4999, 5000]

utf8_payload = st.text(max_size=40).map(lambda s: s.encode())
any_payload = st.one_of(utf8_payload, st.binary(max_size=40), st.binary(min_size=126, max_size=300))


@st.composite
def frame_spec(draw, role):
    """One frame as the peer of ``role`` would send it, mostly valid, sometimes not."""
    kind = draw(st.sampled_from(["text", "binary", "cont", "ping", "pong", "close", "weird"]))
    fin = draw(st.booleans()) if kind in ("text", "binary", "cont") else draw(st.sampled_from([True, True, True, False]))
    rsv = draw(st.sampled_from([0] * 12 + [1, 2, 4]))
    masked = (role is SERVER) != draw(st.sampled_from([False] * 15 + [True]))
    key = MASK_KEY if masked else None
    if kind == "close":
        shape = draw(st.sampled_from(["empty", "one", "code", "code", "code"]))
        if shape == "empty":
            payload = b""
        elif shape == "one":
            payload = b"\x03"
        else:
            reason = draw(st.one_of(utf8_payload, st.binary(max_size=10)))[:100]
            payload = struct.pack("!H", draw(st.sampled_from(CLOSE_CODES))) + reason
        return frame(8, payload, fin=fin, rsv=rsv, key=key)
    if kind in ("ping", "pong"):
        return frame(9 if kind == "ping" else 10, draw(any_payload), fin=fin, rsv=rsv, key=key)
    if kind == "weird":
        return frame(draw(st.sampled_from([3, 7, 0xB, 0xF])), draw(st.binary(max_size=5)), key=key)
    opcode = {"text": 1, "binary": 2, "cont": 0}[kind]
    payload = draw(any_payload)
    if draw(st.booleans()) and payload:  # split a UTF-8 sequence across frames now and then
        payload = payload[: draw(st.integers(0, len(payload)))]
    return frame(opcode, payload, fin=fin, rsv=rsv, key=key)


@st.composite
def valid_message(draw, role):
    """A well-formed message split into 1-4 fragments (text splits may cut a UTF-8
    sequence, which is legal), with pings and pongs interleaved."""
    key = MASK_KEY if role is SERVER else None
    text = draw(st.booleans())
    body = draw(st.text(max_size=60)).encode() if text else draw(st.binary(max_size=200))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=3)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    out = b""
    for i, piece in enumerate(pieces):
        opcode = (1 if text else 2) if i == 0 else 0
        out += frame(opcode, piece, fin=i == len(pieces) - 1, key=key)
        if draw(st.integers(0, 3)) == 0:
            out += frame(draw(st.sampled_from([9, 10])), draw(st.binary(max_size=8)), key=key)
    return out


def wire(role):
    # mostly well-formed traffic, with an arbitrary (often invalid) frame now and then
    item = st.one_of(valid_message(role), valid_message(role), valid_message(role), frame_spec(role))
    return st.lists(item, max_size=8).map(b"".join)


def ours(role, data: bytes, chunks=None):
    conn = Connection(role, handshake=False, permessage_deflate=None)
    return until_close(normalise(drain(conn, chunks or [data])))


def theirs(role, data: bytes):
    return until_close(normalise(wsproto_events(role, data)))


@given(data=wire(SERVER))
def test_server_role_matches_wsproto(data):
    expected = theirs(SERVER, data)
    assert ours(SERVER, data) == expected
    assert ours(SERVER, data, chunkings(data, seed=len(data))[2]) == expected


@given(data=wire(CLIENT))
def test_client_role_matches_wsproto(data):
    expected = theirs(CLIENT, data)
    assert ours(CLIENT, data) == expected
    assert ours(CLIENT, data, chunkings(data, seed=len(data))[2]) == expected


@pytest.mark.parametrize("role", [SERVER, CLIENT])
@pytest.mark.parametrize(
    "build",
    [
        lambda k: frame(1, "ok ✓".encode(), key=k) + frame(8, struct.pack("!H", 1000) + b"bye", key=k),
        lambda k: frame(1, b"\xce", fin=False, key=k) + frame(9, b"p", key=k) + frame(0, b"\xba", key=k),
        lambda k: frame(1, b"\xff", key=k),
        lambda k: frame(2, b"a", fin=False, key=k) + frame(2, b"b", key=k),
        lambda k: frame(8, struct.pack("!H", 1004), key=k),
        lambda k: frame(8, struct.pack("!H", 3000) + b"\xc0", key=k),
        lambda k: frame(9, b"x" * 126, key=k),
        lambda k: frame(2, b"x" * 70_000, key=k),
        lambda k: frame(0, b"x", key=k),
    ],
)
def test_spec_cases_match_wsproto(role, build):
    data = build(MASK_KEY if role is SERVER else None)
    expected = theirs(role, data)
    assert expected  # every case produces something observable
    for chunks in chunkings(data):
        assert ours(role, data, chunks) == expected
