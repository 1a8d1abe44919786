"""What the source does when offsets it was to read are gone: Kafka's ``failOnDataLoss``.

Offsets go missing when retention removes segments the query has not read yet, when a checkpoint
points past a stream's end (the stream was deleted and recreated, or the query now talks to another
broker), or when a stream is deleted. With ``failOnDataLoss=true`` (the default, as Kafka's) the
query fails with a message naming the stream and the offsets; with ``false`` they are skipped, each
time with a warning that also gives the running total of offsets skipped by this reader (the
metric; PySpark's Python sources have no custom progress metrics).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

__all__ = ["DataLossError", "LossPolicy"]

log = logging.getLogger("pipeline.dataloss")


class DataLossError(RuntimeError):
    """Offsets the query was to read are gone, and failOnDataLoss is true."""


@dataclass
class LossPolicy:
    """Fails on data loss or counts and warns; one per reader (driver) or task (executor)."""

    fail: bool
    skipped: dict[str, int] = field(default_factory=dict)  # stream -> offsets skipped so far

    def lost(self, stream: str, what: str, count: int) -> None:
        """``count`` offsets of ``stream`` cannot be read; ``what`` says which and why."""
        text = f"stream {stream!r}: {what}"
        if self.fail:
            raise DataLossError(f"{text}; the query stops (failOnDataLoss=true; with failOnDataLoss=false "
                                f"they are skipped with a warning)")
        self.skipped[stream] = self.skipped.get(stream, 0) + count
        log.warning("%s; skipped (failOnDataLoss=false): %d offsets of %r skipped so far", text,
                    self.skipped[stream], stream)

    def removed(self, stream: str, lo: int, hi: int) -> None:
        """Offsets [lo, hi) went before they were read (retention)."""
        self.lost(stream, f"offsets {lo}..{hi - 1} ({hi - lo}) were removed (retention) before they were "
                          f"read; the stream's first offset is now {hi}", hi - lo)

    def past_end(self, stream: str, next_offset: int, end: int) -> None:
        """The query's next offset is beyond the stream's end: not the stream the offsets came from."""
        self.lost(stream, f"the query's next offset {next_offset} is past the stream's end {end}: the stream "
                          f"was deleted and recreated, or this is another broker than the checkpoint's "
                          f"(offsets {end}..{next_offset - 1} are not there)", next_offset - end)

    def recreated(self, stream: str, next_offset: int, then: int, now: int) -> None:
        """The record below the query's next offset is not the one the offset was taken after."""
        self.lost(stream, f"the record at offset {next_offset - 1} was appended at {then} ms when the query "
                          f"reached offset {next_offset}, the one there now at {now} ms: the stream was deleted "
                          f"and recreated (the old stream's offsets from {next_offset} on are gone; with "
                          f"failOnDataLoss=false the new one is read from its beginning)", 0)

    def deleted(self, stream: str, reason: str) -> None:
        """The stream itself is gone."""
        if self.fail:
            raise DataLossError(f"stream {stream!r} no longer exists ({reason}); the query stops "
                                f"(failOnDataLoss=true; with failOnDataLoss=false it is skipped with a warning)")
        log.warning("stream %r no longer exists (%s); skipped (failOnDataLoss=false)", stream, reason)
