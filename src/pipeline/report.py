"""The analytics report: PNG plots (matplotlib, Agg backend) and one self-contained index.html."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from .analytics import TABLES

__all__ = ["render"]


def _figure(width: float = 9.0, height: float = 3.6) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=100)


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this trace", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _rates(df: Any, column: str, out: Path) -> str:
    fig, ax = _figure()
    if df.empty:
        _empty(ax, "timed records")
    else:
        for (kind, name), g in df.groupby(["kind", "name"]):
            ax.plot(g["second"], g[column], marker=".", label=f"{kind} {name}")
        from matplotlib.dates import DateFormatter

        ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
        ax.set_ylabel(f"{column} / s")
        ax.set_xlabel("time (UTC)")
        ax.legend(fontsize="small", loc="upper left", ncol=2)
        fig.autofmt_xdate()
    ax.set_title(f"{column} per second by exchange (publish) and queue (deliver)")
    return _save(fig, out / f"{column}_per_second.png")


def _bars(labels: list[str], series: dict[str, list[float]], title: str, ylabel: str, path: Path,
          horizontal: bool = False) -> str:
    fig, ax = _figure()
    if not labels:
        _empty(ax, ylabel)
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
        else:
            ax.set_xticks(ticks, labels, rotation=30, ha="right", fontsize="small")
            ax.set_ylabel(ylabel)
        if n > 1:
            ax.legend(fontsize="small")
    ax.set_title(title)
    return _save(fig, path)


def render(frames: dict[str, Any], out: Path, source: str) -> Path:
    """Write the plots and ``index.html`` for ``frames`` (pandas DataFrames named as in TABLES)."""
    out.mkdir(parents=True, exist_ok=True)
    rates, sizes, lat = frames["rates"], frames["sizes"], frames["latency"]
    red, keys = frames["redeliveries"], frames["routing_keys"]
    plots = [
        ("Messages per second", _rates(rates, "messages", out)),
        ("Bytes per second", _rates(rates, "bytes", out)),
        ("Message sizes", _bars([f"<= {b}" for b in sizes["bytes_up_to"]], {"messages": list(sizes["messages"])},
                                "published messages by size (bytes)", "messages", out / "sizes.png")),
        ("Publish to deliver latency", _bars(
            list(lat["queue"]), {p: list(lat[p]) for p in ("p50", "p90", "p99")},
            "latency percentiles per queue", "milliseconds", out / "latency.png")),
        ("Redeliveries and dead letters", _bars(
            list(red["queue"]), {"redeliveries": list(red["redeliveries"]), "dead letters": list(red["dead_letters"])},
            "redeliveries and dead letters per queue", "messages", out / "redeliveries.png")),
        ("Top routing keys", _bars(list(keys["routing_key"].astype(str)), {"messages": list(keys["messages"])},
                                   "top routing keys of published messages", "messages",
                                   out / "routing_keys.png", horizontal=True)),
    ]
    sections = []
    for title, png in plots:
        sections.append(f'<section><h2>{html.escape(title)}</h2><img src="{png}" alt="{html.escape(title)}"></section>')
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
table.data {{ border-collapse: collapse; font-size: 0.85em; }}
table.data td, table.data th {{ padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }}
</style></head><body>
<h1>sansmq traffic report</h1>
<p>Source: <code>{html.escape(source)}</code></p>
{''.join(sections)}
{''.join(tables)}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page)
    return index
