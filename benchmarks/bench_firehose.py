"""The firehose's cost: CPU microseconds per delivered message with the vhost untraced, and traced
with a stream bound to ``amq.rabbitmq.trace`` (key ``#``: a publish and a deliver record per
message), in one process, alternated (off, on, on, off, ...), medians of ``--repeat`` runs each.

bench_amqp_engine.py's S1 shape (codec + engine, no sockets): 1 KB transient messages to one
queue, one consumer with prefetch 100. ``--socket``: the same over real sockets instead, a
``sansmq serve --trace /`` started here (free ports) loaded by ``sansmq bench -u`` (one producer,
one consumer, ``--messages`` of 1 KB), the stream bound to the firehose or not in alternate
rounds, and the server process's CPU (/proc) per message. The load average is printed before and
after (the machine is shared). ``--json`` adds one JSON line for benchmarks/results/. Usage:

    PYTHONPATH=src python benchmarks/bench_firehose.py [--messages 20000] [--repeat 3] [--socket] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_amqp_engine import run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from e2ekit import ServerProcess  # noqa: E402

STREAM = "firehose"


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _server() -> Iterator[tuple[ServerProcess, str]]:
    data = tempfile.TemporaryDirectory(prefix="bench-firehose-")
    srv = ServerProcess([sys.executable, "-m", "servers", "serve", "--server", "threads", "--trace", "/",
                         "--stomp", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--no-ws", "--no-http",
                         "--no-prometheus", "--data", data.name], "threads")
    try:
        yield srv, f"amqp://guest:guest@127.0.0.1:{srv.port('amqp')}/%2F"
    finally:
        srv.terminate()
        data.cleanup()


def socket_runner(messages: int) -> Iterator[Callable[[bool], float]]:
    """A server with the stream declared; the callable runs one bench round (the stream bound to
    the firehose when asked) and returns the server's CPU microseconds per message."""
    from sansmq_client import sync

    with _server() as (srv, url):
        with sync.connect(url) as c:
            c.declare_queue(STREAM, durable=True, arguments={"x-queue-type": "stream"})

        def one(trace: bool) -> float:
            with sync.connect(url) as c:
                (c.bind_queue if trace else c.unbind_queue)(STREAM, "amq.rabbitmq.trace", "#")
            before = _cpu_seconds(srv.proc.pid)
            out = subprocess.run([sys.executable, "-m", "servers", "bench", "-U", url, "-u", "bench-firehose",
                                  "-s", "1024", "-C", str(messages), "--quiet"], capture_output=True, text=True,
                                 check=True)
            cpu = _cpu_seconds(srv.proc.pid) - before
            received = json.loads(out.stdout)["received"]
            assert received == messages, out.stdout
            return cpu / received * 1e6

        yield one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--socket", action="store_true", help="sansmq serve + sansmq bench, the server's CPU")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs: dict[bool, list[float]] = {False: [], True: []}
    if args.socket:
        for one in socket_runner(args.messages):
            for i in range(args.repeat):
                for trace in (False, True) if i % 2 == 0 else (True, False):
                    runs[trace].append(one(trace))
    else:
        for i in range(args.repeat):
            for trace in (False, True) if i % 2 == 0 else (True, False):
                runs[trace].append(run(args.messages, 0, trace=trace))
    load_after = os.getloadavg()
    off, on = statistics.median(runs[False]), statistics.median(runs[True])
    print(f"firehose off: {off:.1f} us CPU per message (runs {', '.join(f'{r:.1f}' for r in runs[False])})")
    print(f"firehose on, a stream bound: {on:.1f} us (runs {', '.join(f'{r:.1f}' for r in runs[True])}): "
          f"{on / off:.2f}x, {on - off:.1f} us per message for its 2 trace records")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    if args.json:
        print(json.dumps({"socket": args.socket, "messages": args.messages, "off_us": runs[False], "on_us": runs[True], "off_median": off,
                          "on_median": on, "ratio": on / off, "load_before": load_before[0],
                          "load_after": load_after[0]}))


if __name__ == "__main__":
    main()
