"""The stream log contract, on every store (memory/FakeStore, segment files, PostgreSQL): offsets,
timestamps, reads bounded by count and bytes, chunks and ``last``, segment-wise retention, consumer
offset tracking and producer deduplication across reopen and retention, committed-only durability,
and resolving ``x-stream-offset`` specs on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from streamtest_helpers import STREAM_KINDS, StreamStores, smsg

from amqpproto import BasicProperties
from amqpproto.spec import encode_properties
from engine._props import props_to_headers
from engine._raw_message import RawMessage
from engine.store import QueueDef
from engine.streams import OffsetSpec, StreamSettings, parse_stream_offset, resolve_offset
from engine.streams.filtering import StreamFilter

T0 = 1_700_000_000.0


@pytest.fixture(params=STREAM_KINDS)
def stores(request: pytest.FixtureRequest, tmp_path) -> StreamStores:
    if request.param == "postgres":
        return StreamStores("postgres", request.getfixturevalue("pg_dsn"))
    return StreamStores(request.param, str(tmp_path / "data"))


def fill(log, n: int, start: int = 0, t: float = T0, step: float = 0.001, **kw) -> list[int]:
    return [log.append(smsg(start + i, **kw), t + i * step) for i in range(n)]


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def test_append_assigns_offsets_and_reads_round_trip(stores) -> None:
    s = stores.open()
    s.add_queue(QueueDef("/", "s", args={"x-queue-type": "stream"}))
    log = stores.log(s)
    assert (log.first, log.tail, log.last_chunk) == (0, 0, -1)
    assert log.read(0) == []
    assert fill(log, 10) == list(range(10))
    got = log.read(0)
    assert offsets(got) == list(range(10))
    assert [r.timestamp for r in got] == [int(T0 * 1000) + i for i in range(10)]
    assert [(r.message.id, r.message.headers, r.message.body) for r in got[:2]] == [
        (0, {"i": 0}, b"m0"), (1, {"i": 1}, b"m1")]
    assert offsets(log.read(4, max_count=3)) == [4, 5, 6]
    assert offsets(log.read(8, max_count=100)) == [8, 9]
    assert log.read(10) == [] and log.read(99) == []
    assert offsets(log.read(2, upto=5)) == [2, 3, 4]
    s.sync(1)
    s = stores.reopen(s)
    log = stores.log(s)
    assert (log.first, log.tail, log.committed) == (0, 10, 10)
    assert [(r.offset, r.message.body) for r in log.read(7)] == [(7, b"m7"), (8, b"m8"), (9, b"m9")]
    assert log.append(smsg(10), T0 + 1) == 10
    s.close()


def test_reads_are_bounded_by_bytes_but_return_at_least_one(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    for i in range(6):
        log.append(smsg(i, b"x" * 1000), T0)
    assert offsets(log.read(0, max_bytes=2500)) == [0, 1]
    assert offsets(log.read(0, max_bytes=10)) == [0]
    assert offsets(log.read(3, max_bytes=10_000)) == [3, 4, 5]
    s.close()


def test_chunks_end_at_sync_and_last_is_the_last_chunk_start(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    fill(log, 3)
    assert log.last_chunk == 0
    assert log.committed == 0
    s.sync(1)
    assert log.committed == 3
    fill(log, 2, start=3)
    assert (log.last_chunk, log.committed) == (3, 3)
    assert resolve_offset(parse_stream_offset("last"), log, T0) == 3
    s.sync(2)
    s = stores.reopen(s)
    log = stores.log(s)
    assert log.last_chunk == 3
    fill(log, 1, start=5)
    assert log.last_chunk == 5
    s.close()


def test_unsynced_records_and_tracking_may_be_lost_but_nothing_synced(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    fill(log, 4)
    log.store_offset("c", 2, T0)
    s.sync(1)
    fill(log, 3, start=4)
    log.store_offset("c", 6, T0)
    if stores.kind == "memory":  # FakeStore.crash keeps only synced state
        s = stores.reopen(s, sync=False)
        log = stores.log(s)
        assert (log.tail, log.stored_offset("c")) == (4, 2)
    else:  # close() syncs: everything survives
        s = stores.reopen(s, sync=False)
        log = stores.log(s)
        assert (log.tail, log.stored_offset("c")) == (7, 6)
    assert offsets(log.read(0)) == list(range(log.tail))
    s.close()


def test_timestamps_are_monotonic_and_offset_at_finds_the_first_at_or_after(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    times = [T0, T0, T0 + 1, T0 + 0.5, T0 + 2, T0 + 10]  # the clock stepped back once
    for i, t in enumerate(times):
        log.append(smsg(i), t)
    ms = int(T0 * 1000)
    assert [r.timestamp for r in log.read(0)] == [ms, ms, ms + 1000, ms + 1000, ms + 2000, ms + 10_000]
    assert log.offset_at(0) == 0
    assert log.offset_at(ms + 1) == 2
    assert log.offset_at(ms + 1000) == 2
    assert log.offset_at(ms + 2000) == 4
    assert log.offset_at(ms + 2001) == 5
    assert log.offset_at(ms + 10_001) == 6  # after everything: the tail
    when = datetime.fromtimestamp(T0 + 2, UTC)
    assert resolve_offset(parse_stream_offset(when), log, T0) == 4
    assert resolve_offset(parse_stream_offset("9s"), log, T0 + 11) == 4
    assert resolve_offset(parse_stream_offset("1h"), log, T0 + 11) == 0
    s.close()


def test_resolving_specs(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    assert [resolve_offset(parse_stream_offset(v), log, T0) for v in ("first", "last", "next", 5)] == [0, 0, 0, 0]
    fill(log, 5)
    s.sync(1)
    fill(log, 5, start=5)
    assert resolve_offset(OffsetSpec("first"), log, T0) == 0
    assert resolve_offset(OffsetSpec("last"), log, T0) == 5
    assert resolve_offset(OffsetSpec("next"), log, T0) == 10
    assert resolve_offset(OffsetSpec("offset", 7), log, T0) == 7
    assert resolve_offset(OffsetSpec("offset", 70), log, T0) == 10
    s.close()


def test_rollover_and_retention_by_bytes_remove_whole_old_segments(stores) -> None:
    s = stores.open()
    settings = StreamSettings(max_bytes=6000, segment_bytes=2000)
    log = stores.log(s, settings)
    for i in range(40):
        log.append(smsg(i, b"x" * 300), T0 + i)
        assert log.size_bytes <= 6000 + 2000  # at most one segment over the limit, briefly
    assert log.segment_count >= 3
    assert log.first > 0 and log.tail == 40
    first = log.first
    assert offsets(log.read(0, max_count=1)) == [first]  # below first: starts at first
    assert resolve_offset(OffsetSpec("offset", 0), log, T0) == first
    assert resolve_offset(OffsetSpec("first"), log, T0) == first
    assert offsets(log.read(first, max_count=1000)) == list(range(first, 40))
    s.sync(1)
    s = stores.reopen(s)
    log = stores.log(s, settings)
    assert (log.first, log.tail) == (first, 40)
    assert offsets(log.read(0, max_count=1000)) == list(range(first, 40))
    s.close()


def test_retention_never_removes_the_active_segment(stores) -> None:
    s = stores.open()
    log = stores.log(s, StreamSettings(max_bytes=0, segment_bytes=1 << 20))
    fill(log, 20)
    assert log.apply_retention(T0 + 10**6) == 0
    assert (log.first, log.tail) == (0, 20)
    s.close()


def test_retention_by_age_is_segment_wise(stores) -> None:
    s = stores.open()
    settings = StreamSettings(max_age_ms=60_000, segment_bytes=1500)
    log = stores.log(s, settings)
    for i in range(30):  # one message per second
        log.append(smsg(i, b"y" * 300), T0 + i)
    segs = log.segment_count
    assert segs >= 4
    assert log.apply_retention(T0 + 30) == 0  # nothing older than a minute yet
    removed = log.apply_retention(T0 + 80)  # messages before T0 + 20 are too old
    assert removed > 0 and log.first == removed
    kept = log.read(0, max_count=100)
    # whole segments: everything kept is in a segment whose newest message is young enough, and the
    # oldest kept message may itself be older than a minute
    assert kept[-1].offset == 29 and kept[0].offset == log.first
    before = log.first
    assert log.apply_retention(T0 + 10**6) > 0  # all but the active segment
    assert log.first > before
    assert log.tail == 30 and log.segment_count == 1
    s.sync(1)
    s = stores.reopen(s)
    log = stores.log(s, settings)
    assert log.tail == 30 and log.segment_count == 1
    s.close()


def test_tracking_and_dedup_survive_reopen_and_retention(stores) -> None:
    s = stores.open()
    settings = StreamSettings(max_bytes=3000, segment_bytes=1000)
    log = stores.log(s, settings)
    assert log.stored_offset("reader") is None
    assert log.should_append("p", 0)
    assert log.append(smsg(0), T0, producer="p", publishing_id=5) == 0
    assert not log.should_append("p", 5) and not log.should_append("p", 4) and log.should_append("p", 6)
    assert log.append(smsg(1), T0, producer="p", publishing_id=5) is None  # duplicate: not appended
    assert log.tail == 1
    log.store_offset("reader", 0, T0)
    log.store_offset("other", 0, T0)
    s.sync(1)
    for i in range(1, 60):  # many segments come and go
        assert log.append(smsg(i, b"z" * 200), T0 + i, producer="q", publishing_id=i) == i
    log.store_offset("reader", 42, T0 + 60)
    assert log.first > 0
    s.sync(2)
    s = stores.reopen(s)
    log = stores.log(s, settings)
    assert log.first > 0
    assert (log.stored_offset("reader"), log.stored_offset("other"), log.stored_offset("x")) == (42, 0, None)
    assert (log.last_publishing_id("p"), log.last_publishing_id("q")) == (5, 59)
    assert not log.should_append("q", 59) and log.should_append("q", 60)
    assert log.consumers() == {"reader": 42, "other": 0}
    s.close()


def test_streams_are_separate_and_deleting_the_queue_deletes_the_stream(stores) -> None:
    s = stores.open()
    s.add_queue(QueueDef("/", "a", args={"x-queue-type": "stream"}))
    s.add_queue(QueueDef("v", "a", args={"x-queue-type": "stream"}))
    a, b = s.stream("/", "a"), s.stream("v", "a")
    assert s.stream("/", "a") is a
    fill(a, 3)
    fill(b, 1)
    a.store_offset("c", 1, T0)
    s.sync(1)
    s.delete_queue("/", "a")
    s.sync(2)
    s = stores.reopen(s)
    a, b = s.stream("/", "a"), s.stream("v", "a")
    assert (a.tail, a.stored_offset("c"), b.tail) == (0, None, 1)
    s.close()


def test_a_message_stored_with_its_amqp_properties_reads_back_as_its_headers(stores) -> None:
    """A ``RawMessage`` (the stream append's fast path: the publish's property bytes kept) reads back,
    before and after a restart, with the headers the general path makes of those properties, its
    dedup id counted and its filter value indexed."""
    props = BasicProperties(delivery_mode=2, content_type="text/plain", timestamp=1_700_000_000,
                            headers={"x-producer": "p", "x-publishing-id": 2**40, "x-stream-filter-value": "eu",
                                     "n": 7})
    raw = encode_properties(props)
    want = props_to_headers(props)
    s = stores.open()
    s.add_queue(QueueDef("/", "s", args={"x-queue-type": "stream"}))
    log = stores.log(s)
    msg = RawMessage(5, "", "s", raw, b"body", True, "p", 2**40, "eu")
    assert log.append(msg, T0, "p", 2**40) == 0
    assert log.append(RawMessage(6, "", "s", raw, b"again", True, "p", 2**40, "eu"), T0, "p", 2**40) is None
    for _ in range(2):
        [rec] = log.read(0)
        assert (rec.message.id, rec.message.headers, rec.message.body, rec.message.persistent) == (5, want, b"body", True)
        assert log.last_publishing_id("p") == 2**40
        assert log.read_filtered(0, StreamFilter(frozenset({"eu"})))[0][0].offset == 0
        assert log.read_filtered(0, StreamFilter(frozenset({"us"})))[0] == []
        s = stores.reopen(s)
        log = stores.log(s)


def test_raw_reads_are_the_stored_bytes_of_what_read_decodes(stores) -> None:
    """``read_raw`` (what stream deliveries are made from) gives the records ``read`` gives, each
    message as its stored bytes; written and synced records, unsynced ones and across reopen."""
    from engine.records import _decode_message

    def decoded(log, *args, **kw) -> list:
        return [(o, ts, _decode_message(p)) for o, ts, p in log.read_raw(*args, **kw)]

    def same(log, *args, **kw) -> None:
        want = [(r.offset, r.timestamp, r.message) for r in log.read(*args, **kw)]
        got = decoded(log, *args, **kw)
        assert [(o, ts, m.id, m.exchange, m.routing_key, m.headers, m.body, m.persistent) for o, ts, m in got] == [
            (o, ts, m.id, m.exchange, m.routing_key, m.headers, m.body, m.persistent) for o, ts, m in want]

    s = stores.open()
    s.add_queue(QueueDef("/", "s", args={"x-queue-type": "stream"}))
    log = stores.log(s)
    assert log.read_raw(0) == []
    fill(log, 6)
    s.sync(1)
    fill(log, 4, start=6)  # not synced yet: read from the store's buffers
    for args, kw in (((0,), {}), ((3,), {"max_count": 4}), ((2,), {"upto": 8}), ((7,), {}), ((10,), {})):
        same(log, *args, **kw)
    assert [o for o, _, _ in log.read_raw(0)] == list(range(10))
    s.sync(2)
    s = stores.reopen(s)
    log = stores.log(s)
    same(log, 0)
    s.close()


def _raw_run(ids: list[tuple[str | None, int | None, str | None]]) -> list[RawMessage]:
    """RawMessages of a publisher's run: (producer, publishing id, filter value) each."""
    out = []
    for i, (producer, pid, value) in enumerate(ids):
        headers: dict = {"n": i}
        if producer is not None:
            headers.update({"x-producer": producer, "x-publishing-id": pid})
        if value is not None:
            headers["x-stream-filter-value"] = value
        raw = encode_properties(BasicProperties(delivery_mode=2, headers=headers))
        out.append(RawMessage(i, "", "s", raw, b"r%d" % i * 20, True, producer, pid, value))
    return out


def _state(log) -> tuple:
    recs = [(r.offset, r.timestamp, r.message.id, r.message.headers, r.message.body) for r in log.read(0, 1000)]
    eu = [r.offset for r in log.read_filtered(0, StreamFilter(frozenset({"eu"})), 1000)[0]]
    return recs, eu, log.first, log.tail, log.last_chunk, log.producers()


def test_a_run_appended_in_one_call_is_its_messages_appended_one_by_one(stores) -> None:
    """``append_run`` (a publisher's run in one call): duplicates inside the run and of earlier
    appends dropped, each producer's last id kept, filters indexed, segments rolling over and
    retention removing them mid-run: the same log as ``append`` of each, before and after reopen."""
    ids = [("p", 1, None), ("p", 2, "eu"), ("p", 2, "eu"), (None, None, "us"), ("q", 7, None), ("p", 1, None),
           ("p", 3, "eu"), ("q", 7, "eu"), ("q", 8, None)] * 3 + [("p", 9, None), (None, None, "eu")] * 5
    settings = StreamSettings(max_bytes=500, segment_bytes=300)
    s = stores.open()
    for name in ("run", "one"):
        s.add_queue(QueueDef("/", name, args={"x-queue-type": "stream"}))
    run, one = stores.log(s, settings, "run"), stores.log(s, settings, "one")
    run.append(_raw_run([("p", 2, None)])[0], T0, "p", 2)  # an earlier append the run repeats
    one.append(_raw_run([("p", 2, None)])[0], T0, "p", 2)
    msgs = _raw_run(ids)
    run.append_run(msgs, T0 + 1)
    for m in msgs:
        one.append(m, T0 + 1, m.producer, m.publishing_id)
    assert run.first > 0 and len(run) < len(msgs)  # segments rolled and retention dropped some mid-run
    assert _state(run) == _state(one)
    s = stores.reopen(s)
    assert _state(stores.log(s, settings, "run")) == _state(stores.log(s, settings, "one"))
    s.close()


def test_a_store_error_part_way_through_a_run_says_how_many_it_took() -> None:
    from engine.store import StoreError
    from engine.streams import RunInterrupted
    from engine.testing import FakeStore

    s = FakeStore()
    log = s.stream("/", "s")
    log.append(_raw_run([("p", 5, None)])[0], T0, "p", 5)
    msgs = _raw_run([("p", 4, None), ("p", 6, None), ("p", 7, None)])
    s.fail_next_write(1)  # the first write of the run: its second message (the first is a duplicate)
    with pytest.raises(RunInterrupted, match="injected") as caught:
        log.append_run(msgs, T0)
    assert isinstance(caught.value, StoreError) and caught.value.taken == 1
    assert (log.tail, log.last_publishing_id("p")) == (1, 5)
    log.append_run(msgs[1:], T0)
    assert (log.tail, log.last_publishing_id("p")) == (3, 7)
