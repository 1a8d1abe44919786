"""Field tables, properties and method codecs: hypothesis round trips and robustness."""

from __future__ import annotations

import math
import struct
from datetime import UTC, datetime

import pytest
from amqp_strategies import ALL_METHODS, CI, field_values, method, properties, tables
from hypothesis import given
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import spec
from amqpproto._readers import read_array, read_table, read_value
from amqpproto._writers import write_array, write_table, write_value


@CI
@given(table=tables)
def test_table_roundtrip(table):
    wire = write_table(table)
    back, end = read_table(wire, 0)
    assert end == len(wire) and back == table
    assert write_table(back) == wire  # canonical: re-encoding is byte-identical


@CI
@given(values=st.lists(field_values, max_size=6))
def test_array_roundtrip(values):
    wire = write_array(values)
    assert read_array(wire, 0) == (values, len(wire))


@CI
@given(props=properties())
def test_properties_roundtrip(props):
    wire = spec.encode_properties(props)
    assert spec.decode_properties(wire, 0, len(wire)) == props


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda c: c.NAME)
@CI
@given(data=st.data())
def test_method_codec_roundtrip(cls, data):
    m = data.draw(method(cls, channel=st.integers(0, 65535)))
    wire = spec.ENCODERS[cls](m)
    assert struct.unpack_from(">HH", wire) == (cls.CLASS_ID, cls.METHOD_ID)
    back = spec.DECODERS[cls.INDEX](wire, m.channel)
    if cls.CONTENT:  # properties/body travel in their own frames
        back.properties, back.body = m.properties, m.body
    assert back == m
    with pytest.raises((ValueError, struct.error, IndexError)):
        spec.DECODERS[cls.INDEX](wire + b"\x00", 0)  # trailing bytes are a syntax error


@pytest.mark.parametrize("value,tag", [
    (2**64 - 1, b"L"), (2**63, b"L"), (-1, b"b"), (200, b"s"), (60000, b"u"),
    (0.5, b"d"), ("\udcff", b"S"), (b"\x00", b"x"), (memoryview(b"ab"), b"x"),
    ((1, 2), b"A"), (None, b"V"),
])
def test_value_tags(value, tag):
    wire = write_value(value)
    assert wire[:1] == tag
    back = read_value(wire, 0)[0]
    expect = list(value) if isinstance(value, tuple) else (
        bytes(value) if isinstance(value, memoryview) else value)
    assert back == expect


def test_non_utf8_strings_roundtrip_bytewise():
    wire = b"S\x00\x00\x00\x02\xff\xfe"
    v = read_value(wire, 0)[0]
    assert isinstance(v, str) and write_value(v) == wire


def test_timestamp_out_of_datetime_range_stays_int():
    wire = b"T" + struct.pack(">Q", 2**63)
    assert read_value(wire, 0)[0] == 2**63
    assert write_value(2**63)[:1] == b"L"  # ints are ints; the T tag needs a datetime
    assert read_value(b"T" + struct.pack(">Q", 0), 0)[0] == datetime(1970, 1, 1,
                                                                      tzinfo=UTC)
    naive = datetime(2020, 1, 1)  # naive datetimes are taken as UTC
    assert read_value(write_value(naive), 0)[0] == naive.replace(tzinfo=UTC)


def test_nan_survives():
    assert math.isnan(read_value(write_value(float("nan")), 0)[0])


def test_unencodable_values():
    with pytest.raises(ValueError):
        write_value(2**64)
    with pytest.raises(TypeError):
        write_value(object())
    with pytest.raises(ValueError):
        write_table({"k" * 256: 1})


@CI
@given(blob=st.binary(max_size=200))
def test_random_bytes_only_raise_decode_errors(blob):
    for reader in (read_table, read_array):
        try:
            reader(struct.pack(">I", len(blob)) + blob, 0)
        except (ValueError, struct.error, IndexError):
            pass


@CI
@given(garbage=st.binary(min_size=1, max_size=40))
def test_trailing_garbage_after_a_valid_stream(garbage):
    from amqp_strategies import pair
    c, s = pair()
    msgs = [a.BasicPublish(routing_key="k", body=b"x" * 10, channel=1), a.BasicQos(channel=1)]
    wire = b"".join(c.send(m) for m in msgs) + garbage
    s.receive_data(wire)
    got = []
    try:
        while (ev := s.next_event()) is not a.NEED_DATA:
            got.append(ev)
    except a.RemoteProtocolError:
        pass
    assert got[:2] == msgs
