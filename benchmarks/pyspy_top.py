"""Hot spots from a py-spy collapsed-stack file (``py-spy record --format raw``).

    python3 benchmarks/pyspy_top.py FILE.txt [--top 25]

Prints two markdown tables: functions by self samples (the leaf frame, where the CPU was) and by
inclusive samples (anywhere on the stack, counted once per stack), both as % of all samples.
Functions are keyed by "name (file)" so different lines of one function add up.
Stacks whose leaf is in --drop-leaf are left out before the percentages are taken: by default the
fsync executor thread parked in ``_worker`` (a C-level queue wait that py-spy cannot tell from work).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")


def key(frame: str) -> str:
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m["file"]
    # keep the package-relative tail: .../site-packages/x/y.py or .../src/engine/_broker.py -> engine/_broker.py
    parts = path.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) >= 2 else path
    return f"{m['name']} ({short})"


IDLE_LEAVES = ("_worker (futures/thread.py)",)


def parse(path: str, drop: tuple[str, ...] = IDLE_LEAVES) -> tuple[int, int, Counter[str], Counter[str]]:
    total, dropped, self_c, incl = 0, 0, Counter(), Counter()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [key(fr) for fr in stack.split(";") if fr]
            if frames and frames[-1] in drop:
                dropped += n
                continue
            total += n
            if frames:
                self_c[frames[-1]] += n
            for fr in set(frames):
                incl[fr] += n
    return total, dropped, self_c, incl


def table(title: str, c: Counter[str], total: int, top: int) -> str:
    rows = [f"| {title} | % samples |", "|---|---|"]
    rows += [f"| `{k}` | {100.0 * v / total:.1f} |" for k, v in c.most_common(top)]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--drop-leaf", action="append", help="leaf 'name (dir/file.py)' to ignore (repeatable)")
    ns = ap.parse_args()
    total, dropped, self_c, incl = parse(ns.file, tuple(ns.drop_leaf) if ns.drop_leaf else IDLE_LEAVES)
    if not total:
        print("no samples", file=sys.stderr)
        return 1
    print(f"{total} samples in {ns.file} ({dropped} idle samples left out)\n")
    print(table("self (leaf) function", self_c, total, ns.top))
    print()
    print(table("inclusive function", incl, total, ns.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
