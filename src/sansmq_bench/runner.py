"""One bench run: connect, publish for a duration or a count, drain, summarise.

Every producer and consumer has its own connection; all share one asyncio loop (and so one
clock for the latency stamps). Consumers are set up first, so a fanout run loses nothing to a
subscription that does not exist yet. Producers publish in bursts of at most BURST messages,
then yield to the loop so deliveries and confirms are read; a burst never exceeds the confirm
window, the rate schedule or the message count, and waits while the socket's write buffer is full.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, TextIO

from .client_load import ClientLoad
from .options import Options
from .payload import Payload
from .report import Sample, exit_code, problems, progress_line, write_summary
from .stats import Stats
from .transport import BenchConnection, BrokerError
from .ws_client import WsStompClient

__all__ = ["run", "run_sync", "main"]

BURST = 64
#: AMQP and STOMP load runs on sansmq_client; it has no WebSocket transport, so WS keeps its own connection
CLIENTS: dict[str, type[Any]] = {"amqp": ClientLoad, "stomp": ClientLoad, "ws": WsStompClient}


class Run:
    def __init__(self, opts: Options, out: TextIO) -> None:
        self.opts = opts
        self.out = out
        self.loop = asyncio.get_running_loop()
        self.stats = Stats()
        self.payload = Payload(opts.size)
        self.stop = asyncio.Event()  # publishing ends: duration over, a failure, or SIGINT
        self.samples: list[Sample] = []
        self.producers: list[Any] = []
        self.consumers: list[Any] = []
        self.t0 = 0.0
        self.publish_end = 0.0
        self.interrupted = 0  # SIGINTs: the first stops publishing, the second the drain too

    def interrupt(self) -> None:
        self.interrupted += 1
        self.stop.set()

    def _new(self, role: str, i: int) -> Any:
        return CLIENTS[self.opts.protocol](self.stats, f"{role}-{i + 1}", self.opts, self.payload)

    async def _start(self, clients: list[Any], role: str) -> None:
        queues = self.opts.queue_names()

        async def one(i: int, c: Any) -> None:
            try:
                await c.open()
                await (c.setup_consumer if role == "consumer" else c.setup_producer)(
                    queues[i % len(queues)])
            except BrokerError:
                pass  # recorded in stats.errors by the client
            except OSError as exc:  # (WebSocket; ClientLoad reports its own)
                self.stats.error(f"{c.name}: cannot connect to {self.opts.host}:{self.opts.port}: {exc}")
                c.failure = BrokerError(str(exc))

        await asyncio.gather(*(one(i, c) for i, c in enumerate(clients)))

    async def _produce(self, c: Any) -> None:
        o, loop, stop = self.opts, self.loop, self.stop
        count, rate, window = o.count, o.rate, o.confirm
        t0 = loop.time()
        sent = 0
        while not stop.is_set() and c.failure is None:
            n = BURST
            if count:
                if sent >= count:
                    break
                n = min(n, count - sent)
            if rate:
                due = int((loop.time() - t0) * rate) + 1 - sent
                if due <= 0:
                    await _wait_or(stop, t0 + sent / rate - loop.time())
                    continue
                n = min(n, due)
            if window:
                room = window - c.unconfirmed
                if room <= 0:
                    c.progress.clear()
                    await _wait_or(stop, 1.0, c.progress)
                    continue
                n = min(n, room)
            await c.publish(n)  # and yields to the loop (waiting while the socket is behind)
            sent += n

    def _expected(self) -> int:
        """Deliveries the consumers should see for what was published."""
        o = self.opts
        if not self.consumers:
            return 0
        if o.fanout:
            return self.stats.sent * len(self.consumers)
        consumed = {i % o.queues for i in range(len(self.consumers))}
        return sum(p.sent for i, p in enumerate(self.producers) if i % o.queues in consumed)

    def _settled(self) -> bool:
        st = self.stats
        if st.received < self._expected():
            return False
        return all(p.unconfirmed == 0 for p in self.producers if p.failure is None)

    async def _ticker(self) -> None:
        st, loop = self.stats, self.loop
        last = (st.sent, st.received, st.confirmed)
        t_last = self.t0
        k = 1
        while True:
            await asyncio.sleep(max(0.0, self.t0 + k - loop.time()))
            k += 1
            now = loop.time()
            window, _ = st.roll()
            cur = (st.sent, st.received, st.confirmed)
            sample = Sample.of(now - self.t0, now - t_last, cur[0] - last[0], cur[1] - last[1],
                               cur[2] - last[2], window)
            self.samples.append(sample)
            if not self.opts.quiet:
                print(progress_line(sample, bool(self.opts.confirm or self.opts.receipt_every)),
                      file=self.out, flush=True)
            last, t_last = cur, now

    async def execute(self) -> dict[str, Any]:
        o, st, loop = self.opts, self.stats, self.loop
        started = datetime.now(UTC)
        self.consumers = [self._new("consumer", i) for i in range(o.consumers)]
        self.producers = [self._new("producer", i) for i in range(o.producers)]
        await self._start(self.consumers, "consumer")
        if not st.errors:
            await self._start(self.producers, "producer")
        self.t0 = loop.time()
        ticker = loop.create_task(self._ticker())
        if not st.errors:
            if o.duration:
                loop.call_later(o.duration, self.stop.set)
            watch = loop.create_task(self._watch_failures())
            if self.producers:
                await asyncio.gather(*(self._produce(p) for p in self.producers))
            else:  # consumers only: consume for --duration
                await self.stop.wait()
            self.publish_end = loop.time()
            # drain: the last deliveries and confirms, bounded by --drain
            deadline = loop.time() + o.drain
            while (not st.errors and not self._settled() and loop.time() < deadline
                   and self.interrupted < 2):
                await asyncio.sleep(0.01)
            watch.cancel()
        else:
            self.publish_end = loop.time()
        end = loop.time()
        ticker.cancel()
        await asyncio.gather(*(c.close() for c in self.consumers + self.producers),
                             return_exceptions=True)
        for c in self.consumers + self.producers:  # a WebSocket connection whose close gave up
            if isinstance(c, BenchConnection) and c.transport is not None and not c.transport.is_closing():
                c.abort()
        st.roll()
        return self._summary(started, end)

    async def _watch_failures(self) -> None:
        """Stop publishing as soon as any connection fails (consumers included)."""
        while not self.stop.is_set():
            if self.stats.errors:
                self.stop.set()
                return
            await asyncio.sleep(0.05)

    def _summary(self, started: datetime, end: float) -> dict[str, Any]:
        o, st = self.opts, self.stats
        publish_s = max(self.publish_end - self.t0, 1e-9)
        elapsed = max(end - self.t0, 1e-9)
        expected = self._expected()
        summary: dict[str, Any] = {
            "tool": "sansmq bench",
            "protocol": o.protocol,
            "url": o.public()["url"],
            "start": started.isoformat(timespec="milliseconds"),
            "end": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "publish_seconds": round(publish_s, 3),
            "elapsed_seconds": round(elapsed, 3),
            "sent": st.sent,
            "received": st.received,
            "expected": expected,
            "missing": max(0, expected - st.received),
            "confirmed": st.confirmed,
            "nacked": st.nacked,
            "returned": st.returned,
            "stale": st.stale,
            "send_rate": round(st.sent / publish_s, 1),
            "receive_rate": round(st.received / elapsed, 1),
            "confirm_rate": round(st.confirmed / elapsed, 1),
            "latency_us": st.latency.summary(),
            "confirm_latency_us": st.confirm_latency.summary(),
            "errors": list(st.errors),
            "options": o.public(),
            "progress": [asdict(s) for s in self.samples],
        }
        summary["problems"] = problems(summary)
        summary["ok"] = not summary["problems"]
        return summary


async def _wait_or(stop: asyncio.Event, seconds: float, other: asyncio.Event | None = None) -> None:
    """Sleep up to ``seconds``, waking early when ``stop`` (or ``other``) is set."""
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    waits = [asyncio.ensure_future(stop.wait())]
    if other is not None:
        waits.append(asyncio.ensure_future(other.wait()))
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def run(opts: Options, out: TextIO = sys.stderr) -> dict[str, Any]:
    """Run the benchmark and return the summary; SIGINT ends publishing early, a second one
    skips the drain."""
    r = Run(opts, out)
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, r.interrupt)
        handler = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        handler = False
    try:
        return await r.execute()
    finally:
        if handler:
            loop.remove_signal_handler(signal.SIGINT)


def run_sync(opts: Options, out: TextIO = sys.stderr) -> dict[str, Any]:
    return asyncio.run(run(opts, out))


def main(opts: Options, out: TextIO = sys.stderr) -> int:
    """Run, write the summary (stdout or --json FILE), return the exit code."""
    t = time.monotonic()
    summary = run_sync(opts, out)
    write_summary(summary, opts.json)
    if not opts.quiet:
        print(f"sansmq bench: {summary['sent']} sent, {summary['received']} received, "
              f"{summary['confirmed']} confirmed in {time.monotonic() - t:.1f}s"
              + (f"; FAILED: {'; '.join(summary['problems'])}" if summary["problems"] else ""),
              file=out, flush=True)
    return exit_code(summary)
