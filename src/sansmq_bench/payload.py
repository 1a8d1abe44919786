"""Message bodies: an 8-byte send timestamp, an 8-byte run id, then padding.

The stamp is the sender's ``time.perf_counter_ns() // 1000`` modulo 2**32 as 8 hex digits, so a
body is plain ASCII: valid in a WebSocket text frame (RabbitMQ's Web-STOMP and sansmq carry STOMP
in text frames) and readable by any protocol. Latency = (now - stamp) mod 2**32 microseconds,
exact for latencies under 71 minutes; producers and consumers share one process and clock.
The run id lets a consumer skip messages an earlier run left in a durable queue.
"""

from __future__ import annotations

import os
import time

__all__ = ["HEADER_SIZE", "Payload", "new_run_id", "now_us"]

HEADER_SIZE = 16
_MASK = 0xFFFFFFFF
_perf_ns = time.perf_counter_ns


def now_us() -> int:
    return _perf_ns() // 1000


def new_run_id() -> bytes:
    return os.urandom(4).hex().encode("ascii")


class Payload:
    """Builds bodies of ``size`` bytes for one run and reads latencies back from them."""

    __slots__ = ("run_id", "size", "_tail")

    def __init__(self, size: int, run_id: bytes | None = None) -> None:
        if size < HEADER_SIZE:
            raise ValueError(f"message size must be at least {HEADER_SIZE} bytes")
        self.run_id = run_id if run_id is not None else new_run_id()
        if len(self.run_id) != 8:
            raise ValueError("run id must be 8 bytes")
        self.size = size
        self._tail = self.run_id + b"." * (size - HEADER_SIZE)

    def body(self) -> bytes:
        """A body stamped with the current time."""
        return b"%08x" % ((_perf_ns() // 1000) & _MASK) + self._tail

    def latency_us(self, body: bytes, now: int) -> int:
        """Microseconds since ``body`` was stamped, or -1 if it belongs to another run."""
        if body[8:16] != self.run_id:
            return -1
        try:
            stamp = int(body[:8], 16)
        except ValueError:
            return -1
        return (now - stamp) & _MASK
