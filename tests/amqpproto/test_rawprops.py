"""A server's raw property lists (``Connection(raw_properties=True, varying_header=...)``): every
list handed out decodes as the general path decodes it, and the varying header's value read from
the bytes of a list of a known shape is the decoded one, however the lists of one shape and of
other shapes interleave (and whatever else looks like that header: a nested table, a string
value, a second occurrence, another integer type)."""

from __future__ import annotations

from amqp_strategies import CI, pair, properties, shortstr
from hypothesis import given
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import spec
from amqpproto._rawprops import PropertyShapes

NAME = "x-publishing-id"
_ids = st.integers(-2**63, 2**64 - 1)


@st.composite
def _lists(draw) -> list[spec.BasicProperties]:
    """Property lists in a few shapes, most carrying the varying header (at the top level or only
    nested, as a string, twice...) with drawn values."""
    shapes = draw(st.lists(properties(), min_size=1, max_size=3))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        p = spec.BasicProperties(**{f: getattr(draw(st.sampled_from(shapes)), f)
                                    for f in spec.BasicProperties.__dataclass_fields__})
        headers = dict(p.headers or {})
        kind = draw(st.integers(0, 5))
        if kind <= 2:
            headers[NAME] = draw(_ids)
        elif kind == 3:
            headers["nested"] = {NAME: draw(_ids)}
        elif kind == 4:
            headers["s"] = "\x0f" + NAME + "l" + "12345678"  # the header's bytes inside a string
            headers[NAME] = draw(_ids)
        p.headers = headers
        out.append(p)
    return out


def _check(props: spec.BasicProperties, shapes: PropertyShapes) -> None:
    raw = spec.encode_properties(props)
    got = shapes.get(raw)
    assert got is not None and got.raw == raw
    assert got.decode() == spec.decode_properties(raw, 0, len(raw)) == got.view()
    assert got.varying() == (spec.decode_properties(raw, 0, len(raw)).headers or {}).get(NAME)


@CI
@given(lists=_lists())
def test_every_list_decodes_and_reads_its_varying_header(lists):
    shapes = PropertyShapes(NAME)
    for props in lists + lists[::-1]:
        _check(props, shapes)


@given(table=st.dictionaries(shortstr(), st.text(max_size=20) | st.integers(-2**63, 2**63 - 1), max_size=4),
       ids=st.lists(_ids, min_size=2, max_size=6))
def test_a_shape_is_learned_once_and_read_from_the_bytes(table, ids):
    shapes = PropertyShapes(NAME)
    table.pop(NAME, None)
    by_type: dict[int, set[int]] = {}
    for i in ids:
        props = spec.BasicProperties(delivery_mode=2, headers={**table, "x-producer": "p", NAME: i})
        _check(props, shapes)
        raw = spec.encode_properties(props)
        kind = raw[raw.rindex(b"\x0f" + NAME.encode()) + 16]  # the value's type octet
        by_type.setdefault(kind, set()).add(id(shapes.get(raw).shape))
    assert all(len(learned) == 1 for learned in by_type.values())  # one shape per width, not per value


def test_a_malformed_list_gets_no_shape_and_the_connection_reports_it():
    shapes = PropertyShapes(NAME)
    assert shapes.get(b"\x20\x00\x00\x00\x00\x09\x01kS\x00\x00\x00\x09") is None  # table overruns
    c, s = pair()
    s._publishing.shapes = shapes
    data = c.send(spec.BasicPublish(0, "", "q", False, False, spec.BasicProperties(headers={"k": "v"}), b"x",
                                    channel=1))
    at = data.index(b"\x01kS")
    s.receive_data(data[:at + 3] + b"\xff" + data[at + 4:])  # the string's length now overruns
    try:
        s.next_event()
    except a.RemoteProtocolError as exc:
        assert exc.reply_code == spec.SYNTAX_ERROR
    else:
        raise AssertionError("a malformed content header must fail")


def test_a_server_asking_for_raw_properties_gets_them_from_the_fast_path():
    c, s = pair()
    s._publishing.shapes = PropertyShapes(NAME)
    props = spec.BasicProperties(delivery_mode=2, headers={"x-producer": "p", NAME: 2**40})
    s.receive_data(c.send(spec.BasicPublish(0, "", "q", False, False, props, b"x", channel=1)))
    ev = s.next_event()
    assert type(ev.properties) is a.RawProperties
    assert ev.properties.raw == spec.encode_properties(props) and ev.properties.varying() == 2**40
    server = a.Connection(a.SERVER, raw_properties=True, varying_header=NAME)
    assert server._publishing.shapes is not None and a.Connection(a.CLIENT, raw_properties=True)._publishing.shapes is None
