"""RSS of one queue's segment-store index holding N entries (a script, not a test).

    python benchmarks/bench_index_memory.py [N] [RECORD_BYTES]    # default 100_000_000, 167

``engine.storage.segment._index._QIndex`` of one queue: consecutive message ids, positions of
RECORD_BYTES-byte records (a 100-byte message's record and its enqueue marker: 167 B) in 8 MiB
segments, as a persistent backlog of one queue leaves them. Reports the process's RSS growth per
entry and CPU per ``add``, then pops 2,000,000 entries from the head (a consumer acking in order)
and reports CPU per ``pop``. Measures a backlog's index at sizes a server run would need tens of
GB of segments and hours of fill for (S8 at 100M)."""

from __future__ import annotations

import sys
import time

from engine.storage.segment._index import _QIndex

SEGMENT = 8 << 20


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000_000
    rec = int(sys.argv[2]) if len(sys.argv) > 2 else 167
    qi = _QIndex(1)
    add = qi.add
    r0 = rss_kb()
    t = time.process_time()
    seg, off = 1, 16
    for i in range(1, n + 1):
        add(i, seg << 32 | off)
        off += rec
        if off > SEGMENT - rec:
            seg, off = seg + 1, 16
    cpu = time.process_time() - t
    grown = rss_kb() - r0
    print(f"{n:,} entries: RSS +{grown / 1024:.1f} MiB = {grown * 1024 / n:.3f} B/entry; "
          f"{len(qi.blocks or ()):,} blocks; {cpu / n * 1e6:.2f} us CPU/add")
    pops = min(n, 2_000_000)
    t = time.process_time()
    for i in range(1, pops + 1):
        qi.pop(i)
    print(f"popped {pops:,} from the head: {(time.process_time() - t) / pops * 1e6:.2f} us CPU/pop; "
          f"RSS +{(rss_kb() - r0) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
