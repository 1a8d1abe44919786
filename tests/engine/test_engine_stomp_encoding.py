"""MESSAGE frames built from pre-encoded parts (per-subscription lines + a tail shared per message
and escaping) are byte for byte the frame the codec's general path serialises from the full header
dict, for every STOMP version, ack mode, subscription id, message header set and redelivery count;
and a message fanned out to subscribers of different versions reaches each with its own escaping.
"""

from __future__ import annotations

import random
from typing import Any

from enginetest_helpers import connected, messages, new_net, send, subscribe
from hypothesis import given
from hypothesis import strategies as st

from engine import Broker, Config, Entry, MemoryStore, Message, Write
from engine._props import stomp_value
from engine.stomp.session import StompLightSubscription, StompSession, StompSubscription
from engine.testing import SimNetwork
from stompproto import LocalProtocolError
from stompproto import Message as MessageFrame

_RESERVED = ("subscription", "destination", "message-id", "ack", "redelivered", "x-delivery-count",
             "content-length")
_TEXT = st.text(st.sampled_from(list("ab:\\\r\n é@_/") + ["\u2603"]), max_size=6)
_VALUE = st.one_of(_TEXT, st.integers(-5, 5), st.booleans(), st.binary(max_size=3),
                   st.lists(st.integers(), max_size=1))
_HEADERS = st.dictionaries(st.one_of(st.sampled_from(_RESERVED + ("content-type", "x")), _TEXT),
                           _VALUE, max_size=4)


def _reference(sub_id: str, ack_mode: str, version: str, tag: int, count: int, destination: str,
               msg: Message) -> MessageFrame:
    """The MESSAGE the general path serialises: the full header dict in the documented order."""
    message_id = f"T_{sub_id}@@{tag}"
    h = {"subscription": sub_id, "message-id": message_id}
    if ack_mode != "auto" and version == "1.2":
        h["ack"] = message_id
    if count:
        h["redelivered"] = "true"
        h["x-delivery-count"] = str(count)
    h["destination"] = destination
    for name, value in msg.headers.items():
        if name not in _RESERVED:
            text = stomp_value(value)
            if text is not None:
                h[name] = text
    h["content-length"] = str(len(msg.body))
    return MessageFrame(h, msg.body)


def _session(version: str) -> tuple[SimNetwork, StompSession]:
    net = new_net(strict=False)
    client = connected(net, version=version)
    session = net.broker.sessions[client.conn_id]
    assert isinstance(session, StompSession)
    return net, session


@given(version=st.sampled_from(["1.0", "1.1", "1.2"]),
       subs=st.lists(st.tuples(_TEXT, st.sampled_from(["auto", "client", "client-individual"]),
                               st.booleans()), min_size=1, max_size=3),
       headers=_HEADERS, body=st.binary(max_size=10), exchange=st.sampled_from(["", "amq.topic", "x"]),
       key=_TEXT, count=st.integers(0, 3), tag=st.integers(1, 10**12))
def test_delivered_bytes_equal_the_general_serialisation(version, subs, headers, body, exchange, key,
                                                          count, tag):
    net, session = _session(version)
    broker = net.broker
    msg = Message(1, exchange, key, headers, body)
    vhost = net.broker.model.vhosts["/"]
    for sub_id, ack_mode, light in subs * 2:  # every subscription twice: the second hits the cache
        if light:
            sub: Any = StompLightSubscription(session, vhost.exchanges["amq.topic"], "k", False, 0,
                                              sub_id, ack_mode)
            destination = "/queue/" + key if not exchange else (
                f"/topic/{key}" if exchange == "amq.topic" else f"/exchange/x/{key}" if key else "/exchange/x")
        else:
            queue = net.broker.model.declare_queue(vhost, "q", durable=False)
            destination = "/temp-queue/t" + sub_id
            sub = StompSubscription(queue, session, 0, sub_id, destination, ack_mode, False)
        try:
            expected: bytes | type = session.conn.send(
                _reference(sub_id, ack_mode, version, tag, count, destination, msg))
        except LocalProtocolError:
            expected = LocalProtocolError
        errors = len(broker.internal_errors)
        broker.drain()
        session.deliver(sub, tag, Entry(msg, tag, count))
        written = [a.data for a in broker.drain() if isinstance(a, Write)]
        if expected is LocalProtocolError:  # the general path refuses it too: the session is failed
            assert isinstance(net.broker.internal_errors[errors], LocalProtocolError)
            assert session.closed
            return
        assert written == [expected]


def test_one_message_to_subscribers_of_every_version_is_escaped_for_each():
    net = new_net()
    clients = {v: connected(net, version=v) for v in ("1.0", "1.1", "1.2", "1.2")}
    individual = connected(net, version="1.2")
    for i, client in enumerate([*clients.values(), individual]):
        subscribe(client, "/topic/t", f"s:{i}", ack="client-individual" if client is individual else "auto")
    publisher = connected(net)
    net.run_until_idle()
    for client in [*clients.values(), individual]:
        client.events()
    value = "a:b\\c"
    for n in range(3):
        send(publisher, "/topic/t", b"body%d" % n, x_custom=value)
    net.run_until_idle()
    for i, client in enumerate([*clients.values(), individual]):
        got = messages(client)
        assert [m.body for m in got] == [b"body0", b"body1", b"body2"]
        for m in got:
            assert m.headers["x-custom"] == value
            assert m.headers["subscription"] == f"s:{i}"
            assert m.headers["destination"] == "/topic/t"
            assert ("ack" in m.headers) == (client is individual)


def test_the_tail_cache_stays_bounded():
    from engine.stomp import wire as ss

    net = new_net()
    sub = connected(net, version="1.2")
    subscribe(sub, "/topic/big", "0")
    publisher = connected(net)
    net.run_until_idle()
    cache = ss._TAIL_CACHES[net.broker]
    for _ in range(ss._TAILS_MAX + 50):
        send(publisher, "/topic/big", b"x" * 10)
    send(publisher, "/topic/big", b"y" * (ss._TAIL_MAX + 1))  # too big to keep
    net.run_until_idle()
    assert len(messages(sub)) == ss._TAILS_MAX + 51
    tails = cache.by_escape["1.2"]
    assert len(tails) == ss._TAILS_MAX
    assert cache.size == sum(map(len, tails.values())) <= ss._TAIL_BYTES
    assert all(len(t) <= ss._TAIL_MAX for t in tails.values())


def test_brokers_do_not_share_a_tail_cache():
    from engine.stomp import wire as ss

    a = Broker(Config(), MemoryStore(), random.Random(0))
    b = Broker(Config(), MemoryStore(), random.Random(0))
    na, nb = SimNetwork(a), SimNetwork(b)
    connected(na), connected(nb)
    assert ss._TAIL_CACHES[a] is not ss._TAIL_CACHES[b]
