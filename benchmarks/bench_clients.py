"""sansmq_client against pika and aio-pika on one `sansmq serve` (started here, free ports): publish with
confirms (each awaited, the usual "safe publish") and consume with acks, messages per second, medians of
alternated rounds and the ratio sansmq_client / other.

    .venv/bin/python benchmarks/bench_clients.py [--messages 2000] [--rounds 3] [--server threads]
                                                 [--only asyncio|sync|stomp]

The broker is shared and single-threaded, so it bounds both sides: the ratio shows how much client
overhead is left on top of the same broker, not the clients' ceilings.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aio_pika
import pika
import stomp

import sansmq_client.asyncio
import sansmq_client.sync

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from e2ekit import ServerProcess  # noqa: E402

BODY = b"x" * 100


class Phases:
    """Wall and process CPU time at each mark: rates from the wall clock, and the client's CPU per message
    (every thread of this process; the broker is another process), which the machine's load moves less."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def result(self, n: int) -> tuple[float, float, float]:
        """(publish msg/s, consume msg/s, publish CPU us per message) from marks t0, t1, t2."""
        (w0, c0), (w1, c1), (w2, _) = self.marks
        return n / (w1 - w0), n / (w2 - w1), (c1 - c0) / n * 1e6


# -- one workload per client: publish N confirmed, then consume N with acks; returns (pub/s, consume/s) --
async def ours_asyncio(url: str, n: int) -> tuple[float, float, float]:
    conn = await sansmq_client.asyncio.connect(url)
    q = await conn.declare_queue(f"bench-{uuid.uuid4().hex}", auto_delete=False)
    ph = Phases()
    ph.mark()
    for _ in range(n):
        await conn.publish(q, BODY)
    ph.mark()
    got = 0
    async for d in await conn.subscribe(q, prefetch=100):
        await conn.ack(d)
        got += 1
        if got == n:
            break
    ph.mark()
    await conn.delete_queue(q)
    await conn.close()
    return ph.result(n)


async def aio_pika_client(url: str, n: int) -> tuple[float, float, float]:
    conn = await aio_pika.connect(url)
    ch = await conn.channel(publisher_confirms=True)
    await ch.set_qos(prefetch_count=100)
    q = await ch.declare_queue(f"bench-{uuid.uuid4().hex}")
    ph = Phases()
    ph.mark()
    for _ in range(n):
        await ch.default_exchange.publish(aio_pika.Message(BODY), routing_key=q.name)
    ph.mark()
    got = 0
    async with q.iterator() as it:
        async for m in it:
            await m.ack()
            got += 1
            if got == n:
                break
    ph.mark()
    await q.delete()
    await conn.close()
    return ph.result(n)


def ours_sync(url: str, n: int) -> tuple[float, float, float]:
    conn = sansmq_client.sync.connect(url)
    q = f"bench-{uuid.uuid4().hex}"
    q = conn.declare_queue(q) if url.startswith("amqp") else f"/queue/{q}"
    ph = Phases()
    ph.mark()
    for _ in range(n):
        conn.publish(q, BODY)
    ph.mark()
    sub = conn.subscribe(q, prefetch=100)
    for got, d in enumerate(sub, 1):
        conn.ack(d)
        if got == n:
            break
    ph.mark()
    sub.cancel()
    if url.startswith("amqp"):
        conn.delete_queue(q)
    conn.close()
    return ph.result(n)


def pika_client(url: str, n: int) -> tuple[float, float, float]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_qos(prefetch_count=100)
    q = ch.queue_declare(f"bench-{uuid.uuid4().hex}").method.queue
    ph = Phases()
    ph.mark()
    for _ in range(n):
        ch.basic_publish("", q, BODY)
    ph.mark()
    for got, (method, _, _) in enumerate(ch.consume(q), 1):
        ch.basic_ack(method.delivery_tag)
        if got == n:
            break
    ph.mark()
    ch.cancel()
    ch.queue_delete(q)
    conn.close()
    return ph.result(n)


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.receipt = threading.Event()
        self.messages: queue.SimpleQueue[object] = queue.SimpleQueue()

    def on_receipt(self, frame: object) -> None:
        self.receipt.set()

    def on_message(self, frame: object) -> None:
        self.messages.put(frame)


def stomp_py(url: str, n: int) -> tuple[float, float, float]:
    port = int(url.rsplit(":", 1)[1].strip("/"))
    conn = stomp.Connection12([("127.0.0.1", port)], vhost="/")
    listener = _Listener()
    conn.set_listener("bench", listener)
    conn.connect("guest", "guest", wait=True)
    q = f"/queue/bench-{uuid.uuid4().hex}"
    ph = Phases()
    ph.mark()
    for i in range(n):  # the same safety as ours: each SEND waits for its RECEIPT
        listener.receipt.clear()
        conn.send(q, BODY, headers={"receipt": str(i)})
        listener.receipt.wait()
    ph.mark()
    conn.subscribe(q, id="1", ack="client-individual", headers={"prefetch-count": "100"})
    for _ in range(n):
        frame = listener.messages.get()
        conn.ack(frame.headers["ack"])  # type: ignore[attr-defined]
    ph.mark()
    conn.disconnect()
    return ph.result(n)


PAIRS: list[tuple[str, Callable[[str, int], tuple[float, float, float]], str, Callable[[str, int], tuple[float, float, float]]]] = [
    ("sansmq_client.asyncio", lambda u, n: asyncio.run(ours_asyncio(u, n)),
     "aio-pika", lambda u, n: asyncio.run(aio_pika_client(u, n))),
    ("sansmq_client.sync", ours_sync, "pika", pika_client),
    ("sansmq_client.sync (STOMP)", ours_sync, "stomp.py", stomp_py),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default="threads", choices=["asyncio", "threads", "trio"])
    parser.add_argument("--only", choices=["asyncio", "sync", "stomp"],
                        help="one pair: asyncio/aio-pika, sync/pika or sync STOMP/stomp.py")
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="bench-clients-")
    srv = ServerProcess([sys.executable, "-m", "servers", "serve", "--server", args.server, "--stomp", "127.0.0.1:0",
                         "--amqp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--http", "127.0.0.1:0",
                         "--prometheus", "127.0.0.1:0", "--data", data], args.server)
    urls = {"amqp": f"amqp://guest:guest@127.0.0.1:{srv.port('amqp')}/",
            "stomp": f"stomp://guest:guest@127.0.0.1:{srv.port('stomp')}/"}
    pairs = PAIRS if args.only is None else [PAIRS[["asyncio", "sync", "stomp"].index(args.only)]]
    try:
        print(f"{args.messages} messages of {len(BODY)} B, {args.rounds} alternated rounds, {args.server} server")
        print("| ours | other | publish+confirm msg/s (ours / other) | ratio | publish CPU us/msg (ours / other) "
              "| ratio | consume+ack msg/s (ours / other) | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for ours_name, ours, other_name, other in pairs:
            a: list[tuple[float, float, float]] = []
            b: list[tuple[float, float, float]] = []
            for _ in range(args.rounds):  # alternate, so drift in the machine's load hits both
                url = urls["stomp" if "STOMP" in ours_name else "amqp"]
                a.append(ours(url, args.messages))
                b.append(other(url, args.messages))
            pa, ca, ua = (statistics.median(x[i] for x in a) for i in (0, 1, 2))
            pb, cb, ub = (statistics.median(x[i] for x in b) for i in (0, 1, 2))
            print(f"| {ours_name} | {other_name} | {pa:,.0f} / {pb:,.0f} | {pa / pb:.2f} | {ua:,.0f} / {ub:,.0f} | "
                  f"{ub / ua:.2f} | {ca:,.0f} / {cb:,.0f} | {ca / cb:.2f} |")
    finally:
        srv.terminate()


if __name__ == "__main__":
    main()
