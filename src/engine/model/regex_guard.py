"""Regular expressions from users (permission patterns, the management API's ``use_regex`` filter) are
vetted before they run: Python's ``re`` has no time limit (RabbitMQ's has one) and holds the GIL, so a
pattern whose backtracking is exponential could freeze the broker's loop with one match."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["may_explode"]

#: CPython's own regex parser (the tree ``re`` compiles; typeshed has no stub for it): patterns are
#: inspected, never run
_parser: Any = importlib.import_module("re._parser")
_REPEATS = frozenset(("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"))


def may_explode(pattern: str) -> bool:
    """Whether ``pattern`` (valid for ``re``) can backtrack exponentially: a variable repeat around
    another variable repeat or an alternation (``(a+)+``, ``(\\w*)*``, ``(a|aa)*``), or a back-reference."""
    return _explosive(_parser.parse(pattern))


def _explosive(parsed: Any, inside: bool = False) -> bool:
    for op, av in parsed:
        kind = str(op)
        if kind.startswith("GROUPREF") or (inside and kind == "BRANCH"):
            return True
        if kind in _REPEATS:
            low, high, body = av
            variable = high > 1 and low != high  # `?` cannot backtrack exponentially
            if (inside and variable) or _explosive(body, inside or variable):
                return True
            continue
        for part in av if isinstance(av, (tuple, list)) else ():
            for sub in part if isinstance(part, list) else [part]:
                if isinstance(sub, _parser.SubPattern) and _explosive(sub, inside):
                    return True
        if isinstance(av, _parser.SubPattern) and _explosive(av, inside):
            return True
    return False
