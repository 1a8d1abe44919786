"""CPU per operation, pure-Python vs mypyc-compiled codecs and engine, in the same run.

Times stompproto's, amqpproto's and wsframe's side of the codec micro-benchmarks
(bench_stompproto/bench_amqpproto/bench_wsframe) and the in-process engine benchmarks
(bench_amqp_engine S1/S2/S3, bench_engine_stomp S4/S6/S7, bench_stream_append: codec + engine,
no sockets) in child processes, alternating a pure-Python child (the sources, ``src``) and a
compiled one (an install of ``pip install .``), and prints the median CPU microseconds per
operation (``time.process_time``: the figure that stays meaningful on a shared machine) of each and
the speed-up (pure / compiled). ``--engine-only`` skips the codec micro-benchmarks.

    [SANSMQ_COMPILED_ENGINE=1] .venv/bin/python -m pip install --no-deps --target /tmp/sansmq-compiled .
    .venv/bin/python benchmarks/bench_compiled.py --site /tmp/sansmq-compiled [--rounds 5] [--cpu 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def _cpu_per_op(fn: Callable[[], object], ops_per_call: int, budget: float) -> float:
    """CPU microseconds per operation of ``fn`` called until ``budget`` CPU seconds are spent."""
    fn()  # warm-up (first-call caches)
    calls = 0
    t0 = time.process_time()
    while True:
        fn()
        calls += 1
        spent = time.process_time() - t0
        if spent >= budget:
            return spent / (calls * ops_per_call) * 1e6


def _codec_cases() -> list[tuple[str, Callable[[], object], int]]:
    from bench_amqpproto import amqpproto_cases
    from bench_stompproto import stompproto_cases
    from bench_wsframe import masked_stream, parse_wsframe, send_wsframe

    n = 2000
    cases = [(f"stompproto {name}", fn, n) for name, fn in stompproto_cases(n)]
    cases += [(f"amqpproto {name}", fn, 1) for size in (100, 1024) for name, fn in amqpproto_cases(size)]
    for size in (117, 16 * 1024):
        cases += [(f"wsframe parse masked {size} B", parse_wsframe(masked_stream(size, n), n), n),
                  (f"wsframe serialise masked {size} B", send_wsframe(size, n), n)]
    return cases


def _engine_cases(budget: float) -> dict[str, float]:
    """The engine benchmarks measure CPU per delivery themselves."""
    from bench_amqp_engine import run
    from bench_engine_stomp import Bench
    from bench_stream_append import run as stream_append

    out = {"engine AMQP S1 1->1 1 KB (per delivery)": run(5000, 0),
           "engine AMQP S2 durable, confirms (per delivery)": run(5000, 0, durable=True),
           "engine AMQP S3 fanout 10 (per delivery)": run(1000, 10)}
    for scenario in ("s4", "s6", "s7"):
        out[f"engine STOMP {scenario.upper()} (per delivery)"] = 1e6 / Bench(scenario).run(budget)
    out["engine stream append, confirms (per append)"] = stream_append(20000, 100, False)
    return out


def child(budget: float, engine_only: bool) -> None:
    import amqpproto
    import engine
    import stompproto
    import wsframe

    builds = {stompproto.COMPILED, amqpproto.COMPILED, wsframe.COMPILED}
    assert len(builds) == 1, "the three codecs come from different builds"
    cases = [] if engine_only else _codec_cases()
    result = {name: _cpu_per_op(fn, ops, budget) for name, fn, ops in cases}
    result.update(_engine_cases(budget))
    print(json.dumps({"compiled": builds.pop(), "engine_compiled": engine.COMPILED, "us_per_op": result}))


def _run_child(path: str, budget: float, engine_only: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=path)
    flags = ["--engine-only"] if engine_only else []
    out = subprocess.run([sys.executable, __file__, "--child", "--cpu", str(budget), *flags], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", help="a directory holding the compiled install (pip install --target)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", type=float, default=0.5, help="CPU seconds per case per run")
    ap.add_argument("--engine-only", action="store_true", help="the engine cases only (no codec micro-benchmarks)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.cpu, args.engine_only)
        return
    if not args.site:
        ap.error("--site is required")
    builds = {False: str(SRC), True: args.site}
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    load = [os.getloadavg()[0]]
    engine_compiled = False
    for r in range(args.rounds):
        for compiled in ((False, True) if r % 2 == 0 else (True, False)):  # alternate: load drifts
            got = _run_child(builds[compiled], args.cpu, args.engine_only)
            assert got["compiled"] is compiled, f"{builds[compiled]} is not the {compiled=} build"
            runs[compiled].append(got["us_per_op"])
            engine_compiled |= got["engine_compiled"]
        load.append(os.getloadavg()[0])
    print(f"medians of {args.rounds} runs each, pure and compiled alternated; "
          f"load average {min(load):.1f}-{max(load):.1f}; CPython {sys.version.split()[0]}; "
          f"engine {'compiled' if engine_compiled else 'interpreted'} in the compiled build "
          "(SANSMQ_COMPILED_ENGINE=1 at its build)")
    print("| case | pure us CPU/op | compiled us CPU/op | speed-up |\n|---|---:|---:|---:|")
    for name in runs[False][0]:
        pure = statistics.median(run[name] for run in runs[False])
        comp = statistics.median(run[name] for run in runs[True])
        print(f"| {name} | {pure:.2f} | {comp:.2f} | {pure / comp:.2f}x |")


if __name__ == "__main__":
    main()
