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
    }
    assert set(frames) == set(TABLES)
    index = render(frames, tmp_path, "test source", "Europe/Paris")
    page = index.read_text()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["bytes_per_second.png", "latency.png", "messages_per_second.png", "redeliveries.png",
                    "routing_keys.png", "sizes.png"]
    assert all(f'<img src="{png}"' in page for png in pngs)
    assert "test source" in page and page.count("<table") == len(TABLES)
