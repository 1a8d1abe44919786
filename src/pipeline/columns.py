"""The reader's record batches: stream deliveries decoded from the socket's bytes by
``amqpproto.bulk`` straight into column lists (no event or property object per message), and those
lists turned into one Arrow record batch of the columns the query asked for.

The headers map column is built as Arrow keeps it (row offsets plus flat key and value lists), so
building a batch converts no nested Python lists; values are strings (``amqpproto.bulk.header_text``:
bytes as UTF-8, arrays as JSON, nested tables flattened with dotted keys). The ``filter`` column is
the message's stream filter value (its ``x-stream-filter-value`` header; null when it has none),
which the decoder keeps as a column of its own.

A query that gives the source a narrower schema (``.schema("offset long, body binary")``: any of the
source's columns, in any order) gets only those columns: nothing is built for the others, and
without ``headers`` the decoder builds no per-row header lists (``selected_columns``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from amqpproto.bulk import DeliveryColumns, flat_headers, header_text

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SCHEMA_DDL", "Columns", "SchemaError", "flat_headers", "header_text",
           "selected_columns"]

#: the source's columns and their Spark types, in the source's order
COLUMNS = {"stream": "string", "offset": "bigint", "timestamp": "timestamp", "routing_key": "string",
           "headers": "map<string,string>", "content_type": "string", "body": "binary", "filter": "string"}
SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
ARROW_SCHEMA = pa.schema([
    ("stream", pa.string()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ("routing_key", pa.string()), ("headers", pa.map_(pa.string(), pa.string())),
    ("content_type", pa.string()), ("body", pa.binary()), ("filter", pa.string()),
])
_MILLIS = pa.timestamp("ms", tz="UTC")  # the decoder's timestamps, cast to the schema's microseconds


class SchemaError(ValueError):
    """A schema given to the source asks for a column it does not have, or with another type."""


def selected_columns(fields: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The columns a schema asks for, given as (name, Spark simple type string) pairs: each must be
    one of the source's columns with its type, each at most once."""
    if not fields:
        raise SchemaError(f"the schema given to the sansmq source has no column; its columns: {SCHEMA_DDL}")
    names = [name for name, _ in fields]
    for name, kind in fields:
        if name not in COLUMNS:
            raise SchemaError(f"the sansmq source has no column {name!r}; its columns: {SCHEMA_DDL}")
        if kind != COLUMNS[name]:
            raise SchemaError(f"column {name!r} of the sansmq source is {COLUMNS[name]}, not {kind}; "
                              f"its columns: {SCHEMA_DDL}")
        if names.count(name) > 1:
            raise SchemaError(f"column {name!r} is in the schema given to the sansmq source twice")
    return tuple(names)


def _headers(cols: Columns, stream: str) -> pa.Array:
    return pa.MapArray.from_arrays(pa.array(cols.header_offsets, pa.int32()), pa.array(cols.header_keys, pa.string()),
                                   pa.array(cols.header_values, pa.string()))


#: each column of a record batch, built from the column lists
_BUILD: dict[str, Callable[[Columns, str], pa.Array]] = {
    "stream": lambda c, stream: pa.repeat(pa.scalar(stream, pa.string()), len(c.offset)),
    "offset": lambda c, _: pa.array(c.offset, pa.int64()),
    "timestamp": lambda c, _: pa.array(c.timestamp, _MILLIS).cast(ARROW_SCHEMA.field("timestamp").type),
    "routing_key": lambda c, _: pa.array(c.routing_key, pa.string()),
    "headers": _headers,
    "content_type": lambda c, _: pa.array(c.content_type, pa.string()),
    "body": lambda c, _: pa.array(c.body, pa.binary()),
    "filter": lambda c, _: pa.array(c.filter_value, pa.string()),
}


class Columns(DeliveryColumns):
    """The column lists of one record batch."""

    __slots__ = ()

    def batch(self, stream: str, names: tuple[str, ...], only: tuple[str, ...] | None = None) -> pa.RecordBatch:
        """The columns ``names`` of these rows, in that order; with ``only``, just the rows whose
        filter value is one of those (what sansmq sends already; a broker that cannot filter a
        range, RabbitMQ, sends everything)."""
        batch = pa.RecordBatch.from_arrays([_BUILD[name](self, stream) for name in names],
                                           schema=pa.schema([ARROW_SCHEMA.field(name) for name in names]))
        if only is None:
            return batch
        return batch.filter(pc.is_in(pa.array(self.filter_value, pa.string()), pa.array(only, pa.string())))
