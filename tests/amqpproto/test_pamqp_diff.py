"""Differential tests against pamqp 4: every method, the content header and every field type,
encoded by one and decoded by the other, both ways; byte-identical where canonical."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pamqp = pytest.importorskip("pamqp")
from amqp_strategies import CI, NAME_ALPHABET, method, properties  # noqa: E402
from pamqp import base as p_base  # noqa: E402
from pamqp import body as p_body  # noqa: E402
from pamqp import commands as p_cmd  # noqa: E402
from pamqp import decode as p_decode  # noqa: E402
from pamqp import encode as p_encode  # noqa: E402
from pamqp import frame as p_frame  # noqa: E402
from pamqp import header as p_header  # noqa: E402

import amqpproto as a  # noqa: E402
from amqpproto import spec  # noqa: E402
from amqpproto._readers import read_value  # noqa: E402
from amqpproto._writers import write_table, write_value  # noqa: E402

P_BY_INDEX = {}
for _cname in dir(p_cmd):
    _pcls = getattr(p_cmd, _cname)
    if isinstance(_pcls, type):
        for _mname in dir(_pcls):
            _m = getattr(_pcls, _mname)
            if isinstance(_m, type) and issubclass(_m, p_base.Frame) and hasattr(_m, "index"):
                P_BY_INDEX[_m.index] = _m

# pamqp 4 dropped the deprecated access class; everything else must have a counterpart.
NO_PAMQP = {spec.AccessRequest, spec.AccessRequestOk}
COMPARED = [c for c in spec.METHODS.values() if c not in NO_PAMQP]

# Tables pamqp encodes canonically like us: sorted keys, no floats (pamqp writes 'f'),
# str/int/bool/None/dict/list/Decimal/bytes.
canon_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                          st.text(max_size=20))
canon_values = st.recursive(canon_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.text(NAME_ALPHABET, max_size=10), inner, max_size=3).map(
        lambda d: dict(sorted(d.items())))), max_leaves=8)
canon_tables = st.dictionaries(st.text(NAME_ALPHABET, max_size=10), canon_values,
                               max_size=4).map(lambda d: dict(sorted(d.items())))


def to_pamqp(m):
    pcls = P_BY_INDEX[m.INDEX]
    args = []
    for name, wire in m.FIELDS:
        v = getattr(m, name)
        args.append(v.decode() if wire == "longstr" else v)
    return pcls(*args)


def from_pamqp_equal(ours, theirs) -> None:
    assert type(theirs).index == ours.INDEX
    for (name, wire), pname in zip(ours.FIELDS, theirs.__slots__, strict=False):
        v, pv = getattr(ours, name), getattr(theirs, pname)
        if wire == "longstr" and isinstance(pv, str):
            pv = pv.encode()
        assert v == pv, (ours.NAME, name, v, pv)


def test_every_method_has_a_pamqp_counterpart():
    assert {P_BY_INDEX[c.INDEX].name.lower() for c in COMPARED} == {
        c.NAME.replace("-", "") for c in COMPARED}
    assert len(COMPARED) == 64


# Reserved fields pamqp's validate() pins to one value.
PAMQP_PINNED = {
    (spec.ConnectionOpen, "capabilities"): "", (spec.ConnectionOpen, "insist"): False,
    (spec.ConnectionOpenOk, "known_hosts"): "", (spec.ChannelOpen, "out_of_band"): "0",
    (spec.ChannelOpenOk, "channel_id"): b"0", (spec.BasicGetEmpty, "cluster_id"): "",
}


def _roundtrip_method(data, cls) -> None:
    m = data.draw(method(cls, NAME_ALPHABET, canon_tables, st.integers(0, 65535)))
    for (pc, name), v in PAMQP_PINNED.items():
        if pc is cls:
            setattr(m, name, v)
    ch = m.channel
    ours = spec.ENCODERS[cls](m)
    theirs = p_frame.marshal(to_pamqp(m), ch)
    frame = struct.pack(">BHI", 1, ch, len(ours)) + ours + b"\xce"
    assert frame == theirs, cls.NAME  # canonical: byte-identical
    n, pch, pm = p_frame.unmarshal(frame)  # ours -> pamqp
    assert (n, pch) == (len(frame), ch)
    from_pamqp_equal(m, pm)
    back = spec.DECODERS[cls.INDEX](theirs[7:-1], ch)  # pamqp -> ours
    if cls.CONTENT:
        back.properties, back.body = m.properties, m.body
    assert back == m


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("cls", COMPARED, ids=lambda c: c.NAME)
@settings(parent=CI, max_examples=25)
@given(data=st.data())
def test_method_both_ways(cls, data):
    _roundtrip_method(data, cls)


def pamqp_canonical(props: spec.BasicProperties) -> spec.BasicProperties:
    """pamqp treats '' as absent, pins cluster_id empty and delivery_mode to 1/2."""
    for k, t in spec.PROPERTY_TYPES.items():
        if t == "shortstr" and getattr(props, k) == "":
            setattr(props, k, None)
    props.cluster_id = None
    if props.delivery_mode is not None:
        props.delivery_mode = props.delivery_mode % 2 + 1
    return props


@CI
@given(props=properties(NAME_ALPHABET, canon_tables).map(pamqp_canonical),
       size=st.integers(0, 2**40), ch=st.integers(1, 65535))
def test_content_header_both_ways(props, size, ch):
    pprops = p_cmd.Basic.Properties(**{("message_type" if k == "type" else k): v
                                       for k in spec.PROPERTY_FLAGS
                                       if (v := getattr(props, k)) is not None})
    theirs = p_frame.marshal(p_header.ContentHeader(0, size, pprops), ch)
    ours = struct.pack(">HHQ", 60, 0, size) + spec.encode_properties(props)
    assert theirs == struct.pack(">BHI", 2, ch, len(ours)) + ours + b"\xce"
    n, pch, ph = p_frame.unmarshal(theirs)
    assert ph.body_size == size
    for k in spec.PROPERTY_FLAGS:
        theirs = getattr(ph.properties, "message_type" if k == "type" else k)
        if k == "cluster_id":  # pamqp reports the absent cluster_id as ''
            theirs = theirs or None
        assert theirs == getattr(props, k)
    assert spec.decode_properties(ours, 12, len(ours)) == props


@CI
@given(body=st.binary(max_size=2000),
       props=properties(NAME_ALPHABET, canon_tables).map(pamqp_canonical))
def test_full_message_through_connections(body, props):
    """pamqp-marshalled deliver frames -> our client; our publish -> pamqp's unmarshal."""
    from amqp_strategies import pair
    c, s = pair()
    pprops = p_cmd.Basic.Properties(**{("message_type" if k == "type" else k): v
                                       for k in spec.PROPERTY_FLAGS
                                       if (v := getattr(props, k)) is not None})
    wire = b"".join([p_frame.marshal(p_cmd.Basic.Deliver("t", 7, True, "ex", "rk"), 1),
                     p_frame.marshal(p_header.ContentHeader(0, len(body), pprops), 1),
                     p_frame.marshal(p_body.ContentBody(body), 1) if body else b""])
    c.receive_data(wire)
    ev = c.next_event()
    assert ev == a.BasicDeliver("t", 7, True, "ex", "rk", props, body, channel=1)
    out = c.send(a.BasicPublish(exchange="ex", routing_key="rk", properties=props, body=body,
                                channel=1))
    assert out == b"".join([  # canonical: byte-identical to pamqp's three frames
        p_frame.marshal(p_cmd.Basic.Publish(exchange="ex", routing_key="rk"), 1),
        p_frame.marshal(p_header.ContentHeader(0, len(body), pprops), 1),
        p_frame.marshal(p_body.ContentBody(body), 1) if body else b""])
    frames = []
    while out:
        n, ch, f = p_frame.unmarshal(out)
        frames.append(f)
        out = out[n:]
    assert isinstance(frames[0], p_cmd.Basic.Publish) and frames[0].routing_key == "rk"
    assert frames[1].body_size == len(body)
    assert b"".join(f.value for f in frames[2:]) == body


# ---- field types, one by one -------------------------------------------------------------
# (tag, raw payload bytes, value) for every type RabbitMQ uses.
TYPED = [
    ("t", b"\x01", True), ("t", b"\x00", False),
    ("b", b"\xff", -1), ("B", b"\xff", 255),
    ("s", b"\x80\x00", -32768), ("u", b"\xff\xff", 65535),
    ("I", b"\x80\x00\x00\x00", -2**31), ("i", b"\xff\xff\xff\xff", 2**32 - 1),
    ("l", b"\x80" + b"\x00" * 7, -2**63), ("L", b"\x00\x00\x00\x00\x00\x00\x01\x00", 256),
    ("f", struct.pack(">f", 1.5), 1.5), ("d", struct.pack(">d", -2.25), -2.25),
    ("D", b"\x02\x00\x00\x04\xd2", Decimal("12.34")),
    ("S", b"\x00\x00\x00\x03abc", "abc"), ("x", b"\x00\x00\x00\x02\x00\xff", b"\x00\xff"),
    ("A", b"\x00\x00\x00\x03b\x01V", [1, None]),
    ("T", struct.pack(">Q", 1700000000), datetime.fromtimestamp(1700000000, UTC)),
    ("F", b"\x00\x00\x00\x04\x01kb\x05", {"k": 5}), ("V", b"", None),
]


@pytest.mark.parametrize("tag,raw,value", TYPED, ids=[t[0] + str(i) for i, t in enumerate(TYPED)])
def test_field_type_decodes_like_pamqp(tag, raw, value):
    wire = tag.encode() + raw
    ours, end = read_value(wire, 0)
    assert end == len(wire)
    assert ours == value
    n, theirs = p_decode._embedded_value(wire) if hasattr(p_decode, "_embedded_value") \
        else p_decode.embedded_value(wire)
    assert n == len(wire)
    if tag == "x":
        theirs = bytes(theirs)
    assert theirs == value


@pytest.mark.parametrize("value", [
    True, False, -1, 127, -129, 40000, -40000, 2**31, -2**40, 2**63 - 1, "text", "ünï",
    Decimal("12.34"), Decimal("-5"), Decimal("1E+2"), None, [1, "a", [None]], {"k": {"n": 1}},
    bytearray(b"\x00\x01"), datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
])
def test_field_value_encodes_like_pamqp(value):
    assert write_value(value) == p_encode.encode_table_value(value)


def test_float_is_lossless_double_and_pamqp_reads_it():
    wire = write_value(0.1)
    assert wire[:1] == b"d"
    n, theirs = p_decode.embedded_value(wire)
    assert theirs == 0.1 and read_value(wire, 0)[0] == 0.1
    # pamqp writes floats as 'f'; we read that too
    assert read_value(p_encode.encode_table_value(1.5), 0)[0] == 1.5


@CI
@given(table=canon_tables)
def test_tables_both_ways(table):
    assert write_table(table) == p_encode.field_table(table)
    n, theirs = p_decode.field_table(write_table(table))
    assert theirs == table
