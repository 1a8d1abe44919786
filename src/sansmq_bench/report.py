"""What a run prints: one progress line per second and the JSON summary at the end."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from .stats import Histogram

__all__ = ["Sample", "progress_line", "problems", "exit_code", "write_summary"]


@dataclass(slots=True)
class Sample:
    """One progress interval: rates over it and its latency percentiles (microseconds)."""

    t: float  # seconds since the start, at the end of the interval
    sent: float
    received: float
    confirmed: float
    p50: int
    p95: int
    p99: int

    @classmethod
    def of(cls, t: float, seconds: float, d_sent: int, d_recv: int, d_conf: int,
           hist: Histogram) -> Sample:
        s = seconds if seconds > 0 else 1.0
        return cls(round(t, 3), round(d_sent / s, 1), round(d_recv / s, 1), round(d_conf / s, 1),
                   hist.percentile(50), hist.percentile(95), hist.percentile(99))


def _ms(us: int) -> str:
    return f"{us / 1000:.2f}" if us < 100_000 else f"{us / 1000:.0f}"


def progress_line(s: Sample, confirming: bool) -> str:
    line = f"{s.t:6.1f}s  sent {s.sent:9.0f} msg/s  received {s.received:9.0f} msg/s"
    if confirming:
        line += f"  confirmed {s.confirmed:9.0f} msg/s"
    if s.p50 or s.p99:
        line += f"  latency p50/p95/p99 {_ms(s.p50)}/{_ms(s.p95)}/{_ms(s.p99)} ms"
    return line


def problems(summary: dict[str, Any]) -> list[str]:
    """Why the run failed: broker errors, or nothing moved. Empty when it succeeded."""
    o = summary["options"]
    out = list(summary["errors"])
    if o["producers"] and not summary["sent"]:
        out.append("nothing was sent")
    if o["consumers"] and not summary["received"]:
        out.append("nothing was received")
    return out


def exit_code(summary: dict[str, Any]) -> int:
    """1 if the broker failed us or the run moved nothing; 0 otherwise."""
    return 1 if problems(summary) else 0


def write_summary(summary: dict[str, Any], path: str | None, stdout: TextIO = sys.stdout) -> None:
    text = json.dumps(summary, indent=2) + "\n"
    if path is None or path == "-":
        stdout.write(text)
        stdout.flush()
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
