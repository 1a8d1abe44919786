"""Entry sequence numbers (a queue's enqueue order, which a requeue restores) belong to each model:
brokers sharing a process number their entries independently, so the same operations give the
same numbers whatever else runs beside them."""

from __future__ import annotations

from enginetest_helpers import connected, new_net, send

from engine.testing import SimNetwork


def _seqs(net: SimNetwork, queue: str) -> list[int]:
    return [e.seq for e in net.broker.model.vhosts["/"].queues[queue].ready_entries()]


def _publish(net: SimNetwork, client, n: int, prefix: str) -> None:
    for i in range(n):
        send(client, "/queue/q", f"{prefix}{i}".encode())
    net.run_until_idle()


def test_two_brokers_in_one_process_number_entries_independently():
    alone = new_net()
    _publish(alone, connected(alone), 5, "a")
    expected = _seqs(alone, "q")
    assert expected == sorted(expected) and len(set(expected)) == 5

    a, b = new_net(), new_net()
    ca, cb = connected(a), connected(b)
    _publish(a, ca, 2, "a")
    _publish(b, cb, 7, "b")  # another broker's entries in between
    _publish(a, ca, 3, "a")
    assert _seqs(a, "q") == expected  # as if it ran alone
    assert _seqs(b, "q")[:5] == expected  # and the other started from the same number

