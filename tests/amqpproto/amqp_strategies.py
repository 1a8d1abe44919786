"""Hypothesis strategies and helpers shared by the amqpproto tests."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import settings
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import spec

# Modest example counts (the machine is shared): the profile registered in conftest.py.
CI = settings(settings.get_profile("amqpproto-ci"))

INT_RANGES = {"octet": (0, 255), "short": (0, 65535), "long": (0, 2**32 - 1),
              "longlong": (0, 2**64 - 1)}
NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"


def shortstr(alphabet: str | None = None) -> st.SearchStrategy[str]:
    if alphabet:
        return st.text(alphabet, max_size=40)
    return st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)


timestamps = st.integers(0, 2**33).map(
    lambda s: datetime.fromtimestamp(s, UTC))
pamqp_timestamps = st.integers(0, 2**32 - 1).map(
    lambda s: datetime.fromtimestamp(s, UTC))
decimals = st.builds(lambda m, s: Decimal(m).scaleb(-s),
                     st.integers(-2**31, 2**31 - 1), st.integers(0, 20))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
    st.floats(allow_nan=False), decimals, st.text(max_size=30), st.binary(max_size=30),
    timestamps,
)
field_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(shortstr(), inner, max_size=4)),
    max_leaves=12,
)
tables = st.dictionaries(shortstr(), field_values, max_size=5)


def value_for(wire: str, name: str = "", alphabet: str | None = None,
              table_strategy: st.SearchStrategy = tables) -> st.SearchStrategy:
    if wire in INT_RANGES:
        if alphabet:  # pamqp-compatible mode: ticket must be 0, longlong is signed there
            if name == "ticket":
                return st.just(0)
            if wire == "longlong":
                return st.integers(0, 2**63 - 1)
        return st.integers(*INT_RANGES[wire])
    if wire == "bit":
        return st.booleans()
    if wire == "shortstr":
        return shortstr(alphabet)
    if wire == "longstr":
        if alphabet:
            return st.text(alphabet, max_size=40).map(str.encode)
        return st.binary(max_size=80)
    if wire == "table":
        return table_strategy
    if wire == "timestamp":  # pamqp reads values above 2**32 as milliseconds
        return pamqp_timestamps if alphabet else timestamps
    raise AssertionError(wire)


def properties(alphabet: str | None = None, table_strategy=tables
               ) -> st.SearchStrategy[spec.BasicProperties]:
    kw = {n: st.none() | value_for(t, n, alphabet, table_strategy)
          for n, t in spec.PROPERTY_TYPES.items()}
    return st.builds(spec.BasicProperties, **kw)


def method(cls: type, alphabet: str | None = None, table_strategy=tables,
           channel: st.SearchStrategy[int] | None = None) -> st.SearchStrategy:
    kw = {n: value_for(t, n, alphabet, table_strategy) for n, t in cls.FIELDS}
    if cls.CONTENT:
        kw["properties"] = properties(alphabet, table_strategy)
        kw["body"] = st.binary(max_size=300)
    if channel is not None:
        kw["channel"] = channel
    return st.builds(cls, **kw)


ALL_METHODS = list(spec.METHODS.values())


def drain(conn: a.Connection) -> list:
    out = []
    while True:
        ev = conn.next_event()
        if ev is a.NEED_DATA or isinstance(ev, a.ConnectionClosed):
            return out
        out.append(ev)


def feed(conn: a.Connection, data: bytes, chunks: list[int] | None = None) -> list:
    """Feed data in chunks (None = whole) and collect every event."""
    out = []
    if not data:  # receive_data(b"") would mean EOF
        return drain(conn)
    if chunks is None:
        conn.receive_data(data)
        return drain(conn)
    i = 0
    for n in chunks:
        if i >= len(data):
            break
        conn.receive_data(data[i:i + n])
        i += n
        out += drain(conn)
    if i < len(data):
        conn.receive_data(data[i:])
        out += drain(conn)
    return out


HANDSHAKE = [
    ("c", a.ProtocolHeader()),
    ("s", a.ConnectionStart(server_properties={"product": "test"}, mechanisms=b"PLAIN AMQPLAIN",
                            locales=b"en_US")),
    ("c", a.ConnectionStartOk(client_properties={"product": "test"}, mechanism="PLAIN",
                              response=a.plain_response("guest", "guest"))),
    ("s", a.ConnectionTune(channel_max=2047, frame_max=131072, heartbeat=0)),
    ("c", a.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=0)),
    ("c", a.ConnectionOpen(virtual_host="/")),
    ("s", a.ConnectionOpenOk()),
]


def pair(channels: tuple[int, ...] = (1,), **kw) -> tuple[a.Connection, a.Connection]:
    """A client and a server Connection, handshaken in memory, with channels open."""
    kw.setdefault("heartbeat", 0)
    c, s = a.Connection(a.CLIENT, **kw), a.Connection(a.SERVER, **kw)
    steps = list(HANDSHAKE)
    for ch in channels:
        steps += [("c", a.ChannelOpen(channel=ch)), ("s", a.ChannelOpenOk(channel=ch))]
    for who, ev in steps:
        if isinstance(ev, a.ConnectionTune):
            ev = s.tune()
        elif isinstance(ev, a.ConnectionTuneOk):
            ev = c.tune_ok(s.tune())
        src, dst = (c, s) if who == "c" else (s, c)
        dst.receive_data(src.send(ev))
        assert drain(dst) == [ev]
    return c, s


def replace(ev, **kw):
    return dataclasses.replace(ev, **kw)
