"""Counters and a log-linear latency histogram (HdrHistogram-like, no dependencies).

Values are integers (microseconds). Below 2**SUB_BITS every value has its own bucket; above,
each power of two is split into 2**(SUB_BITS-1) buckets, so a reported percentile is within
1/64 (1.6 %) of the true value. Recording is a few integer operations and one list increment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["Histogram", "Stats", "PERCENTILES"]

SUB_BITS = 7
_SUB = 1 << SUB_BITS  # 128 exact buckets
_HALF = _SUB >> 1  # 64 buckets per power of two above that
_MAX_BITS = 48  # values up to 2**48 us (~9 years) are kept; larger ones are clamped
_NBUCKETS = _SUB + (_MAX_BITS - SUB_BITS) * _HALF
_MAX_VALUE = (1 << _MAX_BITS) - 1

#: the percentiles of the JSON summary (the progress line shows 50/95/99)
PERCENTILES: tuple[float, ...] = (50.0, 75.0, 95.0, 99.0)


def _index(value: int) -> int:
    if value < _SUB:
        return value if value > 0 else 0
    if value > _MAX_VALUE:
        value = _MAX_VALUE
    shift = value.bit_length() - SUB_BITS
    return (shift << (SUB_BITS - 1)) + (value >> shift)


def _lowest(index: int) -> int:
    """The smallest value that lands in bucket ``index``."""
    if index < _SUB:
        return index
    shift = (index >> (SUB_BITS - 1)) - 1
    return (index - (shift << (SUB_BITS - 1))) << shift


class Histogram:
    """Counts of integer values in log-linear buckets, with exact min/max/sum."""

    __slots__ = ("counts", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.counts = [0] * _NBUCKETS
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    def record(self, value: int) -> None:
        if value < 0:
            value = 0
        if self.count == 0 or value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.count += 1
        self.total += value
        self.counts[_index(value) if value >= _SUB else value] += 1

    def record_many(self, values: Iterable[int]) -> None:
        for v in values:
            self.record(v)

    def merge(self, other: Histogram) -> None:
        if not other.count:
            return
        if self.count == 0 or other.min < self.min:
            self.min = other.min
        if other.max > self.max:
            self.max = other.max
        self.count += other.count
        self.total += other.total
        mine = self.counts
        for i, c in enumerate(other.counts):
            if c:
                mine[i] += c

    def reset(self) -> None:
        self.counts = [0] * _NBUCKETS
        self.count = self.total = self.min = self.max = 0

    def percentile(self, p: float) -> int:
        """The nearest-rank ``p``-th percentile (0 < p <= 100), clamped to [min, max]; 0 if empty.

        Returns the middle of the bucket holding that rank, so the error is at most half a
        bucket: exact below 128, within 0.8 % above."""
        if not self.count:
            return 0
        if not 0 < p <= 100:
            raise ValueError("percentile must be in (0, 100]")
        rank = max(1, math.ceil(p * self.count / 100 - 1e-9))  # nearest rank
        if rank >= self.count:
            return self.max  # known exactly
        seen = 0
        for i, c in enumerate(self.counts):
            if c:
                seen += c
                if seen >= rank:
                    low = _lowest(i)
                    width = _lowest(i + 1) - low
                    value = low + (width - 1) // 2
                    return min(max(value, self.min), self.max)
        return self.max  # unreachable: the counts add up to count

    def percentiles(self, ps: Sequence[float] = PERCENTILES) -> dict[str, int]:
        return {f"p{p:g}": self.percentile(p) for p in ps}

    def summary(self) -> dict[str, float | int]:
        """min, the PERCENTILES, max, mean and count, as the JSON summary shows them."""
        out: dict[str, float | int] = {"count": self.count, "min": self.min}
        out.update(self.percentiles())
        out["max"] = self.max
        out["mean"] = round(self.total / self.count, 1) if self.count else 0
        return out


class Stats:
    """Everything the clients count; one instance per run, touched only by the event loop.

    ``window`` holds the latencies of the current progress interval; ``latency`` the whole run
    (merged at every tick, so recording touches one histogram only)."""

    __slots__ = ("sent", "received", "confirmed", "nacked", "returned", "stale", "errors",
                 "window", "latency", "confirm_window", "confirm_latency", "last_receive")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.confirmed = 0
        self.nacked = 0
        self.returned = 0
        self.stale = 0  # messages of an earlier run found in the queue (not counted as received)
        self.errors: list[str] = []
        self.window = Histogram()
        self.latency = Histogram()
        self.confirm_window = Histogram()
        self.confirm_latency = Histogram()
        self.last_receive = 0.0

    def error(self, text: str) -> None:
        if text not in self.errors:
            self.errors.append(text)

    def roll(self) -> tuple[Histogram, Histogram]:
        """End a progress interval: merge its histograms into the totals and return them."""
        window, confirms = self.window, self.confirm_window
        self.latency.merge(window)
        self.confirm_latency.merge(confirms)
        self.window, self.confirm_window = Histogram(), Histogram()
        return window, confirms
