"""The analytics report: PNG plots (matplotlib, Agg backend) and one self-contained index.html."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from .analytics import TABLES
from .findings import findings

__all__ = ["render", "log_spread", "LOG_SPREAD"]


#: lines drawn per panel of a rates plot; the other names are summed into one line
TOP_SERIES = 8
#: a value axis goes logarithmic when its largest value is more than this many times its smallest
#: positive one: on a linear axis one slow queue would flatten the rest to the baseline
LOG_SPREAD = 100.0


def log_spread(values: Any) -> float | None:
    """The largest positive value over the smallest when that exceeds LOG_SPREAD, else None."""
    positive = [float(v) for v in values if v == v and v > 0]  # v == v: not NaN
    if len(positive) < 2:
        return None
    spread = max(positive) / min(positive)
    return spread if spread > LOG_SPREAD else None


def _scale(ax: Any, values: Any, horizontal: bool = False) -> str:
    """Make the value axis logarithmic when the values' spread asks for it; returns the caption
    saying so (or ""). symlog: zero stays drawable (linear below 1)."""
    spread = log_spread(values)
    if spread is None:
        return ""
    (ax.set_xscale if horizontal else ax.set_yscale)("symlog", linthresh=1)
    get, put = (ax.get_xlabel, ax.set_xlabel) if horizontal else (ax.get_ylabel, ax.set_ylabel)
    put(f"{get()} (log scale)")  # the picture says it too, when it travels without the page
    return f"log scale: the largest value is {spread:,.0f}x the smallest"


def _figure(rows: int = 1, width: float = 9.0, height: float = 3.6) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    return plt.subplots(rows, 1, figsize=(width, height * rows), dpi=100, sharex=True, squeeze=False)


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555")


def _empty(ax: Any, what: str) -> None:
    _note(ax, f"no {what} in this trace")
    ax.set_axis_off()


def _top_series(wide: Any, rank: Any) -> Any:
    """The TOP_SERIES columns of ``wide`` ranking highest in ``rank``, the rest summed as one."""
    order = list(rank.sort_values(ascending=False, kind="stable").index)
    top, rest = order[:TOP_SERIES], order[TOP_SERIES:]
    shown = wide[top]
    if rest:
        shown = shown.assign(**{f"{len(rest)} others": wide[rest].sum(axis=1)})
    return shown


def _per_second(df: Any, column: str) -> Any:
    """Seconds x names, every second of the span (a second without traffic is 0, not a gap in the
    line), the busiest names first and the rest summed as "others"."""
    import pandas as pd

    wide = df.pivot_table(index="second", columns="name", values=column, aggfunc="sum", fill_value=0)
    wide = wide.reindex(pd.date_range(wide.index.min(), wide.index.max(), freq="1s"), fill_value=0)
    return _top_series(wide, wide.sum())


def _lines(ax: Any, wide: Any, ylabel: str, timezone: str) -> str:
    """One line per column of ``wide`` (seconds x names) on ``ax``; returns the scale's caption."""
    from matplotlib.dates import DateFormatter

    for name, series in wide.items():
        ax.plot(series.index, series.to_numpy(), marker=".", markersize=3, label=str(name))
    ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    note = _scale(ax, wide.max())  # the spread between the lines' peaks
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
    ax.set_xlabel(f"time ({timezone})")
    ax.tick_params(axis="x", labelbottom=True)
    return note


def _rates(df: Any, column: str, out: Path, timezone: str) -> tuple[str, str]:
    from matplotlib.ticker import EngFormatter

    fig, axes = _figure(rows=2, height=3.0)
    panels = (("publish", "published, per exchange"), ("deliver", "delivered, per queue"))
    notes = []
    for ax, (kind, title) in zip(axes[:, 0], panels, strict=True):
        ax.set_title(f"{column} per second {title}")
        part = df[df["kind"] == kind]
        if part.empty:
            _empty(ax, f"{kind} records")
            continue
        note = _lines(ax, _per_second(part, column), "bytes / s" if column == "bytes" else "messages / s", timezone)
        if note:
            notes.append(f"{kind}: {note}")
        if column == "bytes":
            ax.yaxis.set_major_formatter(EngFormatter(unit="B"))
    return _save(fig, out / f"{column}_per_second.png"), "; ".join(notes)


def _backlog_per_second(df: Any) -> Any:
    """Seconds x queues of each second's peak backlog, every second of the span (a second without
    a change keeps the previous second's end), the largest peaks first, the rest summed."""
    import pandas as pd

    peak = df.pivot_table(index="second", columns="queue", values="peak", aggfunc="max")
    end = df.pivot_table(index="second", columns="queue", values="end", aggfunc="last")
    span = pd.date_range(peak.index.min(), peak.index.max(), freq="1s")
    end = end.reindex(span).ffill().fillna(0)
    wide = peak.reindex(span).fillna(end)
    return _top_series(wide, wide.max())


def _backlog(df: Any, out: Path, timezone: str) -> tuple[str, str]:
    fig, axes = _figure()
    ax = axes[0, 0]
    ax.set_title("messages in each queue (routed minus first deliveries), peak of each second")
    note = ""
    if df.empty:
        _empty(ax, "queued messages")
    else:
        note = _lines(ax, _backlog_per_second(df), "messages", timezone)
    return _save(fig, out / "backlog.png"), note


def _bars(labels: list[str], series: dict[str, list[float]], title: str, ylabel: str, xlabel: str, path: Path,
          horizontal: bool = False, all_zero: str = "all zero") -> tuple[str, str]:
    fig, axes = _figure()
    ax = axes[0, 0]
    note = ""
    if not labels:
        _empty(ax, xlabel)
    else:
        n = len(series)
        width = 0.8 / n
        for i, (label, values) in enumerate(series.items()):
            pos = [j + i * width for j in range(len(labels))]
            (ax.barh if horizontal else ax.bar)(pos, values, width, label=label)
        ticks = [j + width * (n - 1) / 2 for j in range(len(labels))]
        if horizontal:
            ax.set_yticks(ticks, labels, fontsize="small")
            ax.invert_yaxis()
            ax.set_xlabel(ylabel)
            ax.set_ylabel(xlabel)
            ax.set_xlim(left=0)
        else:
            tilt = len(labels) > 3  # long lists of names only fit slanted
            ax.set_xticks(ticks, labels, rotation=30 if tilt else 0, ha="right" if tilt else "center",
                          fontsize="small")
            ax.set_ylabel(ylabel)
            ax.set_xlabel(xlabel)
            ax.set_ylim(bottom=0)
        note = _scale(ax, [v for values in series.values() for v in values], horizontal)
        if not any(v for values in series.values() for v in values):
            # zero-height bars draw nothing: say so rather than leave an empty frame
            (ax.set_xlim if horizontal else ax.set_ylim)(0, 1)
            _note(ax, all_zero)
        if n > 1:
            ax.legend(fontsize="small")
    ax.set_title(title)
    return _save(fig, path), note


def _summary(frames: dict[str, Any]) -> str:
    items = []
    for f in findings(frames):
        body = ("<ol>" + "".join(f"<li>{html.escape(line)}</li>" for line in f.lines) + "</ol>" if f.lines
                else f"<p>{html.escape(f.none)}</p>")
        items.append(f'<div class="finding"><h3>{html.escape(f.title)}</h3>{body}</div>')
    return f'<section id="summary"><h2>Summary, worst first</h2>{"".join(items)}</section>'


def render(frames: dict[str, Any], out: Path, source: str, timezone: str = "UTC") -> Path:
    """Write the plots and ``index.html`` for ``frames`` (pandas DataFrames named as in TABLES);
    ``timezone`` is the one the frames' timestamps are in (Spark's session time zone)."""
    out.mkdir(parents=True, exist_ok=True)
    rates, sizes, lat = frames["rates"], frames["sizes"], frames["latency"]
    red, keys = frames["redeliveries"], frames["routing_keys"]
    unroutable = frames["unroutable"].head(TOP_SERIES * 2)  # the whole table is in the tables section
    plots = [
        ("Messages per second", _rates(rates, "messages", out, timezone)),
        ("Bytes per second", _rates(rates, "bytes", out, timezone)),
        ("Backlog over time", _backlog(frames["backlog"], out, timezone)),
        ("Message sizes", _bars([f"<= {b}" for b in sizes["bytes_up_to"]], {"messages": list(sizes["messages"])},
                                "published messages by size", "messages", "body size (bytes, power-of-two bucket)",
                                out / "sizes.png")),
        ("Publish to deliver latency", _bars(
            list(lat["queue"]), {p: list(lat[p]) for p in ("p50", "p90", "p99")},
            "publish -> deliver latency percentiles per queue", "milliseconds", "queue", out / "latency.png",
            all_zero="every delivery within the millisecond of its publish (the trace's clock is in ms)")),
        ("Redeliveries and dead letters", _bars(
            list(red["queue"]), {"redeliveries": list(red["redeliveries"]), "dead letters": list(red["dead_letters"])},
            "redeliveries and dead letters per queue", "messages", "queue", out / "redeliveries.png",
            all_zero="no redeliveries and no dead letters in this trace")),
        ("Unroutable publishes", _bars(
            [f"{x} / {k}" for x, k in zip(unroutable["exchange"], unroutable["routing_key"], strict=True)],
            {"messages": list(unroutable["messages"])},
            "publishes that reached no queue, per exchange / routing key", "messages", "exchange / routing key",
            out / "unroutable.png", horizontal=True)),
        ("Top routing keys", _bars(list(keys["routing_key"].astype(str)), {"messages": list(keys["messages"])},
                                   "top routing keys of published messages", "messages", "routing key",
                                   out / "routing_keys.png", horizontal=True)),
    ]
    sections = []
    for title, (png, note) in plots:
        caption = f'<p class="scale">{html.escape(note)}</p>' if note else ""
        sections.append(f'<section><h2>{html.escape(title)}</h2>{caption}'
                        f'<img src="{png}" alt="{html.escape(title)}"></section>')
    tables = []
    for name, caption in TABLES.items():
        df = frames[name]
        shown = df.head(50).to_html(index=False, border=0, classes="data")
        tables.append(f'<section><h2>Table {name}</h2><p>{html.escape(caption)}; Parquet: '
                      f'<code>tables/{name}.parquet</code> ({len(df)} rows)</p>{shown}</section>')
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sansmq traffic report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1000px; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
#summary {{ border: 1px solid #ccc; padding: 0 1em; background: #fafafa; }}
#summary h3 {{ margin: 0.6em 0 0.2em; font-size: 1em; }}
p.scale {{ color: #555; font-style: italic; }}
table.data {{ border-collapse: collapse; font-size: 0.85em; }}
table.data td, table.data th {{ padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }}
</style></head><body>
<h1>sansmq traffic report</h1>
<p>Source: <code>{html.escape(source)}</code></p>
{_summary(frames)}
{''.join(sections)}
{''.join(tables)}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page)
    return index
