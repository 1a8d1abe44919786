"""A stream range read in bulk: ``sansmq_client.bulk.read_stream`` decodes the deliveries from the
socket's bytes straight into column lists (``amqpproto.bulk``, no object per message), checked here
against the loss policy; the caller turns them into Arrow record batches (``Columns.batch``)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from sansmq_client import sync
from sansmq_client.bulk import read_stream

from .columns import Columns
from .dataloss import LossPolicy
from .offsets import stamp_arguments

__all__ = ["read_stream_range", "filter_arguments"]


def filter_arguments(conn: sync.Connection, values: tuple[str, ...] | None, end: int) -> dict[str, object] | None:
    """The consumer arguments of a range read that only wants messages whose stream filter value is
    one of ``values`` (``x-stream-filter``, and ``x-stream-end-offset`` so that the broker cancels
    the consumer at the range's end: a filtered read cannot tell its end from the offsets it gets);
    None when there is no filter or the broker cannot end a range (RabbitMQ: everything is read, and
    Spark's own predicate does the filtering)."""
    if values is None or conn.capabilities.get("stream_range_end") is not True:
        return None
    return {"x-stream-filter": list(values), "x-stream-end-offset": end}


def read_stream_range(conn: sync.Connection, stream: str, start: int, end: int, prefetch: int, batch_rows: int,
                      timeout: float, policy: LossPolicy, values: tuple[str, ...] | None = None,
                      headers: bool = True) -> Iterator[Columns]:
    """Offsets [start, end) of ``stream`` as column lists of at most ``batch_rows`` rows, ``prefetch``
    the consumer's credit; ``headers``: build the headers' lists too. When the range is read the
    consumer is gone, so the connection can read the next range.

    A stream's offsets are contiguous, so rows missing from the range were removed before they
    were read (a consumer asking for an offset retention removed starts at the first one kept):
    ``policy`` fails the task or counts them. The first batch is checked before it leaves, the
    count of the whole range at its end (retention can overtake a slow reader).

    With ``values`` (``filter_arguments``) the broker sends only the matching messages and cancels
    the consumer at ``end``: the range is read when that cancel arrives; rows are not counted then
    (the offsets in between were skipped by the filter, not removed)."""
    filtered = filter_arguments(conn, values, end)
    rows = 0
    for cols in read_stream(conn, stream, start, end, prefetch=prefetch, batch_rows=batch_rows, timeout=timeout,
                            arguments={**stamp_arguments(conn), **(filtered or {})},
                            columns=partial(Columns, headers)):
        rows += len(cols) if filtered else _checked(cols, rows, stream, start, policy)
        yield cols
    if rows < end - start and not filtered:
        policy.lost(stream, f"{end - start - rows} offsets of [{start}, {end}) were removed (retention) while "
                            f"the range was read", end - start - rows)


def _checked(cols: Columns, before: int, stream: str, start: int, policy: LossPolicy) -> int:
    """The offsets ``cols`` accounts for, after checking that the range's first batch begins at
    ``start`` (offsets skipped there are accounted for, so the count at the end does not report them
    twice)."""
    if not before and cols.offset[0] > start:
        policy.removed(stream, start, cols.offset[0])
        return len(cols) + cols.offset[0] - start
    return len(cols)
