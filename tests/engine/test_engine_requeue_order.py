"""STOMP NACKs put messages back at their original position, on queues and on (light) topic
subscriptions alike (issue 17, item 4); NACKs applied together in a transaction, before any
redelivery, are the case where pushing each to the head reversed them."""

from __future__ import annotations

import pytest
from enginetest_helpers import connected, messages, new_net, send, subscribe

from engine.testing import SimNetwork


def _nack_all_in_one_transaction(net: SimNetwork, dest: str) -> list[bytes]:
    c = connected(net)
    subscribe(c, dest, "1", ack="client-individual")
    producer = connected(net)
    for i in range(4):
        send(producer, dest, b"m%d" % i)
    net.run_until_idle()
    first = messages(c)
    assert [m.body for m in first] == [b"m0", b"m1", b"m2", b"m3"]
    c.send_raw(b"BEGIN\ntransaction:t\n\n\x00")
    for m in first:  # oldest first
        c.send_raw(b"NACK\nid:%s\ntransaction:t\n\n\x00" % m.headers["ack"].encode())
    c.send_raw(b"COMMIT\ntransaction:t\n\n\x00")
    net.run_until_idle()
    again = messages(c)  # events since the first batch
    assert all(m.headers.get("redelivered") == "true" for m in again)
    return [m.body for m in again]


@pytest.mark.parametrize("dest", ["/queue/q", "/topic/t", "/exchange/amq.topic/t"])
def test_stomp_nacks_keep_the_original_order(dest: str) -> None:
    assert _nack_all_in_one_transaction(new_net(), dest) == [b"m0", b"m1", b"m2", b"m3"]
