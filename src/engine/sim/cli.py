"""``sansmq simulate``: run many seeds in parallel processes, summarise per fault class, write the
trace of every failing seed (shrunk); ``--seed S --replay`` runs one seed and prints its trace."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from .run import FAULTS, Result, generate, run_steps, shrink

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--faults", default="all",
                        help=f"comma-separated fault classes: {','.join(FAULTS)}; 'all' (default) or 'none'")
    parser.add_argument("--seed", type=int, help="with --replay: the one seed to run")
    parser.add_argument("--replay", action="store_true", help="run --seed and print its trace")
    parser.add_argument("--steps", type=int, help="steps per seed (default: 30-90, chosen by the seed)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--out", default=".", help="directory for failing seeds' traces (default .)")


def parse_faults(text: str) -> frozenset[str]:
    if text == "all":
        return frozenset(FAULTS)
    if text == "none":
        return frozenset()
    chosen = frozenset(f.strip() for f in text.split(",") if f.strip())
    unknown = chosen - set(FAULTS)
    if unknown:
        raise SystemExit(f"unknown fault class(es): {', '.join(sorted(unknown))} (known: {', '.join(FAULTS)})")
    return chosen


def injected(result: Result) -> dict[str, int]:
    """How many faults of each class the seed injected."""
    fs = result.faults
    steps = result.steps
    return {
        "clock": sum(1 for s in steps if s[0] == "advance" and s[1] >= 5000),
        "drop": sum(1 for s in steps if s[0] == "drop"),
        "crash": fs.get("power-loss", 0),
        "torn": sum(1 for s in steps if (s[0] == "crash" and s[1] != "drop") or (s[0] == "cut" and s[2] != "drop")),
        "fsync": fs.get("fsync-failure", 0),
        "diskfull": fs.get("enospc", 0),
        "media": fs.get("bit-flip", 0) + fs.get("truncation", 0),
        "halfopen": sum(1 for s in steps if s[0] == "halfopen"),
        "heartbeat": sum(1 for s in steps if s[0] == "stall"),
        "slow": sum(1 for s in steps if s[0] == "slow" and s[2]),
        "memory": sum(1 for s in steps if s[0] == "alarm" and s[1]),
    }


@dataclass(slots=True)
class _Outcome:
    seed: int
    kind: str | None
    violation: str | None
    injected: dict[str, int]
    trace_hash: str
    shrunk: Result | None


def _one(job: tuple[int, frozenset[str], int | None]) -> _Outcome:
    seed, faults, n = job
    r = run_steps(seed, generate(seed, faults, n))
    shrunk = shrink(r) if not r.ok else None
    return _Outcome(seed, r.kind, r.violation, injected(r), r.trace_hash, shrunk)


def run(seeds: Iterable[int], faults: frozenset[str], jobs: int, steps: int | None, out: str,
        stream: TextIO | None = None) -> int:
    """Run the seeds; print the summary; return the number of failing seeds."""
    stream = stream or sys.stdout
    work = [(seed, faults, steps) for seed in seeds]
    started = time.monotonic()
    outcomes: list[_Outcome] = []
    with contextlib.ExitStack() as stack:
        if jobs > 1:
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(jobs))
            results: Iterable[_Outcome] = pool.imap(_one, work, chunksize=8)
        else:
            results = map(_one, work)
        for o in results:
            outcomes.append(o)
            if len(outcomes) % 1000 == 0:  # progress of a long run, on stderr
                print(f"{len(outcomes)} seeds, {sum(x.kind is not None for x in outcomes)} failures so far "
                      f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    totals = dict.fromkeys(FAULTS, 0)
    seeds_with = dict.fromkeys(FAULTS, 0)
    failing = dict.fromkeys(FAULTS, 0)
    digest = hashlib.blake2b(digest_size=16)
    failures = [o for o in outcomes if o.kind is not None]
    for o in outcomes:
        digest.update(o.trace_hash.encode())
        for cls, n in o.injected.items():
            totals[cls] += n
            if n:
                seeds_with[cls] += 1
                failing[cls] += o.kind is not None
    for cls in FAULTS:
        state = "on " if cls in faults else "off"
        print(f"{cls:9} {state} {totals[cls]:8} injected in {seeds_with[cls]:6} seeds, {failing[cls]:4} failing",
              file=stream)
    for o in failures:
        path = os.path.join(out, f"simulation-failure-{o.seed}.json")
        shrunk = o.shrunk
        assert shrunk is not None
        with open(path, "w") as f:
            f.write(shrunk.to_json())
        print(f"seed {o.seed}: {o.violation}; shrunk to {len(shrunk.steps)} steps ({shrunk.violation}): {path}",
              file=stream)
    rate = len(outcomes) / elapsed if elapsed else float("inf")
    print(f"{len(outcomes)} seeds, {len(failures)} failures ({elapsed:.1f} s, {rate:.1f} seeds/s, "
          f"{jobs} jobs, run hash {digest.hexdigest()})", file=stream)
    return len(failures)


def replay(seed: int, faults: frozenset[str], steps: int | None, stream: TextIO | None = None) -> int:
    stream = stream or sys.stdout
    r = run_steps(seed, generate(seed, faults, steps))
    for line in r.trace:
        print(line, file=stream)
    print(f"seed {seed}: {r.violation or 'ok'}{' (' + r.note + ')' if r.note else ''}; trace hash {r.trace_hash}",
          file=stream)
    if not r.ok:
        s = shrink(r)
        print(f"shrunk to {len(s.steps)} steps ({s.violation}):", file=stream)
        for step in s.steps:
            print(f"  {step}", file=stream)
    return 0 if r.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sansmq simulate", description=__doc__)
    add_arguments(parser)
    return command(parser.parse_args(argv))


def command(args: argparse.Namespace) -> int:
    faults = parse_faults(args.faults)
    if args.replay or args.seed is not None:
        if args.seed is None:
            raise SystemExit("--replay needs --seed S")
        return replay(args.seed, faults, args.steps)
    failures = run(range(args.start, args.start + args.seeds), faults, max(1, args.jobs), args.steps, args.out)
    return 1 if failures else 0
