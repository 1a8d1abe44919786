"""What mypyc must be told about the engine's classes when ``pip install .`` compiles them (setup.py).

mypyc makes each class of a compiled module a native class: fixed attribute slots, compiled
attribute access, a single base class, no interpreted subclasses, no patched methods. Two decorators
say where that does not fit; both are no-ops at run time, so the pure-Python build is unchanged.

- ``@interpreted_class``: keep the class a plain Python class (its methods are still compiled). For
  the mixin hierarchies (a session or channel assembled from method groups, the segment store from
  its parts): a native class has a single base. Any decorator mypyc does not know has that effect.
- ``@mypyc_attr(allow_interpreted_subclasses=True)``: a native class that interpreted code may
  subclass (e.g. ``Consumer``: the management API and tests define their own). mypy_extensions comes
  with mypy (a build requirement); at run time the class decorator of a native class is not evaluated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T", bound=type)

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Any:
        return lambda cls: cls


def interpreted_class(cls: T) -> T:
    """Keep ``cls`` a plain Python class under mypyc (an unknown decorator does that)."""
    return cls


__all__ = ["interpreted_class", "mypyc_attr"]
