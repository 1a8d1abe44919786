"""The server's publish fast path (method + header + body parsed in one pass) returns exactly the
events, errors and channel state of the frame-by-frame path, however the bytes are chunked and
whatever is wrong with them (split bodies, wrong channels, bad sizes, flipped bytes, closed channels)."""

from __future__ import annotations

import struct

import pytest
from amqp_strategies import CI, pair, properties
from hypothesis import given
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import spec
from amqpproto._rawprops import PropertyShapes
from amqpproto._writers import frame

_CH = st.sampled_from([1, 1, 1, 2, 3])  # 3 is never opened


@st.composite
def _publish(draw) -> bytes:
    ch = draw(_CH)
    m = spec.BasicPublish(0, draw(st.sampled_from(["", "x"])), draw(st.text(max_size=8)),
                          draw(st.booleans()), draw(st.booleans()))
    props = draw(st.none() | st.integers(0, 255).map(lambda d: spec.BasicProperties(delivery_mode=d))
                 | properties())
    body = draw(st.binary(max_size=40) | st.integers(0, 5000).map(lambda n: b"b" * n))
    declared = len(body) if draw(st.integers(0, 9)) else draw(st.integers(0, 50))
    header = struct.pack(">HHQ", draw(st.sampled_from([60, 60, 60, 50])), 0, declared) + \
        spec.encode_properties(props or spec.BasicProperties())
    hch = ch if draw(st.integers(0, 9)) else draw(_CH)
    frames = [frame(1, ch, spec.ENCODERS[spec.BasicPublish](m)), frame(2, hch, header)]
    split = max(len(body), 1) if draw(st.integers(0, 3)) else draw(st.integers(1, max(len(body), 1)))
    for i in range(0, len(body), split):
        frames.append(frame(3, ch, body[i:i + split]))
    if draw(st.integers(0, 9)) == 0:
        del frames[draw(st.integers(0, len(frames) - 1))]
    return b"".join(frames)


_other = st.sampled_from([
    frame(1, 1, spec.ENCODERS[spec.BasicAck](spec.BasicAck(1, True))),
    frame(1, 2, spec.ENCODERS[spec.ChannelClose](spec.ChannelClose(200, "bye", 0, 0))),
    frame(8, 0, b""),
    frame(3, 1, b"stray body"),
])


@st.composite
def _stream(draw) -> bytes:
    # a publish repeated: a run of one method (PublishRun with publish_runs), unless a flip breaks it
    data = bytearray(b"".join(draw(st.lists(_publish() | _other | _publish().map(lambda p: p * 3), min_size=1,
                                            max_size=6))))
    for _ in range(draw(st.integers(1, 2)) if draw(st.integers(0, 4)) == 0 else 0):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def _run(data: bytes, chunks: list[int], fast: bool, max_body_size: int = 3000, raw: bool = False,
         runs: bool = False) -> tuple:
    _, s = pair(channels=(1, 2), frame_max=4096, max_body_size=max_body_size)
    s._fast_publish = fast
    if raw:  # what a server asking for raw properties gets, once decoded (checked below against the general path)
        s._publishing.shapes = PropertyShapes("x-publishing-id", runs)  # runs: as the publishes they stand for
    out: list = []
    i = 0
    for n in chunks + [len(data)]:
        s.receive_data(data[i:i + n])
        i += n
        errors = 0
        while errors < 3:
            try:
                ev = s.next_event()
            except a.RemoteProtocolError as e:
                out.append(("error", str(e), e.reply_code, repr(e.hint), e.fatal))
                errors += 1
                continue
            if ev is a.NEED_DATA:
                break
            for one in ev.publishes() if type(ev) is a.PublishRun else [ev]:
                if type(getattr(one, "properties", None)) is a.RawProperties:
                    one.properties = one.properties.decode()
                out.append(repr(one))
        if i >= len(data):
            break
    chans = {k: (c.state, c.cstate, c.size, c.got, repr(c.method), c.chunks)
             for k, c in s._channels.items()}
    return out, chans, s.state, s._buf.pos, bytes(s._buf.data)


@CI
@given(data=_stream(), chunks=st.lists(st.integers(1, 300), max_size=8))
def test_fast_publish_matches_the_frame_by_frame_path(data, chunks):
    assert _run(data, chunks, True) == _run(data, chunks, False)


@CI
@given(data=_stream(), chunks=st.lists(st.integers(1, 300), max_size=8))
def test_raw_properties_decode_as_the_frame_by_frame_path(data, chunks):
    assert _run(data, chunks, True, raw=True) == _run(data, chunks, False)
    assert _run(data, chunks, True, raw=True, runs=True) == _run(data, chunks, False)


def test_a_run_of_publishes_comes_as_one_event():
    c, s = pair(channels=(1, 2))
    s._publishing.shapes = PropertyShapes("x-publishing-id", runs=True)
    props = [spec.BasicProperties(delivery_mode=2, headers={"x-producer": "p", "x-publishing-id": 2**40 + i})
             for i in range(3)]
    one = [c.send(spec.BasicPublish(0, "", "q", False, False, p, b"b%d" % i, channel=1)) for i, p in enumerate(props)]
    other = c.send(spec.BasicPublish(0, "", "other", False, False, props[0], b"o", channel=1))
    s.receive_data(b"".join(one) + other + one[0][:-3])  # a new key ends the run; a partial one waits
    run, single = s.next_event(), s.next_event()
    assert type(run) is a.PublishRun and run.routing_key == "q" and run.bodies == [b"b0", b"b1", b"b2"]
    assert [p.varying() for p in run.properties] == [2**40, 2**40 + 1, 2**40 + 2]
    assert type(single) is spec.BasicPublish and single.routing_key == "other"
    assert s.next_event() is a.NEED_DATA


@pytest.mark.skipif(a.COMPILED, reason="patches a method, which a mypyc-compiled caller does not "
                    "call through; the pure-Python run covers this")
def test_fast_publish_is_taken_for_a_buffered_triplet():
    c, s = pair()
    props = spec.BasicProperties(delivery_mode=1, headers={"k": 1})
    data = c.send(spec.BasicPublish(0, "", "q", False, False, props, b"x" * 1024, channel=1))
    s.receive_data(data + data)
    calls = []
    orig = s._on_method
    s._on_method = lambda ch, p: calls.append(ch) or orig(ch, p)
    evs = [s.next_event(), s.next_event(), s.next_event()]
    assert evs[2] is a.NEED_DATA and not calls  # never went frame by frame
    for ev in evs[:2]:
        assert ev == spec.BasicPublish(0, "", "q", False, False, props, b"x" * 1024, channel=1)
    assert s._channels[1].cstate == "C_IDLE"


def _triplet(body: bytes, header: bytes | None = None, body_frames: list[bytes] | None = None) -> bytes:
    m = spec.BasicPublish(0, "", "q", False, False)
    if header is None:
        header = struct.pack(">HHQ", 60, 0, len(body)) + spec.encode_properties(spec.BasicProperties())
    frames = [frame(1, 1, spec.ENCODERS[spec.BasicPublish](m)), frame(2, 1, header)]
    return b"".join(frames + [frame(3, 1, b) for b in (body_frames if body_frames is not None else [body])])


@pytest.mark.parametrize("data", [
    _triplet(b"y" * 3001),  # over max_body_size: 311 on the channel
    _triplet(b"y" * 4089),  # a body frame over frame_max: fatal frame error
    _triplet(b"y" * 4088),  # largest body frame that fits
    _triplet(b"", header=struct.pack(">HHQ", 60, 0, 0)),  # header without the flag word
    _triplet(b"", header=struct.pack(">HHQ", 60, 0, 0) + b"\x00"),  # half a flag word
    _triplet(b"abc", header=struct.pack(">HHQ", 60, 0, 3) + b"\x10\x00"),  # flag without its value
    _triplet(b"abc", header=struct.pack(">HHQ", 60, 0, 3) + b"\x00\x01"),  # continuation bit
    _triplet(b"abc", header=struct.pack(">HHQ", 60, 0, 3) + b"\x10\x00\x02"),  # delivery-mode only
    _triplet(b"abc", header=struct.pack(">HHQ", 60, 0, 3) + b"\x10\x00\x02\x00"),  # one byte too many
    _triplet(b"abcd", body_frames=[b"ab", b"cd"]),
    _triplet(b"abcd", body_frames=[b"abcde"]),
    _triplet(b"", body_frames=[]),
])
def test_fast_publish_edge_cases_match(data):
    for chunks in ([], [len(data) - 1], [7, 1, 30]):
        for limit in (3000, 10**6):
            assert _run(data, chunks, True, limit) == _run(data, chunks, False, limit)
            assert _run(data, chunks, True, limit, raw=True) == _run(data, chunks, False, limit)
            assert _run(data, chunks, True, limit, raw=True, runs=True) == _run(data, chunks, False, limit)
