"""The report's plots without Spark: rates zero-filled per second, busy names first and the rest
summed, all-zero and empty tables drawn as a note rather than an empty frame."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("spark_available")  # pandas and matplotlib come with the spark extra


def _rates(rows: list[tuple[int, str, str, int]]):
    import pandas as pd

    return pd.DataFrame([(pd.Timestamp("2026-01-01 12:00:00") + pd.Timedelta(seconds=s), kind, name, n, n * 100)
                         for s, kind, name, n in rows], columns=["second", "kind", "name", "messages", "bytes"])


def _backlog(rows: list[tuple[int, str, int, int]]):
    import pandas as pd

    return pd.DataFrame([(pd.Timestamp("2026-01-01 12:00:00") + pd.Timedelta(seconds=s), queue, peak, end)
                         for s, queue, peak, end in rows], columns=["second", "queue", "peak", "end"])


def test_per_second_fills_idle_seconds_and_sums_the_quiet_names() -> None:
    from pipeline.report import TOP_SERIES, _per_second

    names = [f"q{i}" for i in range(TOP_SERIES + 3)]
    rows = [(0, "deliver", name, 100 - i) for i, name in enumerate(names)] + [(3, "deliver", "q0", 7)]
    wide = _per_second(_rates(rows), "messages")
    assert len(wide) == 4  # seconds 0..3, the idle ones as 0
    assert list(wide["q0"]) == [100, 0, 0, 7]
    assert list(wide.columns) == [*names[:TOP_SERIES], "3 others"]
    assert wide["3 others"].iloc[0] == sum(100 - i for i in range(TOP_SERIES, TOP_SERIES + 3))


def test_render_writes_every_plot_for_zero_and_empty_tables(tmp_path: Path) -> None:
    import pandas as pd

    from pipeline.analytics import TABLES
    from pipeline.report import render

    frames = {
        "rates": _rates([(0, "publish", "amq.topic", 5), (2, "deliver", "orders", 5)]),
        "sizes": pd.DataFrame({"bytes_up_to": [256], "messages": [5]}),
        "latency": pd.DataFrame({"queue": ["orders"], "deliveries": [5], "p50": [0.0], "p90": [0.0],
                                 "p99": [0.0], "max": [0.0]}),
        "redeliveries": pd.DataFrame({"queue": ["orders"], "deliveries": [5], "redeliveries": [0],
                                      "dead_letters": [0]}),
        "routing_keys": pd.DataFrame({"routing_key": pd.Series([], dtype=str), "messages": pd.Series([], dtype=int)}),
        "consumers": pd.DataFrame({"queue": ["orders"], "consumer": ["c1 channel 1"], "deliveries": [5],
                                   "p50": [0.0], "p90": [0.0], "p99": [0.0], "max": [0.0]}),
        "backlog": _backlog([(0, "orders", 5, 5), (2, "orders", 5, 0)]),
        "unroutable": pd.DataFrame({"exchange": pd.Series([], dtype=str), "routing_key": pd.Series([], dtype=str),
                                    "messages": pd.Series([], dtype=int)}),
    }
    assert set(frames) == set(TABLES)
    index = render(frames, tmp_path, "test source", "Europe/Paris")
    page = index.read_text()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["backlog.png", "bytes_per_second.png", "latency.png", "messages_per_second.png",
                    "redeliveries.png", "routing_keys.png", "sizes.png", "unroutable.png"]
    assert all(f'<img src="{png}"' in page for png in pngs)
    assert "test source" in page and page.count("<table") == len(TABLES)
    assert "log scale" not in page  # small spreads stay linear
    assert "none: every publish reached a queue" in page


def test_log_scale_only_past_a_hundredfold_spread() -> None:
    from pipeline.report import LOG_SPREAD, log_spread

    assert log_spread([0, 1, LOG_SPREAD]) is None  # zeros are not the smallest: no finite spread
    assert log_spread([0, 2, 500]) == 250.0
    assert log_spread([7]) is None and log_spread([]) is None


def test_backlog_keeps_the_last_count_through_quiet_seconds_and_ranks_by_peak() -> None:
    from pipeline.report import _backlog_per_second

    wide = _backlog_per_second(_backlog([(0, "big", 900, 900), (3, "big", 900, 0), (1, "small", 4, 3)]))
    assert list(wide.columns) == ["big", "small"]
    assert list(wide["big"]) == [900, 900, 900, 900]  # seconds 1 and 2 keep 900 (no change)
    assert list(wide["small"]) == [0, 4, 3, 3]


def test_one_slow_queue_turns_its_plots_logarithmic_and_leads_the_summary(tmp_path: Path) -> None:
    import pandas as pd

    from pipeline.findings import findings
    from pipeline.report import render

    frames = {
        "rates": _rates([(0, "publish", "amq.topic", 5000), (0, "deliver", "slow", 4000), (0, "deliver", "fast", 10)]),
        "sizes": pd.DataFrame({"bytes_up_to": [256], "messages": [5]}),
        "latency": pd.DataFrame({"queue": ["fast", "slow"], "deliveries": [10, 4000], "p50": [2.0, 900.0],
                                 "p90": [3.0, 2500.0], "p99": [4.0, 3000.0], "max": [5.0, 3100.0]}),
        "redeliveries": pd.DataFrame({"queue": ["fast", "retry", "slow"], "deliveries": [10, 8, 4000],
                                      "redeliveries": [0, 0, 7], "dead_letters": [0, 8, 2]}),
        "routing_keys": pd.DataFrame({"routing_key": ["a"], "messages": [5]}),
        "consumers": pd.DataFrame({"queue": ["slow", "fast"], "consumer": ["c2 channel 1", ""],
                                   "deliveries": [4000, 10], "p50": [900.0, 2.0], "p90": [2500.0, 3.0],
                                   "p99": [3000.0, 4.0], "max": [3100.0, 5.0]}),
        "backlog": _backlog([(0, "slow", 3000, 2000), (1, "slow", 2000, 0), (0, "fast", 2, 0)]),
        "unroutable": pd.DataFrame({"exchange": ["amq.direct", "orders"], "routing_key": ["nowhere", "eu"],
                                    "messages": [7, 3]}),
    }
    slow, backlog, dead, unroutable = findings(frames)
    assert slow.values == [3000.0, 4.0] and slow.lines[0].startswith("slow <- c2 channel 1: p99 3,000 ms")
    assert "a consumer the trace does not name" in slow.lines[1]
    assert backlog.values == [3000, 2] and backlog.lines[0] == "slow: peak 3,000 messages at 12:00:00, 0 at the end of the trace"
    assert dead.title == "Dead letters: 10" and dead.values == [8, 2]
    assert unroutable.title == "Unroutable publishes: 10 reached no queue" and unroutable.values == [7, 3]
    page = render(frames, tmp_path, "test source").read_text()
    summary = page[page.index('id="summary"'):page.index("<h2>Messages per second")]
    assert [summary.index(t) for t in ("Slowest", "Largest backlogs", "Dead letters", "Unroutable")] == sorted(
        summary.index(t) for t in ("Slowest", "Largest backlogs", "Dead letters", "Unroutable"))
    assert "exchange amq.direct, routing key &#x27;nowhere&#x27;: 7" in summary
    scaled = {h.split("</h2>")[0] for h in page.split("<h2>") if '<p class="scale">' in h and "log scale" in h}
    # latency 4 ms vs 3,000, backlog 2 vs 3,000, deliveries 10 vs 4,000: logarithmic; the rest is not
    assert scaled == {"Messages per second", "Bytes per second", "Backlog over time", "Publish to deliver latency"}
    assert "deliver: log scale: the largest value is 400x the smallest" in page  # 4,000 vs 10 per second
