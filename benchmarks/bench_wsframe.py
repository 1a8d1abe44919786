"""Micro-benchmark: parse and serialise masked WebSocket frames, wsframe vs wsproto.

    .venv/bin/python benchmarks/bench_wsframe.py [--quick]

Not a test: prints frames/s for each library and the wsframe/wsproto ratio (>1 = faster).
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import wsproto.events as wpe
from wsproto.connection import Connection as WPConnection
from wsproto.connection import ConnectionType

from wsframe import CLIENT, NEED_DATA, SERVER, BytesMessage, Connection


def best_rate(fn: Callable[[], int], repeat: int) -> float:
    """Frames per second of the fastest of ``repeat`` runs (least disturbed by other load)."""
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def masked_stream(size: int, count: int) -> bytes:
    cli = Connection(CLIENT, handshake=False, permessage_deflate=None)
    payload = os.urandom(size)
    return b"".join(cli.send(BytesMessage(payload)) for _ in range(count))


def parse_wsframe(blob: bytes, count: int) -> Callable[[], int]:
    def run() -> int:
        conn = Connection(SERVER, handshake=False, permessage_deflate=None)
        conn.receive_data(blob)
        n = 0
        next_event = conn.next_event
        while next_event() is not NEED_DATA:
            n += 1
        assert n == count
        return n

    return run


def parse_wsproto(blob: bytes, count: int) -> Callable[[], int]:
    def run() -> int:
        conn = WPConnection(ConnectionType.SERVER)
        conn.receive_data(blob)
        n = sum(1 for _ in conn.events())
        assert n == count
        return n

    return run


def send_wsframe(size: int, count: int) -> Callable[[], int]:
    payload = os.urandom(size)

    def run() -> int:
        conn = Connection(CLIENT, handshake=False, permessage_deflate=None)
        send = conn.send
        for _ in range(count):
            send(BytesMessage(payload))
        return count

    return run


def send_wsproto(size: int, count: int) -> Callable[[], int]:
    payload = os.urandom(size)

    def run() -> int:
        conn = WPConnection(ConnectionType.CLIENT)
        send = conn.send
        for _ in range(count):
            send(wpe.BytesMessage(payload))
        return count

    return run


def main() -> None:
    quick = "--quick" in sys.argv
    repeat = 3 if quick else 7
    print(f"{'case':<28}{'wsframe/s':>14}{'wsproto/s':>14}{'ratio':>8}")
    for size, count in ((117, 20_000), (16 * 1024, 2_000)):
        if quick:
            count //= 10
        blob = masked_stream(size, count)
        for name, ours, theirs in (
            ("parse", parse_wsframe(blob, count), parse_wsproto(blob, count)),
            ("serialise", send_wsframe(size, count), send_wsproto(size, count)),
        ):
            a, b = best_rate(ours, repeat), best_rate(theirs, repeat)
            print(f"{f'{name} masked {size} B':<28}{a:>14,.0f}{b:>14,.0f}{a / b:>8.2f}")


if __name__ == "__main__":
    main()
