"""The simulator's invariants: what every publish, confirm, delivery and ack must respect.

Checked as events arrive (after every step): a delivered message is byte for byte one that was
published to that queue (a corrupted record is never delivered); an acked message never comes back
while the broker lives, nor after a power cut once the journal was fsynced after the ack; first
deliveries from one publisher to one queue come in publish order; a stream offset always holds the
same message and one consumer sees offsets without gaps, and a message resent with its publishing id
sits at one offset only (dedup); a message of a rolled-back or not yet committed transaction is never
delivered; a dead-lettered copy comes from its dead-letter queue with an ``x-death`` naming it; a
delayed message is never delivered before its delay; a priority queue never first-delivers a message
while one of a higher priority, confirmed in an earlier step, waits.
Checked at the end (``check_final``, after a power cut and a reboot): no confirmed or receipted
message is missing unless it was settled, expired, or the store reported damage it found (a bit
flip may destroy data, but never silently; a truncation may, see ``truncated``); every confirm was
answered.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

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


def _check_death(mid: int, queue: str, headers: dict[str, Any]) -> None:
    """A dead-lettered copy carries ``x-death``, its latest death naming the queue it died in."""
    deaths = headers.get("x-death")
    latest = deaths[0] if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict) else {}
    if latest.get("queue") != queue or latest.get("reason") not in DEATH_REASONS:
        raise Violation("x-death", f"dead-lettered message {mid} from {queue} with x-death {deaths!r}")


@dataclass(slots=True)
class _Published:
    queue: str
    publisher: str
    at: float  # clock at publish
    ttl: float | None
    priority: int | None = None  # in a priority queue
    not_before: float | None = None  # a delayed message: never delivered before this
    dead_to: str | None = None  # the queue its dead-lettered copy goes to


#: reasons RabbitMQ writes in ``x-death``
DEATH_REASONS = ("rejected", "expired", "maxlen")


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
    #: (queue, publisher, priority) -> the last message id first-delivered
    fifo: dict[tuple[str, str, int | None], int] = field(default_factory=dict)
    #: stream offset -> message id, as first seen
    offsets: dict[int, int] = field(default_factory=dict)
    #: bit flips injected: data after one may be lost, but never silently
    media_faults: int = 0
    #: a file was cut short: a cut at a record boundary is indistinguishable from a clean end, so
    #: losses are allowed (and only what is delivered is checked)
    truncated: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    #: the step now running (a priority check only trusts confirms of earlier steps)
    step: int = 0
    #: published in a transaction whose commit was not sent yet: never delivered
    in_tx: set[int] = field(default_factory=set)
    #: published in a transaction rolled back (or lost with its channel): never delivered
    rolled_back: set[int] = field(default_factory=set)
    #: priority queue messages confirmed and never delivered: mid -> (priority, step confirmed)
    waiting: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: stream message id -> its offset (a resent publishing id must not be appended again)
    stream_mids: dict[int, int] = field(default_factory=dict)
    #: body bytes of messages published and not surely settled nor rolled back (the memory bound)
    live: dict[int, int] = field(default_factory=dict)
    #: queues deleted (delete-ok received) in this broker life / and the journal fsynced since
    deleted: set[str] = field(default_factory=set)
    deleted_durable: set[str] = field(default_factory=set)
    #: when the power was cut (not counting the last one, before the final check)
    cuts: list[float] = field(default_factory=list)
    #: the memory alarm is on; messages published on a connection already blocked by it
    alarm: bool = False
    held: dict[int, str] = field(default_factory=dict)  # message id -> its publisher

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # -- publishing --------------------------------------------------------------------------------
    def publish(self, mid: int, queue: str, publisher: str, now: float, ttl: float | None, *,
                priority: int | None = None,
                not_before: float | None = None, dead_to: str | None = None, tx: bool = False) -> None:
        if mid in self.published:  # a resend (stream dedup): the same message again
            return
        self.published[mid] = _Published(queue, publisher, now, ttl, priority, not_before, dead_to)
        self.live[mid] = len(body_for(mid))
        if tx:
            self.in_tx.add(mid)
        self._count("published")

    def confirm(self, mid: int) -> None:
        if self.alarm and mid in self.held:
            raise Violation("alarm-bypassed", f"message {mid} confirmed from a publisher blocked by the memory alarm")
        self.confirmed.add(mid)
        pub = self.published[mid]
        if pub.priority is not None and mid not in self.delivered:
            self.waiting[mid] = (pub.priority, self.step)
        self._count("confirmed")

    def committing(self, mids: list[int]) -> None:
        """The commit of a transaction was sent: its messages may be delivered from now on."""
        self.in_tx.difference_update(mids)

    def rolled_back_tx(self, mids: list[int]) -> None:
        self.in_tx.difference_update(mids)
        self.rolled_back.update(mids)
        for mid in mids:
            self.live.pop(mid, None)
        self._count("rolled-back")

    # -- consuming ---------------------------------------------------------------------------------
    def deliver(self, queue: str, body: bytes, redelivered: bool, stream_offset: int | None = None,
                last_offset: int | None = None, *, now: float = 0.0, headers: dict[str, Any] | None = None) -> int:
        """Check one delivery; returns its message id. ``last_offset``: the stream offset this
        consumer saw before (None: its first delivery)."""
        mid = mid_of(body)
        if mid is None or mid not in self.published:
            raise Violation("corrupt-delivery", f"{queue}: a body that was never published: {body[:60]!r}")
        pub = self.published[mid]
        if queue == pub.dead_to and queue != pub.queue:
            _check_death(mid, pub.queue, headers or {})
        elif pub.queue != queue:
            raise Violation("misrouted", f"message {mid} of {pub.queue} delivered from {queue}")
        if mid in self.rolled_back:
            raise Violation("rolled-back-delivered", f"{queue}: message {mid} of a rolled-back transaction")
        if mid in self.in_tx:
            raise Violation("uncommitted-delivered", f"{queue}: message {mid} before its transaction's commit")
        if pub.not_before is not None and now < pub.not_before:
            raise Violation("delivered-early", f"{queue}: message {mid} at {now}, delayed until {pub.not_before}")
        repeat = self.may_repeat(mid)  # then a new copy of it: its earlier copy's ack does not cover it
        if mid in self.acked_durable and not repeat:
            raise Violation("acked-redelivered", f"{queue}: message {mid} delivered again after its ack was durable")
        if mid in self.acked and not repeat:
            raise Violation("acked-redelivered", f"{queue}: message {mid} delivered again after its ack")
        self._count("delivered")
        if stream_offset is not None:
            self._stream(queue, mid, stream_offset, last_offset)
        elif mid not in self.delivered:
            if pub.priority is not None:
                self._priority(queue, mid, pub.priority)
            # a delayed message is released when due, a dead one when it dies: no publish order
            if pub.not_before is None and queue == pub.queue and not repeat:
                key = (queue, pub.publisher, pub.priority)
                last = self.fifo.get(key, 0)
                if mid < last:
                    raise Violation("fifo", f"{queue}: message {mid} of {pub.publisher} first-delivered after {last}")
                self.fifo[key] = mid
            # (a redelivery flag on a first delivery is allowed: RabbitMQ errs that way too)
        self.delivered.add(mid)
        return mid

    def _priority(self, queue: str, mid: int, priority: int) -> None:
        self.waiting.pop(mid, None)
        for other, (p, step) in self.waiting.items():
            if p > priority and step < self.step:
                raise Violation("priority", f"{queue}: message {mid} (priority {priority}) first-delivered while "
                                            f"{other} (priority {p}, confirmed at step {step}) waited")

    def _stream(self, queue: str, mid: int, offset: int, last: int | None) -> None:
        seen = self.offsets.setdefault(offset, mid)
        if seen != mid:
            raise Violation("stream-offset-changed", f"{queue}: offset {offset} held {seen}, now {mid}")
        at = self.stream_mids.setdefault(mid, offset)
        if at != offset:
            raise Violation("dedup", f"{queue}: message {mid} appended twice (offsets {at} and {offset})")
        if last is not None and offset != last + 1:
            raise Violation("stream-gap", f"{queue}: offset {offset} after {last}")

    def settle(self, mid: int, sure: bool) -> None:
        if sure:
            if not self.may_repeat(mid):  # (else another copy may still be about)
                self.live.pop(mid, None)
            self.settled.add(mid)
            self.acked.add(mid)
        else:
            self.maybe_settled.add(mid)
        self._count("settled")

    # -- faults ------------------------------------------------------------------------------------
    def journal_synced(self, now: float) -> None:
        """The journal was fsynced (or rewritten): every ack so far is durable."""
        self.acked_durable |= self.acked
        self.acked.clear()
        self.deleted_durable |= self.deleted
        self.deleted.clear()

    def queue_deleted(self, name: str) -> None:
        self.deleted.add(name)

    def unhold(self, publisher: str) -> None:
        """The publisher's blocked connection is gone: what it resends on a new one may go through."""
        self.held = {mid: p for mid, p in self.held.items() if p != publisher}

    def alarm_set(self, on: bool) -> None:
        self.alarm = on
        if not on:
            self.held.clear()

    def power_lost(self, now: float, media: bool = False, final: bool = False) -> None:
        """Acks since the last journal fsync may be lost: those messages may come back (a damaged
        disk may bring back any), and so may queues deleted since."""
        if not final:
            self.cuts.append(now)
        moved = {mid for mid, pub in self.published.items()
                 if (pub.not_before is not None or pub.dead_to is not None) and mid not in self.rolled_back}
        for mid in (self.acked | self.acked_durable if media else self.acked) | moved:
            self.live[mid] = len(body_for(mid))
        self.acked.clear()
        self.deleted.clear()
        if media:
            self.acked_durable.clear()
            self.deleted_durable.clear()
            self.waiting.clear()  # a confirmed message may be gone with the damage
            self.stream_mids.clear()  # a cut stream tail: a resend is appended again, rightly

    def disk_full(self, now: float) -> None:
        """A full disk refuses writes, a moved message's source removal among them (it is not
        retried: the move is at least once, as across a power cut), so count it like a cut."""
        self.cuts.append(now)

    def repeats(self, mid: int) -> int:
        """How many extra copies of ``mid`` the queues may hold: a moved message (released by the
        delayed exchange, at least once: it leaves its holder only once its copy is durable; or
        dead-lettered, where a power cut between the copy and the removal may keep both) may be
        moved again after a power cut: one more copy per power cut, or full disk, since it was published."""
        pub = self.published[mid]
        if pub.not_before is None and pub.dead_to is None:
            return 0
        return sum(1 for cut in self.cuts if cut >= pub.at)

    def may_repeat(self, mid: int) -> bool:
        return self.repeats(mid) > 0

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

    def check_final(self, now: float, present: list[int], reported: bool, unanswered: int,
                    dead_dropped: bool = False) -> None:
        """``present``: the message ids drained from every queue (a dead-lettered message counts
        in its dead-letter queue): each at most once. ``dead_dropped``: the broker reported a
        dead-lettered copy it could not store (dead-lettering is at most once)."""
        seen: set[int] = set()
        for mid in present:
            # a damaged journal loses removals: a message may come back beside its dead-lettered copy
            damaged = self.media_faults or self.truncated
            if mid in seen and not damaged and not self.may_repeat(mid):
                raise Violation("duplicate", f"message {mid} is in the queues twice after recovery")
            seen.add(mid)
        # dead-lettering is at most once (RabbitMQ's default): a copy may be lost on a full disk or
        # with a power cut before its sync (or, the removal lost, repeated)
        missing = sorted(mid for mid in self.required(now) - seen
                         if not ((dead_dropped or self.may_repeat(mid)) and self.published[mid].dead_to is not None))
        if missing and not self.truncated and not (self.media_faults and reported):
            why = "after a media fault the store did not report" if self.media_faults else "lost"
            raise Violation("confirmed-lost", f"{len(missing)} confirmed message(s) {why}: {missing[:10]}")
        if unanswered:
            raise Violation("no-answer", f"{unanswered} publish(es) never confirmed, nacked or closed")
