"""Durable store throughput, recovery time and memory (a script, not a test).

    python benchmarks/bench_store.py [N] [--dir DIR]      # SegmentStore, default N = 200_000
    python benchmarks/bench_store.py [N] --store postgresql://USER@HOST:PORT/DB   # PostgresStore
    python benchmarks/bench_store.py --fsync-rate [--dir DIR] [--seconds S]
        # this disk's bare limit: 1 KB append + fsync (and + fdatasync) per round, rounds/s
    python benchmarks/bench_store.py --e2e [--store URL|segment] [--seconds S]
        # a real `sansmq serve` (asyncio): receipted persistent SEND/s and confirmed publish/s
    --store postgresql (no URL): a throwaway server started with scripts/install-postgres.sh

Phases, on N persistent 100-byte messages in one durable queue:
  * enqueue: ``store.enqueue`` + one ``sync`` per batch of 100 (group commit as the engine does
    it: one Sync per drain), messages/s and fsyncs;
  * recovery: reopen the directory, time to ``recover()`` and the process RSS afterwards (the
    engine keeps bodies in memory today, so RSS grows with the backlog);
  * ack: ``remove`` of every message + syncs, then the segment files left on disk;
  * idle queues: N // 10 durable queues with no messages, tracemalloc bytes per queue in the
    store's index, and the time to reopen the directory holding them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
import tracemalloc

import bench_store_e2e

from engine._message import Message
from engine.segment_store import SegmentStore
from engine.store import QueueDef, Store


def process_cpu() -> float:
    t = os.times()
    return t.user + t.system


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=200_000)
    parser.add_argument("--dir", help="parent directory (default: a temporary one)")
    parser.add_argument("--store", default="segment",
                        help="segment (default), postgresql://... or postgresql (a throwaway server)")
    parser.add_argument("--e2e", action="store_true", help="measure through a real server and clients")
    parser.add_argument("--seconds", type=float, default=5.0, help="--e2e: seconds per measurement")
    parser.add_argument("--fsync-rate", action="store_true", help="the disk's bare 1 KB write+fsync rate")
    args = parser.parse_args()
    if args.fsync_rate:
        fsync_rate(args.dir, args.seconds)
        return
    with bench_store_e2e.store_location(args.store) as url:
        if args.e2e:
            bench_store_e2e.run(url, args.seconds)
        elif url:
            store_phases(args.n, lambda: _pg(url), args.dir)
        else:
            store_phases(args.n, None, args.dir)


def fsync_rate(parent: str | None, seconds: float) -> None:
    """The ceiling of one-message-per-sync durability on this disk: append 1 KB, sync, repeat."""
    base = tempfile.mkdtemp(prefix="bench-fsync-", dir=parent)
    try:
        for name, sync in (("write+fsync", os.fsync), ("write+fdatasync", os.fdatasync)):
            fd = os.open(os.path.join(base, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            block = b"x" * 1024
            n = 0
            c0, t0 = process_cpu(), time.perf_counter()
            while (dt := time.perf_counter() - t0) < seconds:
                os.write(fd, block)
                sync(fd)
                n += 1
            cpu = process_cpu() - c0
            os.close(fd)
            print(f"{name:16} {n / dt:10,.0f} /s  ({dt / n * 1e6:.0f} us each, {cpu / n * 1e6:.0f} us CPU, {n} rounds)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _pg(url: str) -> Store:
    from engine.postgres_store import PostgresStore

    return PostgresStore(url)


def store_phases(n: int, opener, parent: str | None) -> None:
    base = tempfile.mkdtemp(prefix="bench-store-", dir=parent)
    path = os.path.join(base, "data")
    open_store = opener or (lambda: SegmentStore(path))
    try:
        s = open_store()
        s.recover()
        s.add_queue(QueueDef("/", "q"))
        body = b"x" * 100
        t0 = time.perf_counter()
        syncs = 0
        for i in range(1, n + 1):
            s.enqueue("/", "q", Message(i, "", "q", {}, body, persistent=True))
            if i % 100 == 0:
                s.sync(i)
                syncs += 1
        s.sync(n)
        dt = time.perf_counter() - t0
        print(f"enqueue+sync   {n / dt:12,.0f} msg/s  ({syncs + 1} fsync rounds, {dt:.2f} s)")
        # S5's shape: one 1 KB message per sync, its removal journalled lazily (no sync of its own)
        k = min(n, 2000)
        big = b"x" * 1024
        c0, t0 = process_cpu(), time.perf_counter()
        for i in range(n + 1, n + k + 1):
            s.enqueue("/", "q", Message(i, "", "q", {}, big, persistent=True))
            s.sync(i)
            s.remove("/", "q", i)
        dt, cpu = time.perf_counter() - t0, process_cpu() - c0
        print(f"1 msg per sync {k / dt:12,.0f} msg/s  ({cpu / k * 1e6:.0f} us CPU each, user+system)")
        s.close()
        rss0 = rss_mb()
        t0 = time.perf_counter()
        s = open_store()
        rec = s.recover()
        dt = time.perf_counter() - t0
        got = len(rec.messages.get(("/", "q"), []))
        print(f"recovery       {dt:12.2f} s      ({got:,} messages, max RSS {rss0:.0f} -> {rss_mb():.0f} MB)")
        del rec
        t0 = time.perf_counter()
        for i in range(1, n + 1):
            s.remove("/", "q", i)
            if i % 100 == 0:
                s.sync(i)
        s.sync(0)
        dt = time.perf_counter() - t0
        left = (f"{len(os.listdir(os.path.join(path, 'segments')))} segment file(s) left" if opener is None
                else "PostgreSQL")
        print(f"remove+sync    {n / dt:12,.0f} msg/s  ({left})")
        m = max(1, n // 10)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(m):
            s.add_queue(QueueDef("/", f"idle-{i}"))
        s.sync(0)
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        print(f"idle queue     {(after - before) / m:12.0f} B each in the store (QueueDef + index + dict slot)")
        s.close()
        t0 = time.perf_counter()
        s = open_store()
        rec = s.recover()
        print(f"reopen         {time.perf_counter() - t0:12.2f} s      ({len(rec.queues):,} idle durable queues)")
        s.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
