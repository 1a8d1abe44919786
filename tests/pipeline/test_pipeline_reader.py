"""The reader's hot path without Spark: ``read_range`` against a stand-in broker sending what
sansmq sends, every row compared with the message it came from; frames split anywhere, bodies over
frame_max, nested headers, ranges that start inside a chunk."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_standin import FakeStreamBroker

from amqpproto import spec

pytestmark = pytest.mark.usefixtures("spark_available")  # pyarrow and pyspark's data source API

COLUMN_NAMES = ("stream", "offset", "timestamp", "routing_key", "headers", "content_type", "body", "filter")

header_values = st.one_of(st.text(max_size=8), st.integers(-2**40, 2**40), st.booleans(),
                          st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=4), max_size=2))
messages = st.lists(st.tuples(
    st.text(max_size=12),
    st.one_of(st.none(), st.sampled_from(["text/plain", "application/json"])),
    st.one_of(st.none(), st.integers(0, 2**32)),
    st.dictionaries(st.sampled_from(["kind", "n", "nested", "x-stream-offset-not", "x-stream-filter-value"]), header_values, max_size=3),
    st.binary(max_size=9000)), min_size=1, max_size=40)


def _read(broker: FakeStreamBroker, start: int, end: int, batch_rows: int,
          columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    from pipeline.options import ReadOptions
    from pipeline.source import StreamRange, read_range

    opts = ReadOptions.parse({"url": broker.url, "stream": "s", "batchRows": str(batch_rows), "prefetch": "7"})
    batches = list(read_range(replace(opts, columns=columns), StreamRange("s", start, end)))
    assert all(b.num_rows <= batch_rows for b in batches)
    return [row for b in batches for row in b.to_pylist()]


def _expected(offset: int, msg: tuple[Any, ...]) -> dict[str, Any]:
    from pipeline.source import flat_headers

    key, content_type, ts, headers, body = msg
    flat = {"x-stream-offset": str(offset), **dict(flat_headers(headers))}
    return {"stream": "s", "offset": offset, "routing_key": key, "content_type": content_type, "body": body,
            "timestamp": None if ts is None else datetime.fromtimestamp(ts, UTC), "headers": flat,
            "filter": flat.get("x-stream-filter-value")}


def _props(content_type: str | None, ts: int | None, headers: dict[str, Any]) -> spec.BasicProperties:
    return spec.BasicProperties(content_type=content_type, delivery_mode=2, headers=headers,
                                timestamp=None if ts is None else datetime.fromtimestamp(ts, UTC))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=messages, data=st.data())
def test_rows_are_the_messages_of_the_range(msgs: list[tuple[Any, ...]], data: st.DataObject,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import sansmq_client.sync

    # tiny reads split frames anywhere; a 4 KiB frame_max splits bodies over several frames
    monkeypatch.setattr(sansmq_client.sync, "_RECV", data.draw(st.sampled_from([7, 101, 1 << 18])))
    broker = FakeStreamBroker([(k, _props(ct, ts, h), b) for k, ct, ts, h, b in msgs], frame_max=4096).start()
    try:
        start = data.draw(st.integers(0, len(msgs) - 1))
        end = data.draw(st.integers(start + 1, len(msgs)))
        # the source's columns, or those of a narrower schema in any order (``.schema(...)``)
        columns = data.draw(st.none() | st.lists(st.sampled_from(COLUMN_NAMES), min_size=1, unique=True).map(tuple))
        rows = _read(broker, start, end, data.draw(st.integers(1, 50)), columns)
    finally:
        broker.close()
    for row in rows:
        if "headers" in row:
            row["headers"] = dict(row["headers"])
        if row.get("timestamp") is not None:
            row["timestamp"] = row["timestamp"].astimezone(UTC)
    names = columns or COLUMN_NAMES
    assert [list(row) for row in rows] == [list(names)] * len(rows)
    assert rows == [{k: _expected(i, msgs[i])[k] for k in names} for i in range(start, end)]


def test_a_nested_x_stream_offset_does_not_confuse_the_offset() -> None:
    headers = {"properties": {"headers": {"x-stream-offset": 99}}, "kind": "trace"}
    broker = FakeStreamBroker([("k", _props(None, None, headers), b"m")] * 3).start()
    try:
        rows = _read(broker, 0, 3, 10)
    finally:
        broker.close()
    assert [r["offset"] for r in rows] == [0, 1, 2]
    assert dict(rows[1]["headers"]) == {"x-stream-offset": "1", "properties.headers.x-stream-offset": "99",
                                        "kind": "trace"}


def _read_with(broker: FakeStreamBroker, start: int, end: int, **options: str) -> list[int]:
    from pipeline.options import ReadOptions
    from pipeline.source import StreamRange, read_range

    opts = ReadOptions.parse({"url": broker.url, "stream": "s", "batchRows": "4", **options})
    return [o for b in read_range(opts, StreamRange("s", start, end)) for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize("gone", ["start", "middle"])
def test_offsets_removed_before_a_task_reads_them_fail_the_task(gone: str, caplog: pytest.LogCaptureFixture) -> None:
    """Retention removed offsets of the task's range (at its start: the consumer is handed the first
    kept one; in its middle: a slow reader overtaken): the task fails naming the stream and the
    offsets, or with failOnDataLoss=false reads the rest and warns with the running count."""
    from pipeline.dataloss import DataLossError

    msgs = [("k", _props(None, None, {}), b"%d" % i) for i in range(30)]
    lost = {"start": dict(first=12), "middle": dict(gone=range(15, 18))}[gone]
    broker = FakeStreamBroker(msgs, **lost).start()  # type: ignore[arg-type]
    try:
        with pytest.raises(DataLossError) as e:
            _read_with(broker, 5, 25)
        assert {"start": "stream 's': offsets 5..11 (7) were removed (retention) before they were read; the "
                         "stream's first offset is now 12",
                "middle": "stream 's': 3 offsets of [5, 25) were removed (retention) while the range was read"
                }[gone] in str(e.value)
        caplog.set_level("WARNING", "pipeline.dataloss")
        got = _read_with(broker, 5, 25, failOnDataLoss="false")
    finally:
        broker.close()
    kept = {"start": range(12, 25), "middle": [o for o in range(5, 25) if o not in range(15, 18)]}[gone]
    assert got == list(kept)
    assert [r.getMessage().endswith(f"skipped (failOnDataLoss=false): {n} offsets of 's' skipped so far")
            for r, n in zip(caplog.records, [7 if gone == "start" else 3], strict=True)] == [True]


def test_ranges_read_one_after_another_share_one_connection_and_a_broken_off_read_closes_it() -> None:
    """A worker's tasks reuse one connection (before, each range opened its own): the range's
    consumer is cancelled when it is read and the next range consumes on the same channel. A read
    the task stops early (Spark closes the iterator) leaves its channel unsettled: that connection
    is closed, never handed to the next task."""
    from pipeline.pool import EXECUTOR_POOL

    msgs = [("k", _props(None, None, {}), b"%d" % i) for i in range(40)]
    broker = FakeStreamBroker(msgs).start()
    try:
        assert _read_with(broker, 0, 10) == list(range(10))
        assert _read_with(broker, 10, 40) == list(range(10, 40))
        assert (broker.connections, broker.cancels) == (1, 2)

        from pipeline.options import ReadOptions
        from pipeline.source import StreamRange, read_range

        opts = ReadOptions.parse({"url": broker.url, "stream": "s", "batchRows": "4"})
        partial = read_range(opts, StreamRange("s", 0, 40))
        assert next(partial).column("offset").to_pylist() == [0, 1, 2, 3]
        partial.close()
        assert _read_with(broker, 5, 9) == [5, 6, 7, 8]
        assert broker.connections == 2  # the broken-off read's connection was closed, not reused
    finally:
        EXECUTOR_POOL.close()
        broker.close()
