"""Stream filtering (RabbitMQ 3.13): a message's filter value, a consumer's filter, and the per-chunk
Bloom filters that let a filtered read skip whole chunks without decoding their messages.

- Publish: the ``x-stream-filter-value`` header (AMQP headers table, or a STOMP frame header) is the
  message's filter value; a message without one (or with a value that is not a string) is unfiltered.
- Consume: ``x-stream-filter`` (a string, or a list of strings; over STOMP a comma-separated list)
  and ``x-stream-match-unfiltered`` (bool, default false).
- Queue argument ``x-stream-filter-size-bytes`` (16..255, default 16): the size of a chunk's filter.

Every chunk has a Bloom filter of the values in it and a flag saying whether it holds an unfiltered
message. A filter covers a group of offsets that starts at a chunk (or a segment) start: consecutive
chunks share one until it covers ``GROUP_MIN`` messages (a stream appended one message per sync
would otherwise keep a filter per message in memory), and a chunk of more than ``GROUP_MAX``
messages is split (finer skipping in a busy stream's big chunks). A filtered read asks
``ChunkFilters.span`` for the first chunk that may match and skips the others; inside a matching
chunk the broker decodes the messages and drops those that do not match, so (unlike RabbitMQ over
AMQP 0-9-1, where clients must filter again) consumers get exactly what they asked for. Offsets the
filters do not cover (a stream written before filtering existed, records a cluster follower has not
loaded the filters of) are read and checked message by message: never a false negative.

The hash is blake2b (stable across processes: stores persist the filters).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from hashlib import blake2b
from typing import Any

from .._message import Message
from .._raw_message import RawMessage

__all__ = ["FILTER_VALUE_HEADER", "FILTER_ARG", "MATCH_UNFILTERED_ARG", "FILTER_SIZE_ARG", "DEFAULT_FILTER_BYTES",
           "MIN_FILTER_BYTES", "MAX_FILTER_BYTES", "StreamFilter", "ChunkFilters", "filter_value"]

FILTER_VALUE_HEADER = "x-stream-filter-value"
FILTER_ARG = "x-stream-filter"
MATCH_UNFILTERED_ARG = "x-stream-match-unfiltered"
FILTER_SIZE_ARG = "x-stream-filter-size-bytes"
#: RabbitMQ's default and bounds of ``x-stream-filter-size-bytes``
DEFAULT_FILTER_BYTES = 16
MIN_FILTER_BYTES, MAX_FILTER_BYTES = 16, 255
#: bits set per value
_HASHES = 3
#: a chunk start begins a new filter group once the current one covers this many messages
GROUP_MIN = 32
#: a filter group covers at most this many messages
GROUP_MAX = 4096


def filter_value(msg: Message) -> str | None:
    """``msg``'s filter value, None when it is unfiltered."""
    if type(msg) is RawMessage:  # read from its properties once per shape
        return msg.filter
    return header_filter_value(msg.headers)


def header_filter_value(headers: dict[str, Any]) -> str | None:
    """The filter value these message headers give (None: unfiltered)."""
    value = headers.get(FILTER_VALUE_HEADER) if headers else None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) and value else None


@lru_cache(maxsize=4096)
def value_mask(value: str, nbits: int) -> int:
    """The Bloom filter bits of ``value`` in a filter of ``nbits`` (double hashing)."""
    h = int.from_bytes(blake2b(value.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")
    h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
    mask = 0
    for i in range(_HASHES):
        mask |= 1 << ((h1 + i * h2) % nbits)
    return mask


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """What a filtered consumer wants: messages whose filter value is one of ``values``, and the
    unfiltered ones if ``match_unfiltered``."""

    values: frozenset[str]
    match_unfiltered: bool = False

    def matches(self, msg: Message) -> bool:
        value = filter_value(msg)
        return self.match_unfiltered if value is None else value in self.values

    def masks(self, nbits: int) -> list[int]:
        return [value_mask(v, nbits) for v in self.values]


class ChunkFilters:
    """The Bloom filters of a log's chunks (their groups, see above): group ``i`` holds offsets
    ``[firsts[i], firsts[i + 1])``, the last one up to ``end``. Offsets outside ``[firsts[0], end)`` are not
    covered (read message by message)."""

    __slots__ = ("nbytes", "nbits", "firsts", "blooms", "unfiltered", "end", "skipped")

    def __init__(self, nbytes: int = DEFAULT_FILTER_BYTES) -> None:
        self.nbytes = nbytes
        self.nbits = nbytes * 8
        self.firsts: list[int] = []
        self.blooms: list[int] = []
        self.unfiltered: list[bool] = []
        #: the offset after the last one covered
        self.end = 0
        #: chunks filtered reads skipped (a statistic; tests prove skipping with it)
        self.skipped = 0

    def add(self, offset: int, chunk_start: bool, msg: Message, segment_start: bool = False) -> None:
        """``msg`` was appended at ``offset``, starting a chunk if ``chunk_start`` (and a segment if
        ``segment_start``)."""
        self.add_value(offset, chunk_start, filter_value(msg), segment_start=segment_start)

    def add_value(self, offset: int, chunk_start: bool, value: str | None, known: bool = True,
                  segment_start: bool = False) -> None:
        """A message with filter ``value`` is at ``offset`` (appended, or found by a scan); not
        ``known`` (stored before filtering existed): its group matches every filter. A segment
        start always begins a group (retention and segment indexes cut there)."""
        size = self.end - self.firsts[-1] if self.firsts else 0
        if (segment_start or not self.firsts or offset != self.end or size >= GROUP_MAX
                or (chunk_start and size >= GROUP_MIN)):
            self.firsts.append(offset)
            self.blooms.append(0)
            self.unfiltered.append(False)
        if not known:
            self.blooms[-1] = (1 << self.nbits) - 1
            self.unfiltered[-1] = True
        elif value is None:
            self.unfiltered[-1] = True
        else:
            self.blooms[-1] |= value_mask(value, self.nbits)
        self.end = offset + 1

    def load(self, first: int, bloom: bytes, unfiltered: bool) -> None:
        """A stored chunk filter (in offset order); one of another size matches everything."""
        self.firsts.append(first)
        self.blooms.append(int.from_bytes(bloom, "little") if len(bloom) == self.nbytes else (1 << self.nbits) - 1)
        self.unfiltered.append(unfiltered)

    def row(self, i: int) -> tuple[int, bytes, bool]:
        """Chunk ``i`` as stored: (first offset, filter bytes, holds an unfiltered message)."""
        return self.firsts[i], self.blooms[i].to_bytes(self.nbytes, "little"), self.unfiltered[i]

    def between(self, lo: int, hi: int) -> list[tuple[int, bytes, bool]]:
        """The stored form of the chunks starting in ``[lo, hi)``."""
        a, b = bisect_right(self.firsts, lo - 1), bisect_right(self.firsts, hi - 1)
        return [self.row(i) for i in range(a, b)]

    def drop_below(self, first: int) -> None:
        """Retention removed the offsets below ``first`` (a chunk start)."""
        n = bisect_right(self.firsts, first - 1)
        if n and (n >= len(self.firsts) or self.firsts[n] > first):
            n -= 1  # the chunk holding ``first`` stays
        del self.firsts[:n], self.blooms[:n], self.unfiltered[:n]

    def span(self, offset: int, end: int, filt: StreamFilter) -> tuple[int, int]:
        """From ``offset`` (below ``end``): the first offset that may match and the end of the
        range read message by message from there (its chunk's end, or where coverage changes);
        (end, end) when nothing below ``end`` can match."""
        firsts = self.firsts
        if not firsts or offset >= self.end:
            return offset, end
        if offset < firsts[0]:
            return offset, min(end, firsts[0])
        masks = filt.masks(self.nbits)
        unf = filt.match_unfiltered
        blooms, unfiltered = self.blooms, self.unfiltered
        i = bisect_right(firsts, offset) - 1
        n = len(firsts)
        while i < n and firsts[i] < end:
            bloom = blooms[i]
            if (unf and unfiltered[i]) or any(bloom & m == m for m in masks):
                stop = firsts[i + 1] if i + 1 < n else self.end
                return max(offset, firsts[i]), min(end, stop)
            self.skipped += 1
            i += 1
        if i < n:  # the next chunk that may match starts at or past ``end``
            return end, end
        return (self.end, end) if self.end < end else (end, end)
