"""The report's summary header: what an operator reads first, worst first, with numbers.

Four questions, in this order: which consumers are slowest (publish -> deliver p99 per consumer),
which queues backed up most (peak backlog), what was dead-lettered, and what reached no queue at
all (unroutable publishes). Each answer lists its worst ``TOP`` rows; "none" is an answer too.
Pure pandas over the analytics tables (``pipeline.analytics.tables``), so it is tested without Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Finding", "findings", "TOP"]

#: rows named per finding
TOP = 3


@dataclass(slots=True)
class Finding:
    title: str
    #: one line per row, worst first; empty: nothing of the kind in the trace
    lines: list[str]
    #: what the lines count, one number per line (the tests read these)
    values: list[float]
    #: said when ``lines`` is empty
    none: str


def _count(n: float) -> str:
    return f"{int(n):,}"


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"


def slowest_consumers(consumers: Any) -> Finding:
    worst = consumers.sort_values(["p99", "deliveries"], ascending=[False, False], kind="stable").head(TOP)
    lines = [f"{r.queue} <- {r.consumer or 'a consumer the trace does not name'}: p99 {_ms(r.p99)} "
             f"(p50 {_ms(r.p50)}, max {_ms(r['max'])}) over {_count(r.deliveries)} deliveries"
             for _, r in worst.iterrows()]
    return Finding("Slowest consumers (publish -> deliver p99)", lines, list(worst.p99),
                   "no delivery could be paired with its publish")


def largest_backlogs(backlog: Any) -> Finding:
    if backlog.empty:
        return Finding("Largest backlogs", [], [], "no queue held a message")
    peaks = backlog.sort_values("second", kind="stable").groupby("queue", sort=False).agg(
        peak=("peak", "max"), end=("end", "last"), row=("peak", "idxmax"))
    peaks = peaks[peaks.peak > 0].sort_values("peak", ascending=False, kind="stable").head(TOP)
    lines = [f"{queue}: peak {_count(r.peak)} messages at {backlog.loc[r.row, 'second']:%H:%M:%S}, "
             f"{_count(r.end)} at the end of the trace" for queue, r in peaks.iterrows()]
    return Finding("Largest backlogs", lines, list(peaks.peak), "no queue held a message")


def dead_letters(redeliveries: Any) -> Finding:
    dead = redeliveries[redeliveries.dead_letters > 0].sort_values("dead_letters", ascending=False, kind="stable")
    total = int(dead.dead_letters.sum())
    lines = [f"{r.queue}: {_count(r.dead_letters)} dead-lettered ({_count(r.redeliveries)} redeliveries, "
             f"{_count(r.deliveries)} deliveries)" for _, r in dead.head(TOP).iterrows()]
    title = f"Dead letters: {total:,}" if total else "Dead letters"
    return Finding(title, lines, list(dead.head(TOP).dead_letters), "none")


def unroutable(table: Any) -> Finding:
    total = int(table.messages.sum())
    worst = table.head(TOP)  # already busiest first
    lines = [f"exchange {r.exchange}, routing key {r.routing_key!r}: {_count(r.messages)}"
             for _, r in worst.iterrows()]
    title = f"Unroutable publishes: {total:,} reached no queue" if total else "Unroutable publishes"
    return Finding(title, lines, list(worst.messages), "none: every publish reached a queue")


def findings(frames: dict[str, Any]) -> list[Finding]:
    """The summary's findings from the report's tables (pandas DataFrames named as in TABLES)."""
    return [slowest_consumers(frames["consumers"]), largest_backlogs(frames["backlog"]),
            dead_letters(frames["redeliveries"]), unroutable(frames["unroutable"])]
