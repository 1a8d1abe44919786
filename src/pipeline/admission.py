"""Admission control by bytes (``maxBytesPerTrigger``, PySpark's ``ReadMaxBytes``).

A micro-batch's end per stream is where the broker says a read from its start stops fitting a byte
budget: sansmq answers that on a passive queue.declare of the stream (capability
``stream_range_bytes``, arguments ``x-stream-range-start`` / ``x-stream-range-bytes``; the bytes
are the records as the broker stores them). The budget is shared among the streams in proportion to
the records each has new (as ``offsets.cap_total`` shares a row limit), and each stream asked gets
at least one record, so a record larger than its share still goes through (Spark's file sources
do the same with a file larger than maxBytesPerTrigger). RabbitMQ cannot answer, so a query with
the option fails at its start against it (``require_byte_ranges``)."""

from __future__ import annotations

from collections.abc import Mapping

from .driver import Driver
from .options import OptionError

__all__ = ["BYTES_CAPABILITY", "require_byte_ranges", "cap_bytes", "byte_shares"]

BYTES_CAPABILITY = "stream_range_bytes"
RANGE_START_ARG = "x-stream-range-start"
RANGE_BYTES_ARG = "x-stream-range-bytes"


def require_byte_ranges(client: Driver) -> None:
    """OptionError unless the broker can bound a range by bytes (a loud failure at query start:
    ignoring the option would read unbounded batches the user did not ask for)."""
    if client.capabilities.get(BYTES_CAPABILITY) is not True:
        product = client.server_properties.get("product", "the broker")
        raise OptionError(f"option maxBytesPerTrigger needs a broker that measures a stream's records in bytes "
                          f"(sansmq, capability {BYTES_CAPABILITY}); {product!s} does not advertise it: remove "
                          f"the option or bound batches with maxRecordsPerTrigger")


def byte_shares(start: Mapping[str, int], end: Mapping[str, int], budget: int) -> dict[str, int]:
    """Each stream's part of ``budget`` bytes, in proportion to the records it has new (streams
    with none get none). When every share rounds to nothing, the stream with the most new records
    (the first by name on a tie) gets the whole budget, so a batch always progresses."""
    avail = {s: end[s] - start.get(s, 0) for s in sorted(end) if end[s] > start.get(s, 0)}
    total = sum(avail.values())
    shares = {s: budget * n // total for s, n in avail.items()}
    if avail and not any(shares.values()):
        shares[max(avail, key=lambda s: avail[s])] = budget
    return {s: b for s, b in shares.items() if b}


def cap_bytes(client: Driver, start: Mapping[str, int], end: Mapping[str, int], budget: int) -> dict[str, int]:
    """``end`` (each at or after its ``start``) moved back so that each stream's range fits its
    share of ``budget`` bytes (one passive declare per stream with a share); streams without a
    share stay at their start."""
    shares = byte_shares(start, end, budget)
    out = {s: start.get(s, 0) for s in end}
    for s, share in shares.items():
        status = client.status(s, {RANGE_START_ARG: start.get(s, 0), RANGE_BYTES_ARG: share})
        out[s] = min(end[s], status.message_count)
    return out
