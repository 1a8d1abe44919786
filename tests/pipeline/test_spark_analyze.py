"""`sansmq analyze` on a trace stream of real traffic: Parquet tables that add up, PNG plots, and an
index.html that headless Chromium opens with every plot loaded (a screenshot is kept in the test's
tmp dir and, if SANSMQ_ARTIFACTS is set, copied there)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pipelinekit import Broker, TrafficRecorder

from sansmq_client import sync
from servers.cli import main as servers_main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
from browserkit import CHROMIUM, NODE_DIR, browser_skip_reason  # noqa: E402

MESSAGES = 200


def _open_in_chromium(index: Path, screenshot: Path) -> dict:
    reason = browser_skip_reason()
    if reason is not None:
        if os.environ.get("SANSMQ_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    proc = subprocess.run(["node", str(NODE_DIR / "snapshot_page.mjs"), index.as_uri(), str(screenshot),
                           "--chromium", CHROMIUM], cwd=NODE_DIR, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


class _Borrowed:
    """The suite's session lent to a command: everything but stop()."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)

    def stop(self) -> None:
        pass


def test_analyze_report_from_a_traffic_stream(spark, broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace = broker.stream("pipe-trace")
    rec = TrafficRecorder(broker, trace)
    counts = rec.run(MESSAGES)
    rec.flush()
    assert counts["redelivered"] > 0 and counts["dead_letters"] == MESSAGES // 5

    out = tmp_path / "report"
    # the command as `sansmq analyze` runs it, in this process on the suite's one Spark session (a
    # second JVM would cost more than the job); the session outlives the command's stop()
    import pipeline.session

    monkeypatch.setattr(pipeline.session, "make_session", lambda *a, **kw: _Borrowed(spark))
    assert servers_main(["analyze", "--url", broker.url, "--stream", trace, "--out", str(out),
                         "--master", "local[2]"]) == 0
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out

    tables = {p.stem: spark.read.parquet(str(p)).toPandas() for p in (out / "tables").iterdir()}
    assert set(tables) == {"rates", "sizes", "latency", "redeliveries", "routing_keys", "consumers", "backlog", "unroutable"}
    rates = tables["rates"]
    published = rates[(rates.kind == "publish") & (rates.name == "amq.topic")]
    assert published.messages.sum() == MESSAGES
    assert published.bytes.sum() == sum(16 << (i % 7) for i in range(MESSAGES))
    # the firehose traces client publishes only; a recorder also wrote the dead letters' republication
    republished = 0 if broker.firehose else counts["dead_letters"]
    assert tables["sizes"].messages.sum() == MESSAGES + republished
    red = tables["redeliveries"].set_index("queue")
    q = rec.queues
    assert red.loc[q["orders"], "redeliveries"] == counts["redelivered"]
    assert red.loc[q["retry"], "dead_letters"] == counts["dead_letters"]
    lat = tables["latency"].set_index("queue")
    assert set(lat.index) >= {q["orders"], q["billing"], q["retry"]}
    assert (lat.p50 <= lat.p99).all() and (lat.p50 >= 0).all()
    keys = tables["routing_keys"]
    t = rec.tag  # three order regions, billing, retry, and the dead letters republished to parked
    expected_keys = {f"orders.{t}.eu", f"orders.{t}.us", f"orders.{t}.asia", f"billing.{t}", f"retry.{t}"}
    if not broker.firehose:
        expected_keys.add(q["parked"])
    assert dict(zip(keys.routing_key, keys.messages, strict=True)) == dict.fromkeys(expected_keys, MESSAGES // 5)

    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 8 and all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    result = _open_in_chromium(out / "index.html", tmp_path / "report.png")
    assert result["title"] == "sansmq traffic report"
    assert sorted(result["images"]) == pngs  # every plot decoded by the browser
    assert result["tables"] == 8
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    artifacts = os.environ.get("SANSMQ_ARTIFACTS")
    if artifacts:  # kept for a person to look at, as the admin page's screenshots
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "report.png", Path(artifacts) / "analyze-report.png")


def _operator_traffic(broker: Broker, trace: str, tag: str) -> dict[str, str]:
    """Traffic with one of each problem, traced into ``trace``: a backlog of 1,000 (and one of 3),
    a consumer taking 0.1 s per message, 4 dead letters, 10 publishes that reach no queue."""
    import time

    q = {name: f"{name}-{tag}" for name in ("big", "small", "slow", "retry", "parked")}
    nowhere = f"nobody-binds-{tag}"
    with sync.connect(broker.url) as c:
        c.bind_queue(trace, "amq.rabbitmq.trace", "#")
        try:
            for name in ("big", "small", "slow", "parked"):
                c.declare_queue(q[name])
            c.declare_queue(q["retry"], arguments={"x-dead-letter-exchange": "",
                                                   "x-dead-letter-routing-key": q["parked"]})
            c.declare_exchange(nowhere, "direct")
            for name, n in (("big", 1000), ("small", 3), ("slow", 20), ("retry", 4)):
                for i in range(n):  # distinct bodies: the analysis pairs a delivery with its publish by body
                    c.publish(q[name], f"{name}-{tag}-{i}".encode(), exchange="")
            for i in range(7):
                c.publish(f"no-such-key-{tag}", f"lost-{tag}-{i}".encode(), exchange="amq.direct")
            for i in range(3):
                c.publish("eu", f"unbound-{tag}-{i}".encode(), exchange=nowhere)
            # (each publish returned confirmed: every backlog is complete before any consumer starts)
            for name in ("big", "small", "retry", "parked"):
                sub = c.subscribe(q[name], prefetch=100)
                while (d := sub.get(1.0)) is not None:
                    if name == "retry":
                        c.reject(d, requeue=False)
                    else:
                        c.ack(d)
                sub.cancel()
            sub = c.subscribe(q["slow"], prefetch=1)
            while (d := sub.get(1.0)) is not None:
                time.sleep(0.1)  # the slow consumer: the 20th message waits for 19 of these
                c.ack(d)
            sub.cancel()
        finally:
            c.unbind_queue(trace, "amq.rabbitmq.trace", "#")
    return {**q, "nowhere": nowhere}


def test_analyze_summary_names_what_is_wrong_worst_first(spark, broker: Broker, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary header, backlog over time, unroutable publishes and log scales, on the broker's
    own firehose with numbers the traffic fixes."""
    if not broker.firehose:
        pytest.skip("RabbitMQ 3.10 appends no firehose records to a stream queue (see the README)")
    trace = broker.stream("pipe-trace-summary")
    tag = trace.rsplit("-", 2)[-2] + "-" + trace.rsplit("-", 1)[-1]
    q = _operator_traffic(broker, trace, tag)
    import pipeline.session

    monkeypatch.setattr(pipeline.session, "make_session", lambda *a, **kw: _Borrowed(spark))
    out = tmp_path / "report"
    assert servers_main(["analyze", "--url", broker.url, "--stream", trace, "--out", str(out)]) == 0
    tables = {p.stem: spark.read.parquet(str(p)).toPandas() for p in (out / "tables").iterdir()}

    unroutable = tables["unroutable"]
    assert sorted(zip(unroutable.exchange, unroutable.routing_key, unroutable.messages, strict=True)) == [
        ("amq.direct", f"no-such-key-{tag}", 7), (q["nowhere"], "eu", 3)]
    backlog = tables["backlog"].groupby("queue").agg(peak=("peak", "max"))
    assert backlog.peak.to_dict() == {q["big"]: 1000, q["small"]: 3, q["slow"]: 20, q["retry"]: 4}
    last = tables["backlog"].sort_values("second").groupby("queue").end.last()
    assert (last == 0).all()  # every queue drained
    consumers = tables["consumers"]
    slowest = consumers.iloc[0]  # worst first
    assert slowest.queue == q["slow"] and slowest.deliveries == 20 and slowest.p99 >= 1500
    assert re.fullmatch(r"127\.0\.0\.1:\d+ channel \d+", slowest.consumer)  # sansmq_client: a channel each

    page = (out / "index.html").read_text()
    summary = page[page.index('id="summary"'):page.index("<h2>Messages per second")]
    titles = ["Slowest consumers", "Largest backlogs", "Dead letters: 4", "Unroutable publishes: 10 reached no queue"]
    assert [summary.index(t) for t in titles] == sorted(summary.index(t) for t in titles)
    assert f"<li>{q['slow']} &lt;- " in summary.split("Largest backlogs")[0]
    assert f"<li>{q['big']}: peak 1,000 messages at " in summary
    assert f"<li>{q['retry']}: 4 dead-lettered" in summary
    assert f"<li>exchange amq.direct, routing key &#x27;no-such-key-{tag}&#x27;: 7</li>" in summary
    backlog_section = page[page.index("<h2>Backlog over time"):page.index("<h2>Message sizes")]
    assert "log scale: the largest value is 333x the smallest" in backlog_section  # 1,000 vs 3
    assert sorted(p.name for p in out.glob("*.png")) == sorted(
        f"{n}.png" for n in ("messages_per_second", "bytes_per_second", "backlog", "sizes", "latency",
                             "redeliveries", "unroutable", "routing_keys"))


def test_backlog_and_unroutable_rules_on_hand_made_trace_rows(spark) -> None:
    """The rules behind the two tables, on rows as the source gives them: an empty ``routed_queues``
    is unroutable, a missing one is unknown (not unroutable); a queue's backlog counts publishes routed
    to it minus first deliveries in trace order; a queue no publish names gets no (negative) backlog."""
    from pipeline.analytics import tables, trace_events

    def row(ms: int, key: str, body: str, **headers: str) -> tuple:
        return (key, {"timestamp_in_ms": str(ms), **headers}, body.encode(), None)

    rows = [row(1000 + i, "publish.orders", f"m{i}", routed_queues='["q1"]', routing_keys='["eu"]')
            for i in range(3)]
    rows += [row(1000, "publish.orders", "lost", routed_queues="[]", routing_keys='["asia"]'),
             row(1001, "publish.amq.default", "relayed", routing_keys='["q9"]'),  # no routed_queues header
             row(1002, "deliver.q1", "m0", redelivered="0"), row(1002, "deliver.q1", "m0", redelivered="1"),
             row(2500, "deliver.q1", "m1", redelivered="0"), row(2600, "deliver.q1", "m2", redelivered="0"),
             row(2600, "deliver.q9", "relayed", redelivered="0")]
    df = spark.createDataFrame(rows, "routing_key string, headers map<string,string>, body binary, timestamp timestamp")
    t = {name: frame.toPandas() for name, frame in tables(trace_events(df)).items()}
    assert list(zip(t["unroutable"].exchange, t["unroutable"].routing_key, t["unroutable"].messages, strict=True)) == [
        ("orders", "asia", 1)]
    backlog = t["backlog"]
    assert list(backlog.queue) == ["q1", "q1"]  # seconds 1 and 2; q9 is named by no publish
    assert list(backlog.peak) == [3, 1] and list(backlog["end"]) == [2, 0]  # the redelivery is no dequeue


def test_analyze_fails_in_one_line_for_a_bad_broker_or_stream(broker: Broker, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "servers", "analyze", "--out", str(tmp_path / "r"), *args],
                              capture_output=True, text=True, timeout=60)

    p = run("--url", "amqp://guest:guest@127.0.0.1:1/%2F")
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        "sansmq analyze: error: could not connect to any of [('127.0.0.1', 1)]: [Errno 111] Connection refused"]
    p = run("--url", broker.url, "--stream", "pipe-no-such-trace")
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
    assert "stream 'pipe-no-such-trace': 404 NOT_FOUND" in p.stderr
    p = run("--url", broker.url, "--starting-offsets", "{bad")
    assert p.returncode == 2 and "sansmq analyze: error:" in p.stderr
    assert not (tmp_path / "r").exists()


def _readme_analytics_commands() -> list[list[str]]:
    """The pipeline page's shell block that ends in `sansmq analyze`, one argv per line (comments and
    redirections dropped)."""
    page = (ROOT / "docs" / "pipeline.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", page, flags=re.S) if "sansmq analyze --url" in b]
    lines = [line.split("#", 1)[0].replace("> /dev/null", "") for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.strip()]


def test_the_readme_analytics_commands_run(spark, broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The README's commands as written, on this suite's broker (its AMQP address added), the trace
    stream under a fresh name; the report counts exactly the traffic the bench runs report."""
    if not broker.firehose:
        pytest.skip("RabbitMQ 3.10 appends no firehose records to a stream queue (see the README)")
    from pipeline.driver import endpoint
    from sansmq_client import sync

    ep = endpoint(broker.url)
    host, port = ep.hosts[0]
    trace = f"readme-trace-{os.getpid()}"
    create, *benches, analyze = _readme_analytics_commands()
    assert [c[1:3] for c in (create, *benches)] == [["streams", "create"]] + [["bench", "-u"], ["bench", "-t"]]
    assert analyze[1] == "analyze" and create[3] == "trace" and analyze[analyze.index("--stream") + 1] == "trace"
    run = [sys.executable, "-m", "servers"]
    created = subprocess.run([*run, *create[1:3], trace, *create[4:], "--amqp", f"{host}:{port}"],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    try:
        # the two bench runs side by side: the test waits for the longer one only
        procs = [subprocess.Popen([*run, *b[1:], "-U", broker.url], stdout=subprocess.PIPE, text=True)
                 for b in benches]
        results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    finally:
        with sync.connect(broker.url) as c:  # the rest of the suite is not traced into it
            c.unbind_queue(trace, "amq.rabbitmq.trace", "#")
    assert all(r["errors"] == [] and r["sent"] > 0 for r in results), results
    queued, fanned = results

    import pipeline.session

    monkeypatch.setattr(pipeline.session, "make_session", lambda *a, **kw: _Borrowed(spark))
    args = analyze[2:]
    args[args.index("--url") + 1], args[args.index("--stream") + 1] = broker.url, trace
    args[args.index("--out") + 1] = str(tmp_path / "report")
    assert servers_main(["analyze", *args]) == 0
    assert "report: " in capsys.readouterr().out
    tables = {p.stem: spark.read.parquet(str(p)).toPandas() for p in (tmp_path / "report" / "tables").iterdir()}
    rates = tables["rates"].groupby(["kind", "name"]).messages.sum().to_dict()
    assert rates[("publish", "amq.default")] == queued["sent"]
    assert rates[("publish", "amq.topic")] == fanned["sent"]
    assert rates[("deliver", "orders")] == queued["received"]
    delivered_fanout = sum(n for (kind, name), n in rates.items() if kind == "deliver" and name.startswith("amq.gen"))
    assert delivered_fanout == fanned["received"] == 2 * fanned["sent"]
    keys = dict(zip(tables["routing_keys"].routing_key, tables["routing_keys"].messages, strict=True))
    assert keys == {"orders": queued["sent"], "news": fanned["sent"]}
    sizes = dict(zip(tables["sizes"].bytes_up_to, tables["sizes"].messages, strict=True))
    bucket = [1 << (int(b[b.index("-s") + 1]) - 1).bit_length() for b in benches]  # the next power of two
    assert sizes == {bucket[0]: queued["sent"], bucket[1]: fanned["sent"]}
    assert len(list((tmp_path / "report").glob("*.png"))) == 8
