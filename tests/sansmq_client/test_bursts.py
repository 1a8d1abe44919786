"""The low-overhead mode: ``publish_burst`` (one callback for confirms, no future per message) and
``subscribe_batches`` (one callback per socket read), on asyncio and trio over AMQP and STOMP against a
real broker; the confirm bookkeeping on its own; the URL's ``reconnect`` and ``send_buffer``."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from clientkit import ASYNC, Broker, Io, name, run_async, until

import sansmq_client.sync
from sansmq_client import Batch, ClientError, ConnectionLost, PublishNacked, parse_url
from sansmq_client._bulk import BurstConfirms

PROTOCOLS = ["amqp", "stomp"]


async def where(conn: Any, protocol: str) -> str:
    q = name("bulk")
    if protocol == "amqp":
        await conn.declare_queue(q, durable=True)
        return q
    return f"/queue/{q}"


class Confirms:
    """What a caller of publish_burst keeps: the numbers still unconfirmed, settled as basic.ack says."""

    def __init__(self) -> None:
        self.unconfirmed: set[int] = set()
        self.events: list[tuple[int, bool, BaseException | None]] = []
        self.ok: list[int] = []
        self.failed: list[tuple[int, BaseException]] = []

    def sent(self, first: int, n: int) -> None:
        self.unconfirmed.update(range(first, first + n))

    def __call__(self, number: int, multiple: bool, error: BaseException | None) -> None:
        self.events.append((number, multiple, error))
        done = {k for k in self.unconfirmed if k <= number} if multiple else {number} & self.unconfirmed
        self.unconfirmed -= done
        if error is None:
            self.ok.extend(sorted(done))
        else:
            self.failed.extend((k, error) for k in sorted(done))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ASYNC)
def test_bursts_confirmed_and_consumed_in_batches(broker: Broker, kind: str, protocol: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url(protocol))
        dest = await where(conn, protocol)
        confirms = Confirms()
        for burst in range(3):
            bodies = [f"{burst}-{i}".encode() for i in range(50)]
            first = await conn.publish_burst(dest, bodies, on_confirm=confirms, headers={"k": "v"})
            assert first == burst * 50 + 1  # the client's numbers, one after the other
            confirms.sent(first, 50)
        await until(io, lambda: not confirms.unconfirmed, what="every publish confirmed")
        assert confirms.ok == list(range(1, 151)) and not confirms.failed
        if protocol == "stomp":  # one RECEIPT per burst, on its last SEND, covering the burst
            assert [e[:2] for e in confirms.events] == [(50, True), (100, True), (150, True)]

        batches: list[Batch] = []

        def on_batch(batch: Batch) -> None:
            batches.append(batch)
            for ack_id in batch.ack_ids:
                batch.ack(ack_id)
        sub = await conn.subscribe_batches(dest, on_batch, prefetch=100, events=True)
        await until(io, lambda: sum(map(len, batches)) >= 150, what="150 deliveries")
        bodies = [b for batch in batches for b in batch.bodies]
        assert bodies == [f"{b}-{i}".encode() for b in range(3) for i in range(50)]
        assert len(batches) < 150  # handed over per read, not per message
        assert all(len(b.events) == len(b) for b in batches)  # asked for: kept
        event = batches[0].events[0]  # the codec's own event: headers and the rest are there
        assert (event.properties.headers if protocol == "amqp" else event.headers)["k"] == "v"
        await sub.cancel()

        # everything was acked: a new subscription finds the queue empty
        later: list[Batch] = []
        sub = await conn.subscribe_batches(dest, later.append, prefetch=10)
        await conn.publish(dest, b"last")
        await until(io, lambda: later, what="the last message")
        assert later[0].bodies == [b"last"] and later[0].events == []  # not asked for: not kept
        later[0].ack_all()
        await sub.cancel()
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_stomp_confirm_every_and_cumulative_acks(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("stomp"))
        dest = f"/queue/{name('every')}"
        confirms = Confirms()
        confirms.sent(await conn.publish_burst(dest, [b"x"] * 10, on_confirm=confirms, confirm_every=4), 10)
        await until(io, lambda: len(confirms.events) == 2, what="two receipts")
        assert confirms.events == [(4, True, None), (8, True, None)]  # 9 and 10 wait for a later receipt
        confirms.sent(await conn.publish_burst(dest, [b"y"] * 3, on_confirm=confirms), 3)
        await until(io, lambda: not confirms.unconfirmed, what="the last receipt")
        assert confirms.events[-1] == (13, True, None)

        batches: list[Batch] = []
        individual = await conn.subscribe_batches(dest, batches.append, prefetch=20)
        await until(io, lambda: sum(map(len, batches)) >= 13, what="13 deliveries")
        with pytest.raises(ClientError, match="cumulative"):
            batches[-1].ack(batches[-1].ack_ids[-1], multiple=True)
        await individual.cancel()  # nothing acked: all 13 come back

        again: list[Batch] = []
        cumulative = await conn.subscribe_batches(dest, again.append, prefetch=20, cumulative=True)
        await until(io, lambda: sum(map(len, again)) >= 13, what="13 redeliveries")
        again[-1].ack_all()  # one ACK (ack:client) settles all 13
        await cumulative.cancel()
        empty: list[Batch] = []
        sub = await conn.subscribe_batches(dest, empty.append, auto_ack=True)
        await conn.publish(dest, b"only")
        await until(io, lambda: empty, what="the only message")
        assert [b for x in empty for b in x.bodies] == [b"only"]
        await sub.cancel()
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_amqp_nack_requeues_and_a_raising_callback_is_logged(broker: Broker, kind: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        dest = await where(conn, "amqp")
        await conn.publish_burst(dest, [b"a", b"b"])
        seen: list[tuple[bytes, bool]] = []

        def on_batch(batch: Batch) -> None:
            for body, tag, event in zip(batch.bodies, batch.ack_ids, batch.events, strict=True):
                seen.append((body, event.redelivered))
                if body == b"a" and not event.redelivered:
                    batch.nack(tag, requeue=True)
                else:
                    batch.ack(tag)
            if len(seen) == 1:
                raise RuntimeError("a bug in the callback")
        # prefetch 1: one delivery per read, so the raise is seen
        sub = await conn.subscribe_batches(dest, on_batch, prefetch=1, events=True)
        await until(io, lambda: (b"a", True) in seen and (b"b", False) in seen, what="a redelivered, b")
        await sub.cancel()
        await conn.declare_queue(dest, passive=True)  # the connection lives on
        await conn.close()

    with caplog.at_level(logging.ERROR, logger="sansmq_client"):
        run_async(kind, scenario)
    assert "batch callback" in caplog.text and "a bug in the callback" in caplog.text


@pytest.mark.parametrize("kind", ASYNC)
def test_amqp_bursts_without_on_confirm_use_a_channel_without_confirms(broker: Broker, kind: str) -> None:
    """Nothing comes back for them (the confirm channel's tags are untouched); a channel error there (an
    unknown exchange) costs that channel only, and the next burst opens another."""
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        dest = await where(conn, "amqp")
        await conn.publish_burst(dest, [b"1", b"2"])
        session = conn._core.session
        first_channel = session.unconfirmed_channel
        assert first_channel is not None and session.seq == 0
        await conn.publish_burst(dest, [b"lost"], exchange="no-such-exchange")  # 404 closes that channel
        await until(io, lambda: session.unconfirmed_channel is None, what="the channel closed")
        await conn.publish_burst(dest, [b"3"])
        got: list[bytes] = []
        sub = await conn.subscribe_batches(dest, lambda b: (got.extend(b.bodies), b.ack_all()), prefetch=10)
        await until(io, lambda: len(got) >= 3, what="three messages")
        assert got == [b"1", b"2", b"3"] and session.seq == 0
        assert session.unconfirmed_channel is not None
        await sub.cancel()
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_reconnect_a_lost_connection_fails_everything(fresh_broker: Broker, protocol: str) -> None:
    """reconnect=false: the broker killed mid-stream fails the unconfirmed publishes through on_confirm,
    ends the batch subscription with the error, and the next burst raises instead of waiting."""
    fresh_broker.start()

    async def scenario(io: Io) -> None:
        conn = await io.client.connect(fresh_broker.url(protocol, "reconnect=false&heartbeat=0"))
        dest = await where(conn, protocol)
        ended: list[BaseException | None] = []
        await conn.subscribe_batches(dest, lambda b: None, prefetch=5, on_end=ended.append)
        confirms = Confirms()
        fresh_broker.pause()  # nothing is confirmed any more
        confirms.sent(await conn.publish_burst(dest, [b"z"] * 20, on_confirm=confirms), 20)
        fresh_broker.kill()
        await until(io, lambda: not confirms.unconfirmed and ended, what="the loss reported")
        assert len(confirms.failed) == 20 and all(isinstance(e, ConnectionLost) for _, e in confirms.failed)
        assert isinstance(ended[0], ConnectionLost)
        with pytest.raises(ConnectionLost):
            await conn.publish_burst(dest, [b"after"])
        await conn.close()
    run_async("asyncio", scenario)


def test_burst_confirm_ranges() -> None:
    events: list[tuple[str, int, bool, Any]] = []
    confirms = BurstConfirms()
    confirms.add(1, 3, 100, lambda n, m, e: events.append(("a", n, m, e)))    # numbers 101-103
    confirms.add(4, 8, 200, lambda n, m, e: events.append(("b", n, m, e)))    # numbers 204-208
    confirms.settle(2, False, None)         # one in the middle of a: a hole
    confirms.settle(1, False, None)         # the oldest: a shrinks to 3
    confirms.settle(5, True, None)          # multiple: the rest of a, and b up to 5
    nack = PublishNacked("no")
    confirms.settle(7, False, nack)
    confirms.settle(99, False, None)        # unknown: ignored
    confirms.fail_all(ConnectionLost("gone"))  # what is left of b
    assert events[:5] == [("a", 102, False, None), ("a", 101, False, None), ("a", 103, True, None),
                          ("b", 205, True, None), ("b", 207, False, nack)]
    assert events[5][:3] == ("b", 208, True) and isinstance(events[5][3], ConnectionLost)
    assert len(events) == 6 and not confirms.ranges


def test_url_reconnect_and_send_buffer() -> None:
    p = parse_url("amqp://h/?reconnect=false&send_buffer=65536")
    assert (p.reconnect, p.send_buffer) == (False, 65536)
    assert parse_url("stomp://h/").reconnect is True and parse_url("stomp://h/").send_buffer == 0
    with pytest.raises(ValueError, match="true or false"):
        parse_url("amqp://h/?reconnect=maybe")


def test_send_buffer_is_set_on_the_socket(broker: Broker) -> None:
    async def scenario(io: Io) -> int:
        conn = await io.client.connect(broker.url("stomp", "send_buffer=32768"))
        size = conn._sock.transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        await conn.close()
        return int(size)
    sync = sansmq_client.sync.connect(broker.url("amqp", "send_buffer=32768"))
    assert sync._sock is not None
    sizes = [run_async("asyncio", scenario), sync._sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)]
    sync.close()
    # Linux doubles the value asked for (bookkeeping overhead); other kernels keep it
    assert all(32768 <= size <= 65536 for size in sizes), sizes
