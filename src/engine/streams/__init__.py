"""Stream queues' storage: append-only, offset-addressed logs with retention, server-side consumer
offset tracking and producer deduplication, on every store (segment files, PostgreSQL, memory), and
the protocol-neutral parsing of stream arguments. The protocol glue gets a log from
``Store.stream(vhost, name, settings)``; see ``StreamLog`` for what it offers."""

from ._log import RawRecord, RunInterrupted, SegmentStats, StreamLog, StreamRecord, StreamSettings
from .args import (
    DEFAULT_SEGMENT_BYTES,
    MAX_SEGMENT_BYTES,
    STREAM_QUEUE_ARGS,
    OffsetSpec,
    StreamArgumentError,
    parse_max_age,
    parse_max_length_bytes,
    parse_max_segment_size,
    parse_stomp_stream_offset,
    parse_stream_offset,
    resolve_offset,
    stream_settings,
)

__all__ = [
    "StreamLog", "RunInterrupted", "StreamRecord", "RawRecord", "StreamSettings", "SegmentStats", "OffsetSpec",
    "StreamArgumentError",
    "parse_stream_offset", "parse_stomp_stream_offset", "parse_max_age", "parse_max_length_bytes",
    "parse_max_segment_size", "stream_settings", "resolve_offset", "DEFAULT_SEGMENT_BYTES",
    "MAX_SEGMENT_BYTES", "STREAM_QUEUE_ARGS",
]
