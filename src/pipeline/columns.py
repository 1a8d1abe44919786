"""The reader's record batches: stream deliveries decoded from the socket's bytes by
``amqpproto.bulk`` straight into column lists (no event or property object per message), and those
lists turned into one Arrow record batch.

The headers map column is built as Arrow keeps it (row offsets plus flat key and value lists), so
building a batch converts no nested Python lists; values are strings (``amqpproto.bulk.header_text``:
bytes as UTF-8, arrays as JSON, nested tables flattened with dotted keys). The ``filter`` column is
the message's stream filter value (its ``x-stream-filter-value`` header; null when it has none),
looked up in that map by Arrow.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from amqpproto.bulk import DeliveryColumns, flat_headers, header_text

__all__ = ["ARROW_SCHEMA", "Columns", "flat_headers", "header_text"]

ARROW_SCHEMA = pa.schema([
    ("stream", pa.string()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ("routing_key", pa.string()), ("headers", pa.map_(pa.string(), pa.string())),
    ("content_type", pa.string()), ("body", pa.binary()), ("filter", pa.string()),
])
_FILTER_KEY = pa.scalar("x-stream-filter-value")
_MILLIS = pa.timestamp("ms", tz="UTC")  # the decoder's timestamps, cast to the schema's microseconds


class Columns(DeliveryColumns):
    """The column lists of one record batch."""

    __slots__ = ()

    def batch(self, stream: str) -> pa.RecordBatch:
        n = len(self.offset)
        headers = pa.MapArray.from_arrays(pa.array(self.header_offsets, pa.int32()),
                                          pa.array(self.header_keys, pa.string()),
                                          pa.array(self.header_values, pa.string()))
        return pa.RecordBatch.from_arrays([
            pa.repeat(pa.scalar(stream, pa.string()), n), pa.array(self.offset, pa.int64()),
            pa.array(self.timestamp, _MILLIS).cast(ARROW_SCHEMA.field("timestamp").type),
            pa.array(self.routing_key, pa.string()), headers, pa.array(self.content_type, pa.string()),
            pa.array(self.body, pa.binary()), pc.map_lookup(headers, _FILTER_KEY, "first"),
        ], schema=ARROW_SCHEMA)
