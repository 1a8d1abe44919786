"""Stream filtering in the log, on every store (memory/FakeStore, segment files, PostgreSQL): a
filtered read skips the chunks whose filter rules a match out without decoding them (counted),
delivers exactly the matching messages, and the chunk filters survive a restart, retention, and a
stream written before filtering existed."""

from __future__ import annotations

import os

import pytest
from streamtest_helpers import STREAM_KINDS, StreamStores, smsg

from engine.streams import StreamSettings
from engine.streams import _files as files
from engine.streams.filtering import GROUP_MAX, GROUP_MIN, ChunkFilters, StreamFilter

T0 = 1_700_000_000.0
EU, US = StreamFilter(frozenset({"eu"})), StreamFilter(frozenset({"us"}))


@pytest.fixture(params=STREAM_KINDS)
def stores(request: pytest.FixtureRequest, tmp_path) -> StreamStores:
    if request.param == "postgres":
        return StreamStores("postgres", request.getfixturevalue("pg_dsn"))
    return StreamStores(request.param, str(tmp_path / "data"))


def chunked(store, log, chunks: list[list[str | None]]) -> None:
    """Append one chunk per list (a sync closes each), a message per filter value (None: unfiltered)."""
    i = log.tail
    for values in chunks:
        for v in values:
            headers = {} if v is None else {"x-stream-filter-value": v}
            log.append(smsg(i, **headers), T0 + i / 1000)
            i += 1
        store.sync(1)


def read_all(log, filt: StreamFilter, count: int = 1000) -> list[int]:
    out: list[int] = []
    offset = log.first
    while offset < log.tail:
        batch, offset = log.read_filtered(offset, filt, count)
        out += [r.offset for r in batch]
    return out


REGIONS = [f"r{i}" for i in range(20)]


C = GROUP_MIN  # messages per chunk: each chunk gets a filter of its own


def span(chunk: int, n: int = C) -> list[int]:
    return list(range(chunk * C, chunk * C + n))


def test_a_filtered_read_skips_chunks_without_decoding_them_and_is_exact(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    # 20 chunks, one region each; chunk 5 also holds two unfiltered messages
    chunks: list[list[str | None]] = [[r] * C for r in REGIONS]
    chunks[5] = ["r5"] * (C - 2) + [None, None]
    chunked(s, log, chunks)
    r3 = StreamFilter(frozenset({"r3"}))
    assert read_all(log, r3) == span(3)
    assert log.filter_decoded == C  # only chunk 3 was read
    assert log.chunk_filters.skipped >= 19
    both = StreamFilter(frozenset({"r3", "r7"}), match_unfiltered=True)
    log.filter_decoded = 0
    assert read_all(log, both) == span(3) + [6 * C - 2, 6 * C - 1] + span(7)
    assert log.filter_decoded == 3 * C
    assert read_all(log, StreamFilter(frozenset({"nowhere"}))) == []
    # the reader's offset moves past what was skipped even when nothing matched
    assert log.read_filtered(0, StreamFilter(frozenset({"nowhere"})), 10) == ([], log.tail)
    # count-bounded: the next offset is right after the last one returned
    got, after = log.read_filtered(0, both, 3)
    assert [r.offset for r in got] == span(3, 3) and after == 3 * C + 3
    s = stores.reopen(s)
    log = stores.log(s)
    assert read_all(log, r3) == span(3)
    assert log.filter_decoded == C  # the filters came back with the log: still only chunk 3
    chunked(s, log, [["r3"] * C])  # appends after a restart are covered too
    assert read_all(log, r3) == span(3) + span(20)
    s.close()


def test_small_chunks_share_a_filter_and_big_ones_are_split() -> None:
    filters = ChunkFilters(16)
    for i in range(100):  # a chunk per message (a sync each)
        filters.add_value(i, True, f"v{i}")
    assert filters.firsts == [0, GROUP_MIN, 2 * GROUP_MIN, 3 * GROUP_MIN]
    filters.add_value(100, False, "x", segment_start=True)  # a new segment: a new group at once
    for i in range(101, 101 + GROUP_MAX):  # one big chunk
        filters.add_value(i, False, "big")
    assert filters.firsts[-2:] == [100, 100 + GROUP_MAX]


def test_retention_keeps_the_filters_aligned_with_the_log(stores) -> None:
    s = stores.open()
    settings = StreamSettings(max_bytes=3000, segment_bytes=1000)
    log = stores.log(s, settings)
    chunked(s, log, [[r] * 4 for r in REGIONS])
    assert log.first > 0
    want = [o for o in range(log.first, log.tail) if REGIONS[o // 4] == "r19"]
    assert want and read_all(log, StreamFilter(frozenset({"r19"}))) == want
    assert log.chunk_filters.firsts[0] == log.first  # groups start at segment starts
    s = stores.reopen(s)
    log = stores.log(s, settings)
    assert read_all(log, StreamFilter(frozenset({"r19"}))) == want
    s.close()


def test_a_chunk_of_many_values_still_answers_exactly() -> None:
    filters = ChunkFilters(16)
    values = [f"v{i}" for i in range(200)]  # far more than 16 bytes can tell apart
    for i, v in enumerate(values):
        filters.add_value(i, i == 0, v)
    # a saturated filter matches everything: never a false negative
    assert filters.span(0, 200, StreamFilter(frozenset({"v150"}))) == (0, 200)
    assert filters.span(0, 200, StreamFilter(frozenset({"absent"}))) == (0, 200)


def test_offsets_the_filters_do_not_cover_are_read_message_by_message() -> None:
    filters = ChunkFilters(16)
    for i in range(10, 20):
        filters.add_value(i, False, "a" if i < 15 else "b", segment_start=i % 5 == 0)
    want_b = StreamFilter(frozenset({"b"}))
    assert filters.span(0, 30, want_b) == (0, 10)  # below the first chunk: not covered
    assert filters.span(10, 30, want_b) == (15, 20)
    assert filters.skipped == 1
    assert filters.span(20, 30, want_b) == (20, 30)  # past the covered end (a follower's new records)


def test_a_segment_stream_written_before_filtering_is_read_and_its_old_sidecars_are_rescanned(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    stores = StreamStores("segment", str(tmp_path / "data"))
    s = stores.open()
    settings = StreamSettings(segment_bytes=600)
    log = stores.log(s, settings)
    # records as the old format wrote them: no filter field, no F_FILTER flag
    monkeypatch.setattr(files, "filter_field", lambda value: b"")
    monkeypatch.setattr(files, "NO_FILTER", b"")
    monkeypatch.setattr(files, "RECORD_FLAGS", 0)
    chunked(s, log, [["eu"] * 5, [None] * 5, ["us"] * 5])
    s.sync(1)
    s.close()
    sidecars = [os.path.join(d, n) for d, _, names in os.walk(tmp_path) for n in names if n.endswith(".idx")]
    assert sidecars
    for path in sidecars:  # the sidecars as the old format wrote them: not used, the segment is scanned
        with open(path, "r+b") as f:
            f.write(b"SMQSIDX1")
    monkeypatch.undo()
    s = stores.open()
    log = stores.log(s, settings)
    assert [r.offset for r in log.read(0, max_count=100)] == list(range(15))
    # old records have no indexed value: their chunks are read, and the messages' own headers decide
    assert read_all(log, EU) == [0, 1, 2, 3, 4]
    assert read_all(log, StreamFilter(frozenset(), match_unfiltered=True)) == [5, 6, 7, 8, 9]
    s.close()


def test_a_postgres_stream_written_before_filtering_is_read_message_by_message(pg_dsn) -> None:
    stores = StreamStores("postgres", pg_dsn)
    s = stores.open()
    log = stores.log(s)
    chunked(s, log, [["eu"] * 5, ["us"] * 5])
    assert log.chunk_filters.firsts == [0]
    with s._sync_lock:
        s._conn.execute(f'DELETE FROM "{s.schema}".stream_chunks')  # as before filtering existed
    s = stores.reopen(s)
    log = stores.log(s)
    assert log.chunk_filters.firsts == []
    assert read_all(log, US) == [5, 6, 7, 8, 9]
    assert log.filter_decoded == 10
    chunked(s, log, [["eu"] * C, ["us"] * C])  # new chunks are covered from here on
    log.filter_decoded = 0
    assert read_all(log, US) == [5, 6, 7, 8, 9] + list(range(10 + C, 10 + 2 * C))
    assert log.filter_decoded == 10 + C  # the old offsets, and the new "us" chunk only
    s.close()
