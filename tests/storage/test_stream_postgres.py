"""Stream logs on PostgreSQL specifics: reads spanning committed rows and pending appends, a commit
failing while the server is unreachable (appends refused, nothing lost, the retry commits the
backlog), and replaying a batch whose commit outcome is unknown."""

from __future__ import annotations

import pytest
from streamtest_helpers import smsg
from test_postgres_store import FlakyStore, wait_until

from engine.postgres_store import PostgresStore
from engine.store import StoreError
from engine.streams import StreamSettings

T0 = 1_700_000_000.0


def bodies(log, start: int = 0) -> list[bytes]:
    return [r.message.body for r in log.read(start, max_count=1000)]


def test_reads_span_committed_rows_and_pending_appends(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    log = s.stream("/", "s")
    for i in range(3):
        log.append(smsg(i), T0 + i)
    s.sync(1)
    for i in range(3, 5):
        log.append(smsg(i), T0 + i)
    assert bodies(log) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [r.offset for r in log.read(1, max_count=3)] == [1, 2, 3]
    assert log.offset_at(int((T0 + 1) * 1000)) == 1 and log.offset_at(int((T0 + 4) * 1000)) == 4
    s.close()


def test_unreachable_server_refuses_appends_then_commits_the_backlog(pg_dsn: str) -> None:
    s = FlakyStore(pg_dsn, retry_interval=0.05)
    log = s.stream("/", "s", StreamSettings(segment_bytes=200, max_bytes=10_000))
    for i in range(3):
        log.append(smsg(i), T0, producer="p", publishing_id=i)
    s.sync(1)
    log.append(smsg(3), T0, producer="p", publishing_id=3)
    log.store_offset("c", 2, T0)
    s.down = True
    s._drop_connection()
    with pytest.raises(StoreError, match="cannot commit"):
        s.sync(2)
    assert (log.committed, log.tail) == (3, 4)
    with pytest.raises(StoreError, match="unavailable"):
        log.append(smsg(4), T0)
    assert log.tail == 4 and bodies(log, 3) == [b"m3"]  # pending appends are read from memory
    with pytest.raises(StoreError, match="stream read failed"):  # committed ones need the server
        log.read(0)
    s.down = False
    wait_until(lambda: s._failed is None)
    assert log.committed == 4
    log.append(smsg(4), T0, producer="p", publishing_id=4)
    s.sync(3)
    s.close()
    s = PostgresStore(pg_dsn)
    log = s.stream("/", "s")
    assert bodies(log) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert (log.stored_offset("c"), log.last_publishing_id("p"), log.last_chunk) == (2, 4, 4)
    s.close()


def test_a_batch_replayed_after_an_unknown_commit_outcome_changes_nothing(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    log = s.stream("/", "s", StreamSettings(segment_bytes=300, max_bytes=600))
    for i in range(10):
        log.append(smsg(i), T0, producer="p", publishing_id=i)
    log.store_offset("c", 5, T0)
    first = log.first
    assert first > 0
    batch = list(s._batch)
    s.sync(1)
    with s._sync_lock:
        s._commit(batch)  # as if the first COMMIT's answer had been lost
    s.close()
    s = PostgresStore(pg_dsn)
    log = s.stream("/", "s")
    assert (log.first, log.tail) == (first, 10)
    assert [r.offset for r in log.read(0)] == list(range(first, 10))
    assert (log.stored_offset("c"), log.last_publishing_id("p")) == (5, 9)
    s.close()
