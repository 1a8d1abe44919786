"""A STOMP ACK's receipt means the ack survives a power cut (found by crash_test.py --power-cut).

The segment store lets removals ride along with a later journal fsync when a sync has segment data
to fsync anyway; a receipt released by that sync must still mean the ack is durable."""

from __future__ import annotations

import pytest

from engine.sim import SimWorld
from stompproto import Ack, Begin, Commit, Message, Receipt, Send, Subscribe


def _cut_after_ack(transactional: bool, fsyncs: int) -> tuple[bool, list[bytes]]:
    """Ack m1 with a receipt while m2 is published, cut the power before the ``fsyncs``-th fsync
    of the syncs that follow: (whether the broker sent the ack's receipt, what the queue holds)."""
    world = SimWorld(seed=1)
    producer, consumer = world.connect(), world.connect()
    producer.stomp_connect()
    consumer.stomp_connect()
    producer.send(Send({"destination": "/queue/q", "persistent": "true", "receipt": "p1"}, b"m1"))
    world.run()
    world.sync()
    consumer.send(Subscribe({"destination": "/queue/q", "id": "1", "ack": "client-individual"}))
    world.run()
    [msg] = consumer.frames(Message)
    if transactional:
        consumer.send(Begin({"transaction": "t"}))
        consumer.send(Ack({"id": msg.headers["ack"], "transaction": "t"}))
        consumer.send(Commit({"transaction": "t", "receipt": "a1"}))
    else:
        consumer.send(Ack({"id": msg.headers["ack"], "receipt": "a1"}))
    world.run()  # the ack's sync is requested, not done yet
    # a new message dirties a segment: that sync has data to fsync besides the journal's removal
    producer.send(Send({"destination": "/queue/q", "persistent": "true", "receipt": "p2"}, b"m2"))
    world.run()
    world.sync_until_cut(fsyncs)
    # sent by the broker: parsed by the client already, or still on the way when the power went
    receipted = (b"receipt-id:a1" in bytes(consumer._from_broker)
                 or "a1" in [r.headers["receipt-id"] for r in consumer.frames(Receipt)])
    world.crash("drop")
    after = world.connect()
    after.stomp_connect()
    after.send(Subscribe({"destination": "/queue/q", "id": "1", "ack": "auto"}))
    world.run()
    return receipted, [m.body for m in after.frames(Message)]


@pytest.mark.parametrize("transactional", [False, True], ids=["ack", "commit"])
def test_a_receipted_ack_is_not_undone_by_a_power_cut(transactional: bool) -> None:
    receipted_at = []
    for fsyncs in range(4):
        receipted, left = _cut_after_ack(transactional, fsyncs)
        if receipted:
            receipted_at.append(fsyncs)
            assert b"m1" not in left, f"the receipted ack was undone by a cut before fsync {fsyncs}"
    assert receipted_at  # some cut came after the receipt: the check had something to check
