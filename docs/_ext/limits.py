"""A codec connection's limits and knobs, generated from its constructor's keyword-only parameters."""

from __future__ import annotations

import importlib
import inspect


def rst(dotted: str) -> str:
    """A table of ``package.Class``'s keyword-only ``__init__`` parameters with their defaults."""
    module_name, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY]
    if not params:
        raise ValueError(f"{dotted}.__init__ has no keyword-only parameters")
    out = [".. list-table::", "   :header-rows: 1", "", "   * - keyword", "     - default"]
    for p in params:
        default = "required" if p.default is p.empty else f"``{p.default!r}``"
        out += [f"   * - ``{p.name}``", f"     - {default}"]
    return "\n".join(out) + "\n"
