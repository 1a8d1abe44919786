"""Which stream a checkpoint's offsets belong to: the append time of the record below each offset.

AMQP 0-9-1 shows no stream identity, so a stream deleted and recreated that has grown past a
checkpoint's offset looks like the old one. sansmq stamps deliveries with their append time on
request (``x-stream-timestamp``), and a record's append time does not change while the stream
lives: the offsets Spark keeps carry, per stream, the append time of the record at ``offset - 1``
(under the key ``@appendTimes``), and before a range is read the record there now is compared with
it. Another time means another stream (a recreated one appends later, so only a stream recreated
and refilled to that offset within the same millisecond would pass). Without append times (RabbitMQ)
or when retention removed that record, nothing is compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .driver import Driver
from .offsets import record_time

__all__ = ["STAMPS_KEY", "split", "join", "stamps_for", "moved_on"]

#: the key of the offsets JSON holding ``{stream: append time of its record at offset - 1}``
STAMPS_KEY = "@appendTimes"


def split(offsets: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """Spark's offsets as (``{stream: next offset}``, ``{stream: append time below it}``); offsets
    written before the times were kept have none."""
    stamps = offsets.get(STAMPS_KEY) or {}
    return {s: int(o) for s, o in offsets.items() if s != STAMPS_KEY}, dict(stamps)


def join(offsets: Mapping[str, int], stamps: Mapping[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = dict(offsets)
    kept = {s: t for s, t in stamps.items() if s in offsets}
    if kept:
        out[STAMPS_KEY] = kept
    return out


def stamps_for(client: Driver, offsets: Mapping[str, int], known: tuple[Mapping[str, int], Mapping[str, int]]
               ) -> dict[str, int]:
    """The append time of the record below each offset, read from the broker except where
    ``known`` (offsets, times) has it for the same offset already."""
    was, times = known
    out = {}
    for s, o in offsets.items():
        if o <= 0:
            continue
        t = times.get(s) if was.get(s) == o else None
        if t is None:
            t = record_time(client, s, o - 1)
        if t is not None:
            out[s] = t
    return out


def moved_on(client: Driver, stream: str, offset: int, stamp: int | None) -> int | None:
    """The append time of the record at ``offset - 1`` now if it differs from ``stamp`` (the
    stream is not the one the offset was taken from), else None."""
    if stamp is None or offset <= 0:
        return None
    now = record_time(client, stream, offset - 1)
    return now if now is not None and now != stamp else None
