"""State machine pages from the codecs' ``_state.py`` tables: a graphviz diagram and a table.

A table is a dict keyed ``(sender role, state, event type)`` (or ``(state, frame type)`` for
tables with no sender, as amqpproto's content assembly) whose value is the new state. Nothing
here knows a codec: the rows are read from the table in its own order, so the page is the table.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Mapping
from typing import Any

# Edge colours per sender role (by the role's name); a table without roles draws black edges.
ROLE_COLOURS = {"CLIENT": "#1f5fa8", "SERVER": "#2e7d32"}
SHORT = 6  # states up to which a diagram is laid out left to right


def load_table(dotted: str) -> tuple[Mapping[tuple[Any, ...], Any], dict[str, Any]]:
    """The table at ``package.module.NAME`` and the globals of its module (for naming keys)."""
    module_name, _, attr = dotted.rpartition(".")
    module = importlib.import_module(module_name)
    table = getattr(module, attr)
    if not isinstance(table, Mapping) or not table:
        raise ValueError(f"{dotted} is not a non-empty state table")
    return table, vars(module)


def label(obj: Any, names: dict[str, Any]) -> str:
    """How a key part reads: an enum member's name, a class's name, or the module's constant for it
    (amqpproto's ``ANY_METHOD``, ``METHOD``/``HEADER``/``BODY`` frame types)."""
    if isinstance(obj, enum.Enum):
        return obj.name
    constant = next((n for n, v in names.items() if n.isupper() and not n.startswith("_") and v is obj), None)
    if constant is not None:
        return constant
    return getattr(obj, "__name__", repr(obj))


def rows(table: Mapping[tuple[Any, ...], Any], names: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(sender, state, event, new state) per entry, in the table's order; sender '' when the table has none."""
    out = []
    for key, new in table.items():
        *sender, state, event = key
        out.append((label(sender[0], names) if sender else "", label(state, names), label(event, names),
                    label(new, names)))
    return out


def _quote(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def dot(table_rows: list[tuple[str, str, str, str]], name: str) -> str:
    """A graphviz digraph: one node per state, one edge per (sender, state, new state) carrying every
    event that takes it, coloured by sender."""
    states: dict[str, None] = {}
    edges: dict[tuple[str, str, str], list[str]] = {}
    for sender, state, event, new in table_rows:
        states.setdefault(state)
        states.setdefault(new)
        edges.setdefault((sender, state, new), []).append(event)
    # A short machine reads left to right; a long one top to bottom, so that it fits a page's width.
    rankdir = "LR" if len(states) <= SHORT else "TB"
    lines = [f"digraph {_quote(name)} {{", f"  rankdir={rankdir};", "  node [shape=box, style=rounded, fontsize=10];",
             "  edge [fontsize=9];"]
    lines += [f"  {_quote(s)};" for s in states]
    for (sender, state, new), events in edges.items():
        colour = ROLE_COLOURS.get(sender, "black")
        text = (f"{sender}: " if sender else "") + "\\n".join(events)
        lines.append(f"  {_quote(state)} -> {_quote(new)} [label={_quote(text)}, color={_quote(colour)}, "
                     f"fontcolor={_quote(colour)}];")
    lines.append("}")
    return "\n".join(lines)


def rst(dotted: str) -> str:
    """The diagram and the full table of ``dotted`` as reStructuredText."""
    table, names = load_table(dotted)
    table_rows = rows(table, names)
    with_sender = any(r[0] for r in table_rows)
    out = [".. graphviz::", f"   :caption: ``{dotted}`` ({len(table_rows)} transitions)", ""]
    out += ["   " + line for line in dot(table_rows, dotted.rpartition(".")[2]).splitlines()]
    header = ["sender", "state", "event", "new state"] if with_sender else ["state", "frame", "new state"]
    out += ["", ".. list-table::", "   :header-rows: 1", "   :class: state-table", ""]
    for cells in [header, *([list(r) if with_sender else list(r[1:]) for r in table_rows])]:
        marked = cells if cells is header else [f"``{c}``" if c else "" for c in cells]
        out.append(f"   * - {marked[0]}")
        out += [f"     - {c}" for c in marked[1:]]
    return "\n".join(out) + "\n"
