"""Spark-free parts of the pipeline: the package never imports the broker, options, offset arithmetic."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.driver import endpoint as parse_url
from pipeline.offsets import MIN_ROWS_PER_TASK, cap_total, default_min_partitions, plan_ranges
from pipeline.options import OptionError, ReadOptions, WriteOptions

SRC = Path(__file__).resolve().parents[2] / "src" / "pipeline"


def _absolute_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
    return names


def test_pipeline_never_imports_the_engine_or_the_servers() -> None:
    """The connector is a client: it must run on Spark executors that have no broker code."""
    files = sorted(SRC.rglob("*.py"))
    assert files
    for path in files:
        for name in _absolute_imports(path):
            assert name.split(".")[0] not in {"engine", "servers", "pika"}, f"{path.name} imports {name}"


def test_the_cluster_link_does_not_import_the_pipeline() -> None:
    """The node-to-node link has its own client (servers/cluster/client.py): a broker without the spark
    extra's code paths must not load the pipeline package."""
    files = sorted((SRC.parent / "servers" / "cluster").rglob("*.py"))
    assert files
    for path in files:
        assert not [n for n in _absolute_imports(path) if n.split(".")[0] == "pipeline"], path.name


def test_parse_url() -> None:
    ep = parse_url("amqp://u%40x:p%2Fw@broker:5673/%2F")
    assert (ep.hosts, ep.user, ep.password, ep.vhost) == ((("broker", 5673),), "u@x", "p/w", "/")
    assert parse_url("amqp://h/v").vhost == "v" and parse_url("amqp://h").vhost == "/"
    with pytest.raises(ValueError, match="amqp:// or amqps://"):
        parse_url("http://h")
    with pytest.raises(ValueError, match="amqp:// or amqps://"):  # sansmq_client's parser, AMQP only
        parse_url("stomp://h")


def test_parse_url_with_tls_and_several_hosts() -> None:
    """RabbitMQ's URI spec: amqps (default port 5671) with its TLS query parameters; a cluster's
    nodes as comma-separated hosts, tried in order."""
    ep = parse_url("amqps://u:p@n1,n2:5700,[::1]:5701/v?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem")
    assert ep.hosts == (("n1", 5671), ("n2", 5700), ("::1", 5701)) and (ep.user, ep.vhost) == ("u", "v")
    assert ep.tls is not None and (ep.tls.cacertfile, ep.tls.certfile, ep.tls.keyfile, ep.tls.verify) == (
        "/ca.pem", "/c.pem", "/k.pem", True)
    tls = parse_url("amqps://h?verify=verify_none&server_name_indication=broker.example").tls
    assert tls is not None and (tls.verify, tls.server_name) == (False, "broker.example")
    assert parse_url("amqp://a:1,b:2").tls is None and parse_url("amqp://a:1,b").hosts == (("a", 1), ("b", 5672))
    for bad, msg in [("amqp://h?cacertfile=/x", "amqps:// and stomps:// only"),
                     ("amqps://h?verify=maybe", "verify_peer"), ("amqps://h?nosuch=5", "unknown URL options"),
                     ("amqp://a,,b", "empty host"), ("amqp://a:99999,b", "bad port"), ("amqp://a:x", "bad port")]:
        with pytest.raises(ValueError, match=msg):
            parse_url(bad)


def test_read_options() -> None:
    o = ReadOptions.parse({"stream": "a,b", "startingOffsets": '{"a": 5}', "maxRecordsPerTrigger": "10"})
    assert o.streams == ("a", "b") and o.starting == {"a": 5} and o.ending == "latest"
    assert o.max_records_per_trigger == 10
    for bad, msg in [({"stream": "a,a"}, "distinct"),
                     ({"stream": "a", "startingOffsets": '{"a": -3}'}, "offsets >= 0"),
                     ({"stream": "a", "startingOffsets": '{"a": true}'}, "offsets >= 0"),
                     ({"stream": "a", "prefetch": "x"}, "prefetch must be an integer"),
                     ({"stream": "a", "url": "amqp://h:99999"}, "bad port")]:
        with pytest.raises(OptionError, match=msg):
            ReadOptions.parse(bad)


def test_write_options() -> None:
    o = WriteOptions.parse({"stream": "out"}, {"body": "binary"})
    assert (o.exchange, o.routing_key, o.target_stream) == ("", "out", "out")
    o = WriteOptions.parse({"exchange": "amq.topic"}, {"body": "string", "routing_key": "string"})
    assert (o.exchange, o.routing_key) == ("amq.topic", None)
    with pytest.raises(OptionError, match="exactly one"):
        WriteOptions.parse({"stream": "a", "exchange": "x"}, {"body": "binary"})
    with pytest.raises(OptionError, match="routingKey"):
        WriteOptions.parse({"exchange": "x"}, {"body": "binary"})


def test_sink_column_types_are_checked() -> None:
    """An integer body used to go out as that many zero bytes."""
    ok = {"body": "string", "headers": "map<string,string>", "content_type": "string", "offset": "bigint"}
    assert WriteOptions.parse({"stream": "a"}, ok).target_stream == "a"  # other columns are not published
    for name, kind, msg in [("body", "int", 'column "body" must be binary or string, not int'),
                            ("headers", "map<string,int>", 'column "headers" must be map<string,string>'),
                            ("routing_key", "binary", 'column "routing_key" must be string, not binary')]:
        with pytest.raises(OptionError, match=msg):
            WriteOptions.parse({"stream": "a"}, {"body": "binary", name: kind})


def test_option_names_are_strict_case_insensitive_and_take_kafkas_aliases() -> None:
    # Spark hands a source its options with lower-cased keys
    o = ReadOptions.parse({"subscribe": "a", "maxoffsetspertrigger": "7", "FAILONDATALOSS": "False"})
    assert (o.streams, o.max_records_per_trigger, o.fail_on_data_loss) == (("a",), 7, False)
    assert ReadOptions.parse({"stream": "a"}).fail_on_data_loss is True
    with pytest.raises(OptionError) as e:
        ReadOptions.parse({"stream": "a", "failOnDataLos": "false"})
    assert str(e.value).startswith("unknown option 'failOnDataLos' for the sansmq source; known options: url, "
                                   "stream, startingOffsets, endingOffsets, failOnDataLoss, ")
    assert "maxOffsetsPerTrigger (= maxRecordsPerTrigger)" in str(e.value)
    with pytest.raises(OptionError, match="given twice"):
        ReadOptions.parse({"stream": "a", "subscribe": "b"})
    with pytest.raises(OptionError, match="must be true or false, got 'yes'"):
        ReadOptions.parse({"stream": "a", "failOnDataLoss": "yes"})
    with pytest.raises(OptionError, match="unknown option 'startingOffsets' for the sansmq sink"):
        WriteOptions.parse({"stream": "a", "startingOffsets": "earliest"}, {"body": "binary"})
    # what Spark adds to a streaming sink's options is not the user's
    assert WriteOptions.parse({"topic": "a", "checkpointlocation": "/x", "queryname": "q"}, {"body": "binary"}).target_stream == "a"


def test_kafkas_rules_for_batch_and_streaming_offsets() -> None:
    for starting in ("latest", '{"a": -1}'):
        with pytest.raises(OptionError, match="startingOffsets cannot be latest"):
            ReadOptions.parse({"stream": "a", "startingOffsets": starting}).for_batch()
    with pytest.raises(OptionError, match="endingOffsets cannot be earliest"):
        ReadOptions.parse({"stream": "a", "endingOffsets": '{"a": -2}'}).for_batch()
    with pytest.raises(OptionError, match="endingOffsets is for batch reads"):
        ReadOptions.parse({"stream": "a", "endingOffsets": "latest"}).for_stream()
    assert ReadOptions.parse({"stream": "a", "startingOffsets": "latest"}).for_stream().starting == "latest"


@given(st.dictionaries(st.sampled_from("abcde"), st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)), min_size=1),
       st.none() | st.integers(1, 10**4), st.none() | st.integers(1, 64))
def test_plan_ranges_covers_each_range_in_order(ranges: dict[str, tuple[int, int]], max_per: int | None,
                                                min_parts: int | None) -> None:
    given = {s: (lo, lo + n) for s, (lo, n) in ranges.items()}
    tasks = plan_ranges(given, max_per, min_parts)
    for s, (lo, hi) in given.items():
        pieces = [(a, b) for t, a, b in tasks if t == s]
        assert sum(b - a for a, b in pieces) == hi - lo
        assert all(a < b for a, b in pieces)
        assert all(p[1] == q[0] for p, q in zip(pieces, pieces[1:], strict=False))
        if pieces:
            assert pieces[0][0] == lo
    if max_per is not None and (min_parts is None or len(tasks) > min_parts):
        assert all(b - a <= max_per for _, a, b in tasks)


def test_plan_ranges_cuts_only_what_the_options_ask_for() -> None:
    """Kafka's rules: one task per stream's range by default (a task costs Spark a start-up, so
    several are never planned where one does); maxRecordsPerPartition caps a task; minPartitions
    cuts the ranges further, in proportion to their length, only if there are fewer tasks."""
    ranges = {"a": (0, 1_000_000), "b": (500, 600), "c": (7, 7)}
    assert plan_ranges(ranges, None, None) == [("a", 0, 1_000_000), ("b", 500, 600)]
    assert plan_ranges(ranges, None, 2) == [("a", 0, 1_000_000), ("b", 500, 600)]  # already 2 tasks
    assert plan_ranges(ranges, None, 4) == [("a", 0, 250_000), ("a", 250_000, 500_000), ("a", 500_000, 750_000),
                                            ("a", 750_000, 1_000_000), ("b", 500, 600)]
    assert plan_ranges(ranges, 400_000, None) == [("a", 0, 333_334), ("a", 333_334, 666_667),
                                                  ("a", 666_667, 1_000_000), ("b", 500, 600)]
    assert plan_ranges({"a": (0, 3)}, None, 10) == [("a", 0, 1), ("a", 1, 2), ("a", 2, 3)]
    assert plan_ranges({}, None, 3) == []


def test_more_ranges_than_tasks_are_grouped_into_balanced_tasks() -> None:
    """A partitioned stream of more partitions than the read is worth tasks: each task reads several
    ranges in turn (rows balanced, longest first), every range in exactly one task, in order."""
    from pipeline.offsets import group_ranges

    parts = [(f"p{i}", 0, n) for i, n in enumerate([50, 10, 40, 30, 20, 60])]
    assert group_ranges(parts, 6) == [[p] for p in parts]
    assert group_ranges(parts, 1) == [parts]
    two = group_ranges(parts, 2)
    assert sorted(t for g in two for t in g) == sorted(parts)
    assert [sum(hi - lo for _, lo, hi in g) for g in two] == [110, 100]  # 60+30+20 | 50+40+10
    assert all(g == sorted(g, key=parts.index) for g in two)


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=30), st.integers(1, 8))
def test_grouped_ranges_cover_every_range_once_and_stay_balanced(sizes: list[int], groups: int) -> None:
    from pipeline.offsets import group_ranges

    parts = [(f"p{i}", 5, 5 + n) for i, n in enumerate(sizes)]
    out = group_ranges(parts, groups)
    assert sorted(t for g in out for t in g) == sorted(parts) and len(out) <= groups and all(out)
    loads = [sum(hi - lo for _, lo, hi in g) for g in out]
    assert max(loads) - min(loads) <= max(sizes)  # greedy longest-first: within one range of even


def test_without_min_partitions_ranges_are_cut_for_the_cores_but_not_below_a_tasks_worth() -> None:
    assert default_min_partitions(10, 8) == 1
    assert default_min_partitions(MIN_ROWS_PER_TASK * 2 - 1, 8) == 1
    assert default_min_partitions(MIN_ROWS_PER_TASK * 2, 8) == 2
    assert default_min_partitions(MIN_ROWS_PER_TASK * 100, 8) == 8
    assert default_min_partitions(MIN_ROWS_PER_TASK * 100, 1) == 1


@given(st.dictionaries(st.sampled_from("abcde"), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1),
       st.integers(1, 3000))
def test_cap_total_takes_at_most_the_limit(ranges: dict[str, tuple[int, int]], limit: int) -> None:
    start = {s: lo for s, (lo, _) in ranges.items()}
    end = {s: lo + n for s, (lo, n) in ranges.items()}
    capped = cap_total(start, end, limit)
    taken = sum(capped[s] - start[s] for s in ranges)
    assert all(start[s] <= capped[s] <= end[s] for s in ranges)
    assert taken == min(limit, sum(end[s] - start[s] for s in ranges))


def test_retries_ride_out_network_failures_only_until_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.retry
    from pipeline.driver import BrokerUnreachable
    from pipeline.retry import with_retries
    from sansmq_client import BrokerClosedConnection, ChannelClosed, ConnectionLost, PublishNacked

    clock = [0.0]
    monkeypatch.setattr(pipeline.retry.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(pipeline.retry.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    calls: list[float] = []

    def flaky(failures: list[BaseException]):
        def work() -> str:
            calls.append(clock[0])
            if failures:
                raise failures.pop(0)
            return "ok"
        return work

    down = [ConnectionLost("closed"), BrokerUnreachable("refused", retriable=True), ConnectionResetError(),
            BrokerClosedConnection(320, "CONNECTION_FORCED - shutdown", "", None),
            PublishNacked("the broker nacked publish #1")]  # a cluster's stream failing over
    assert with_retries(flaky(down), 10.0, "x") == "ok"
    assert [round(b - a, 1) for a, b in zip(calls, calls[1:], strict=False)] == [0.2, 0.4, 0.8, 1.6, 3.2]  # doubling
    for final in (BrokerClosedConnection(403, "ACCESS_REFUSED", "", None), ChannelClosed(404, "NOT_FOUND", "", 1),
                  BrokerUnreachable("403 from the management API"), TimeoutError()):
        calls.clear()
        with pytest.raises(type(final)):
            with_retries(flaky([final]), 10.0, "x")
        assert len(calls) == 1  # an answer from the broker is not retried
    calls.clear()
    clock[0] = began = 0.0
    with pytest.raises(ConnectionLost) as e:
        with_retries(flaky([ConnectionLost("closed") for _ in range(100)]), 3.0, "reading 's'")
    assert calls[-1] - began <= 3.0 and len(calls) == 5 and "reading 's': gave up after retrying for 3s (option retryDeadlineMs)" in e.value.__notes__


def test_time_and_admission_options() -> None:
    o = ReadOptions.parse({"stream": "a,b", "startingOffsetsByTimestamp": '{"a": 1767225600000}',
                           "minOffsetsPerTrigger": "50", "maxTriggerDelay": "500ms"})
    assert (o.starting_times, o.min_records_per_trigger, o.max_trigger_delay) == ({"a": 1767225600000}, 50, 0.5)
    both = ReadOptions.parse({"stream": "a", "startingTimestamp": "7", "startingOffsetsByTimestamp": '{"a": 9}'})
    assert both.starting_times == 7  # startingTimestamp wins, as in Kafka's source
    assert ReadOptions.parse({"stream": "a"}).max_trigger_delay == 900.0  # Kafka's 15m
    for bad, msg in [({"maxTriggerDelay": "15 minutes"}, "duration such as 15m"),
                     ({"maxTriggerDelay": "m"}, "duration"),
                     ({"startingOffsetsByTimestamp": '{"a": -1}'}, "times in ms"),
                     ({"startingOffsetsByTimestamp": "yesterday"}, "times in ms"),
                     ({"startingTimestamp": "-5"}, "startingTimestamp must be >= 0")]:
        with pytest.raises(OptionError, match=msg):
            ReadOptions.parse({"stream": "a", **bad})
    with pytest.raises(OptionError, match=r"minOffsetsPerTrigger \(9\) is above maxOffsetsPerTrigger \(3\)"):
        ReadOptions.parse({"stream": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"}).for_stream()


def test_lag_figures_and_offsets_with_append_times() -> None:
    import json

    from pipeline.identity import join, split
    from pipeline.metrics import source_metrics

    offsets = join({"a": 10, "b": 0}, {"a": 1767225600123, "gone": 5})
    assert offsets == {"a": 10, "b": 0, "@appendTimes": {"a": 1767225600123}}
    assert split(json.loads(json.dumps(offsets))) == ({"a": 10, "b": 0}, {"a": 1767225600123})
    assert split({"a": 10}) == ({"a": 10}, {})  # a checkpoint written before append times were kept
    got = source_metrics({"endOffset": json.dumps(offsets),
                          "latestOffset": json.dumps({"a": 15, "b": 4, "@skippedOffsets": {"a": 3}})})
    assert got == {"offsetsBehindLatest": {"a": 5, "b": 4}, "avgOffsetsBehindLatest": 4.5,
                   "maxOffsetsBehindLatest": 5, "minOffsetsBehindLatest": 4, "latestOffset": {"a": 15, "b": 4},
                   "skippedOffsets": 3}


def test_subscribe_pattern_options() -> None:
    o = ReadOptions.parse({"subscribePattern": "orders-.*", "url": "amqp://u:p@broker.example:5673/v"})
    assert (o.streams, o.pattern, o.management_url) == ((), "orders-.*", "http://broker.example:15672")
    assert ReadOptions.parse({"subscribePattern": "x", "managementUrl": "https://m:1"}).management_url == "https://m:1"
    for bad, msg in [({"subscribePattern": "a", "stream": "b"}, "not both"),
                     ({"subscribePattern": "(unclosed"}, "not a regular expression"),
                     ({"subscribePattern": "a", "managementUrl": "ftp://m"}, "http:// or https://"),
                     ({}, 'option "stream" is required .*, or option "subscribePattern"')]:
        with pytest.raises(OptionError, match=msg):
            ReadOptions.parse(bad)


@pytest.mark.parametrize("content_type, headers", [
    (None, ()),
    ("text/plain", (("kind", "a"), ("x-stream-offset", "5"))),  # the source's annotations are dropped
    (None, (("x-publishing-id", "9"), ("z", "\x0fx-publishing-idl"))),  # the row's own id wins, in its place
])
def test_the_sinks_property_template_is_the_full_encoding(content_type: str | None,
                                                          headers: tuple[tuple[str, str], ...]) -> None:
    """The sink encodes a row's properties once per content type and headers and puts each row's
    publishing id into the bytes: the same bytes as encoding the row's properties in full."""
    from amqpproto import spec
    from pipeline.sink import _ID, _template, publishing_id

    pre, post = _template("producer-1", content_type, headers)
    for batch, row in ((0, 0), (3, 77), (2**20, 2**32 - 2)):
        h: dict[str, object] = {k: v for k, v in headers if not k.startswith("x-stream-")}
        h["x-producer"] = "producer-1"
        h["x-publishing-id"] = publishing_id(batch, row)
        full = spec.encode_properties(spec.BasicProperties(content_type=content_type, headers=h, delivery_mode=2))
        assert pre + _ID.pack(publishing_id(batch, row)) + post == full
