"""The server's hot-path encoders produce exactly the bytes of the general path.

``Connection.send_deliver`` skips building a BasicDeliver event; these properties compare its
output with ``send(BasicDeliver(...))`` on twin connections, including the cases where it must
fall back (long names, bodies split over several frames, paused or closed channels) and the
errors the general path raises.
"""

from __future__ import annotations

import pytest
from amqp_strategies import CI, pair, properties
from hypothesis import given
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import spec

names = st.text(max_size=90)  # some exceed 255 UTF-8 bytes: those must fail the same way
bodies = st.one_of(st.binary(max_size=64), st.integers(0, 20000).map(lambda n: b"b" * n))


def _both(fn):
    """Run ``fn`` on the general and on the fast path: (bytes or exception type) of each."""
    out = []
    for fast in (False, True):
        _, s = pair(channels=(1, 2), frame_max=8192)
        try:
            out.append(fn(s, fast))
        except a.LocalProtocolError as e:
            out.append(type(e))
    return out


@CI
@given(ctag=names, dtag=st.integers(0, 2**64 - 1), redelivered=st.booleans(), exchange=names,
       rkey=names, props=properties(), body=bodies, ch=st.sampled_from([1, 2, 3]))
def test_send_deliver_is_byte_identical(ctag, dtag, redelivered, exchange, rkey, props, body, ch):
    pb = spec.encode_properties(props)

    def run(s, fast):
        if fast:
            return s.send_deliver(ch, ctag, dtag, redelivered, exchange, rkey, pb, body, 5.0)
        return s.send(spec.BasicDeliver(ctag, dtag, redelivered, exchange, rkey, pb, body,
                                        channel=ch), 5.0)

    general, fast = _both(run)
    assert general == fast


@CI
@given(props=properties(), body=bodies)
def test_send_deliver_round_trips(props, body):
    c, s = pair()
    c.receive_data(s.send_deliver(1, "ct", 3, False, "x", "k", spec.encode_properties(props), body))
    ev = c.next_event()
    assert isinstance(ev, spec.BasicDeliver)
    assert (ev.consumer_tag, ev.delivery_tag, ev.exchange, ev.routing_key, ev.body) == ("ct", 3, "x", "k", body)
    assert ev.properties == props


def test_send_deliver_refused_on_paused_channel_like_send():
    c, s = pair()
    s.receive_data(c.send(spec.ChannelFlow(False, channel=1)))
    assert isinstance(s.next_event(), spec.ChannelFlow)
    with pytest.raises(a.LocalProtocolError, match="paused"):
        s.send_deliver(1, "ct", 1, False, "", "q", b"\x00\x00", b"body")


def test_send_deliver_updates_the_heartbeat_clock():
    _, s = pair(heartbeat=0)
    s.send_deliver(1, "ct", 1, False, "", "q", b"\x00\x00", b"body", now=42.0)
    assert s._last_send == 42.0
