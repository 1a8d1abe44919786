"""Large listings through the management API and Prometheus: how long they hold the broker's loop
and how much memory they take and keep, with N idle queues (issue 23, item 7).

A pinger thread posts a no-op to the broker's loop every 2 ms and records how late it runs (the
loop's longest stall while the request is served); a sampler thread records the process RSS. Runs
in-process (threads server, memory store). Usage:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_http_listings.py [N]
"""

from __future__ import annotations

import base64
import sys
import threading
import time
import urllib.request
from typing import Any

from servers import running
from servers.management import OpsListeners

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class Watch:
    """The loop's longest stall and the peak RSS while it runs."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.stall = 0.0
        self.peak = rss()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._ping, daemon=True),
                         threading.Thread(target=self._rss, daemon=True)]

    def __enter__(self) -> Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _ping(self) -> None:
        while not self._stop.wait(0.002):
            sent = time.monotonic()
            self.server.call_soon(lambda: None).result(30)
            self.stall = max(self.stall, time.monotonic() - sent)

    def _rss(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss())


def get(port: int, path: str) -> int:
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": AUTH})
    with urllib.request.urlopen(rq, timeout=300) as resp:
        return len(resp.read())


def main(n: int) -> None:
    with running("threads", [("amqp", "127.0.0.1", 0)]) as r:
        ops = OpsListeners(r.server, ("127.0.0.1", 0), ("127.0.0.1", 0))
        ops.start()
        try:
            for start in range(0, n, 5000):
                r.admin(lambda b, start=start: [b.model.declare_queue(b.model.vhosts["/"], f"q{i}", False, False,
                                                                      None, None)
                                                for i in range(start, min(n, start + 5000))])
            http, prom = ops.bound["http"][1], ops.bound["prometheus"][1]
            get(http, "/api/overview")
            print(f"{n} queues; RSS {rss() / 1e6:.0f} MB before the listings")
            for port, path in ((http, "/api/queues"), (http, "/api/queues?page=2&page_size=100"),
                               (prom, "/metrics/per-object"), (http, "/api/overview")):
                base = rss()
                started = time.monotonic()
                with Watch(r.server) as w:
                    size = get(port, path)
                took = time.monotonic() - started
                time.sleep(0.5)  # a snapshot cache's lifetime, then what stays
                print(f"{path:40s} {size / 1e6:7.1f} MB answer in {took:5.2f} s; loop stall max "
                      f"{w.stall * 1000:6.1f} ms; RSS peak +{(w.peak - base) / 1e6:4.0f} MB, "
                      f"kept +{(rss() - base) / 1e6:4.0f} MB")
        finally:
            ops.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
