"""A codec's events and errors with their fields, generated from its public names (``__all__``).

Every dataclass the codec exports is an event (or, in amqpproto, a method or the properties
class): one row with its fields and types and the first line of its docstring, linked to its
API entry. Every exception it exports gets its constructor's parameters.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect


def _summary(cls: type) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    if doc.startswith(f"{cls.__name__}("):  # the signature dataclasses write when a class has no docstring
        doc = f"The ``{cls.command}`` frame." if getattr(cls, "command", "") else ""
    return inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def _field(name: str, annotation: object) -> str:
    return f"``{name}: {annotation}``" if annotation not in (None, inspect.Parameter.empty) else f"``{name}``"


def rst(codec: str) -> str:
    """Two tables, events then errors, for the public classes of ``codec``."""
    module = importlib.import_module(codec)
    classes = [getattr(module, n) for n in module.__all__ if inspect.isclass(getattr(module, n))]
    events = [c for c in classes if dataclasses.is_dataclass(c)]
    errors = [c for c in classes if issubclass(c, BaseException)]
    out = [".. rubric:: Events", "", ".. list-table::", "   :header-rows: 1", "   :widths: 22 38 40", "",
           "   * - class", "     - fields", "     - what it is"]
    for cls in events:
        fields = ", ".join(_field(f.name, f.type) for f in dataclasses.fields(cls)) or "(none)"
        out += [f"   * - :class:`{codec}.{cls.__name__}`", f"     - {fields}", f"     - {_summary(cls)}"]
    out += ["", ".. rubric:: Errors", "", ".. list-table::", "   :header-rows: 1", "   :widths: 22 38 40", "",
            "   * - class", "     - constructor", "     - when"]
    for cls in errors:
        params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
        fields = ", ".join(_field(p.name, p.annotation) for p in params)
        out += [f"   * - :class:`{codec}.{cls.__name__}`", f"     - {fields}", f"     - {_summary(cls)}"]
    return "\n".join(out) + "\n"
