"""Micro-benchmark: stompproto vs stomp.py's own frame code, in the same run.

* parse: N SEND frames (a realistic header set, 100-byte body) arriving in 64 KiB reads,
  through a SERVER-role Connection (events out), vs ``stomp.utils.parse_frame`` on the
  frames already split at their NUL (stomp.py's transport does that split; we give it
  for free, which favours stomp.py).
* serialise: N MESSAGE frames via ``Connection.send(Message(...))`` vs
  ``b"".join(stomp.utils.convert_frame(stomp.utils.Frame(...)))``.

Run: .venv/bin/python benchmarks/bench_stompproto.py [N]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import stomp.utils as su

from stompproto import CLIENT, NEED_DATA, SERVER, Connect, Connection, Message, Send

BODY = b"x" * 100
SEND_HEADERS = {
    "destination": "/queue/bench",
    "content-type": "text/plain",
    "persistent": "true",
    "receipt": "r-12345",
    "x-app": "benchmark",
}
MSG_HEADERS = {
    "subscription": "sub-0",
    "message-id": "T_sub-0@@session-abc@@1234",
    "destination": "/queue/bench",
    "content-type": "text/plain",
    "ack": "1234",
    "redelivered": "false",
}


def _connected_pair():
    client, server = Connection(CLIENT), Connection(SERVER)
    server.receive_data(client.send(Connect({"accept-version": "1.2", "host": "h"})))
    server.next_event()
    client.receive_data(server.send(server.connected_frame()))
    client.next_event()
    return client, server


def _rate(n: int, fn) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def send_stream(n: int) -> bytes:
    """N SEND frames as a client writes them."""
    client, _ = _connected_pair()
    return client.send(Send(dict(SEND_HEADERS), BODY)) * n


def stompproto_cases(n: int) -> list[tuple[str, Callable[[], None]]]:
    """stompproto's side of each case: one call handles n frames (bench_compiled.py times these too)."""
    stream = send_stream(n)
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def ours_parse() -> None:
        _, server = _connected_pair()
        count = 0
        for c in chunks:
            server.receive_data(c)
            while server.next_event() is not NEED_DATA:
                count += 1
        assert count == n

    _, server = _connected_pair()

    def ours_serialise() -> None:
        send = server.send
        for _ in range(n):
            send(Message(dict(MSG_HEADERS), BODY))

    return [("parse SEND", ours_parse), ("serialise MESSAGE", ours_serialise)]


def main(n: int = 50_000) -> None:
    ours_parse, ours_serialise = (fn for _, fn in stompproto_cases(n))
    frames = send_stream(n).split(b"\x00")[:-1]

    def theirs_parse():
        count = 0
        for f in frames:
            su.parse_frame(f)
            count += 1
        assert count == n

    def theirs_serialise():
        for _ in range(n):
            b"".join(su.convert_frame(su.Frame("MESSAGE", dict(MSG_HEADERS), BODY)))

    rows = [
        ("parse SEND", _rate(n, ours_parse), _rate(n, theirs_parse)),
        ("serialise MESSAGE", _rate(n, ours_serialise), _rate(n, theirs_serialise)),
    ]
    print(f"N = {n}")
    print(f"{'':20} {'stompproto msg/s':>18} {'stomp.py msg/s':>16} {'ratio':>7}")
    for name, ours, theirs in rows:
        print(f"{name:20} {ours:18,.0f} {theirs:16,.0f} {ours / theirs:7.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
