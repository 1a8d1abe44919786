"""The simulator's invariants: what every publish, confirm, delivery and ack must respect.

Checked as events arrive (after every step): a delivered message is byte for byte one that was
published to that queue (a corrupted record is never delivered); an acked message never comes back
while the broker lives, nor after a power cut once the journal was fsynced after the ack; first
deliveries from one publisher to one queue come in publish order; a stream offset always holds the
same message and one consumer sees offsets without gaps.
Checked at the end (``check_final``, after a power cut and a reboot): no confirmed or receipted
message is missing unless it was settled, expired, or the store reported damage it found (a bit
flip may destroy data, but never silently; a truncation may, see ``truncated``); every confirm was
answered.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = ["Oracle", "Violation", "body_for", "mid_of"]


class Violation(AssertionError):
    """An invariant does not hold (``kind`` names it)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def body_for(mid: int) -> bytes:
    """A body that names its message and carries a check of that name: a flipped bit shows."""
    return b"%d:" % mid + hashlib.blake2b(b"%d" % mid, digest_size=12).hexdigest().encode()


def mid_of(body: bytes) -> int | None:
    """The message id a body names, if the body is intact."""
    head, _, _ = body.partition(b":")
    if not head.isdigit():
        return None
    mid = int(head)
    return mid if body == body_for(mid) else None


@dataclass(slots=True)
class _Published:
    queue: str
    publisher: str
    at: float  # clock at publish
    ttl: float | None


@dataclass
class Oracle:
    published: dict[int, _Published] = field(default_factory=dict)
    confirmed: set[int] = field(default_factory=set)
    #: acked or rejected (dropped): never required again
    settled: set[int] = field(default_factory=set)
    #: settled in this broker life, the journal not fsynced since: never back while the broker lives
    acked: set[int] = field(default_factory=set)
    #: settled and the journal fsynced since: never back, even after a power cut
    acked_durable: set[int] = field(default_factory=set)
    #: settles whose fate is unknown (the connection went down around them)
    maybe_settled: set[int] = field(default_factory=set)
    delivered: set[int] = field(default_factory=set)
    #: (queue, publisher) -> the last message id first-delivered
    fifo: dict[tuple[str, str], int] = field(default_factory=dict)
    #: stream offset -> message id, as first seen
    offsets: dict[int, int] = field(default_factory=dict)
    #: bit flips injected: data after one may be lost, but never silently
    media_faults: int = 0
    #: a file was cut short: a cut at a record boundary is indistinguishable from a clean end, so
    #: losses are allowed (and only what is delivered is checked)
    truncated: bool = False
    counts: dict[str, int] = field(default_factory=dict)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # -- publishing --------------------------------------------------------------------------------
    def publish(self, mid: int, queue: str, publisher: str, now: float, ttl: float | None) -> None:
        self.published[mid] = _Published(queue, publisher, now, ttl)
        self._count("published")

    def confirm(self, mid: int) -> None:
        self.confirmed.add(mid)
        self._count("confirmed")

    # -- consuming ---------------------------------------------------------------------------------
    def deliver(self, queue: str, body: bytes, redelivered: bool, stream_offset: int | None = None,
                last_offset: int | None = None) -> int:
        """Check one delivery; returns its message id. ``last_offset``: the stream offset this
        consumer saw before (None: its first delivery)."""
        mid = mid_of(body)
        if mid is None or mid not in self.published:
            raise Violation("corrupt-delivery", f"{queue}: a body that was never published: {body[:60]!r}")
        pub = self.published[mid]
        if pub.queue != queue:
            raise Violation("misrouted", f"message {mid} of {pub.queue} delivered from {queue}")
        if mid in self.acked_durable:
            raise Violation("acked-redelivered", f"{queue}: message {mid} delivered again after its ack was durable")
        if mid in self.acked:
            raise Violation("acked-redelivered", f"{queue}: message {mid} delivered again after its ack")
        self._count("delivered")
        if stream_offset is not None:
            self._stream(queue, mid, stream_offset, last_offset)
        elif mid not in self.delivered:
            key = (queue, pub.publisher)
            last = self.fifo.get(key, 0)
            if mid < last:
                raise Violation("fifo", f"{queue}: message {mid} of {pub.publisher} first-delivered after {last}")
            self.fifo[key] = mid
            if redelivered:
                pass  # a redelivery flag on a first delivery is allowed (RabbitMQ errs that way too)
        self.delivered.add(mid)
        return mid

    def _stream(self, queue: str, mid: int, offset: int, last: int | None) -> None:
        seen = self.offsets.setdefault(offset, mid)
        if seen != mid:
            raise Violation("stream-offset-changed", f"{queue}: offset {offset} held {seen}, now {mid}")
        if last is not None and offset != last + 1:
            raise Violation("stream-gap", f"{queue}: offset {offset} after {last}")

    def settle(self, mid: int, sure: bool) -> None:
        if sure:
            self.settled.add(mid)
            self.acked.add(mid)
        else:
            self.maybe_settled.add(mid)
        self._count("settled")

    # -- faults ------------------------------------------------------------------------------------
    def journal_synced(self) -> None:
        """The journal was fsynced (or rewritten): every ack so far is durable."""
        self.acked_durable |= self.acked
        self.acked.clear()

    def power_lost(self, media: bool = False) -> None:
        """Acks since the last journal fsync may be lost: those messages may come back (a damaged
        disk may bring back any)."""
        self.acked.clear()
        if media:
            self.acked_durable.clear()

    # -- the end -----------------------------------------------------------------------------------
    def required(self, now: float) -> set[int]:
        """Confirmed messages that must still be in their queues at ``now``."""
        out = set()
        for mid in self.confirmed:
            if mid in self.settled or mid in self.maybe_settled:
                continue
            pub = self.published[mid]
            if pub.ttl is not None and pub.at + pub.ttl <= now + 1.0:
                continue
            out.add(mid)
        return out

    def check_final(self, now: float, present: set[int], reported: bool, unanswered: int) -> None:
        missing = sorted(self.required(now) - present)
        if missing and not self.truncated and not (self.media_faults and reported):
            why = "after a media fault the store did not report" if self.media_faults else "lost"
            raise Violation("confirmed-lost", f"{len(missing)} confirmed message(s) {why}: {missing[:10]}")
        if unanswered:
            raise Violation("no-answer", f"{unanswered} publish(es) never confirmed, nacked or closed")
