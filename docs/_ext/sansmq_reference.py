"""Sphinx extension: writes the generated reference includes before the sources are read.

``docs/_generated/`` (git-ignored, excluded as documents) receives, on every build:

- ``states-<codec>.rst.inc``: every state table of ``<codec>._state`` (statetables.py),
- ``limits-<codec>.rst.inc``: the keyword-only parameters of ``<codec>.Connection`` (limits.py),
- ``events-<codec>.rst.inc``: the codec's events and errors with their fields (events.py),
- ``config.rst.inc``: the config file reference (configref.py),
- ``cli.rst.inc``: the ``sansmq`` command reference (cliref.py).

Pages pull them in with ``.. include::``. A config key nobody described is a build warning (an
error under ``-W``).
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cliref
import configref
import events
import limits
import statetables
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

CODECS = ("stompproto", "amqpproto", "wsframe")


def is_state_table(value: Any) -> bool:
    """A ``(sender, state, event) -> state`` or ``(state, event) -> state`` dict of Enum states."""
    return (isinstance(value, Mapping) and bool(value)
            and all(isinstance(k, tuple) and len(k) in (2, 3) and isinstance(k[-2], enum.Enum) for k in value)
            and all(isinstance(v, enum.Enum) and type(v) is type(k[-2]) for k, v in value.items()))


def state_tables(codec: str) -> list[str]:
    """Dotted names of the state tables in ``<codec>._state``, in the module's order."""
    module = importlib.import_module(f"{codec}._state")
    return [f"{module.__name__}.{name}" for name, value in vars(module).items()
            if name.isupper() and is_state_table(value)]


def generate() -> tuple[dict[str, str], list[str]]:
    """File name -> content of every generated include, and the problems found on the way."""
    files: dict[str, str] = {}
    for codec in CODECS:
        parts = []
        for dotted in state_tables(codec):
            name = dotted.rpartition(".")[2]
            parts += [f".. rubric:: {name}", "", statetables.rst(dotted)]
        files[f"states-{codec}.rst.inc"] = "\n".join(parts)
        files[f"limits-{codec}.rst.inc"] = limits.rst(f"{codec}.Connection")
        files[f"events-{codec}.rst.inc"] = events.rst(codec)
    files["config.rst.inc"], problems = configref.rst()
    files["cli.rst.inc"] = cliref.rst()
    return files, problems


def write_generated(app: Sphinx) -> None:
    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    files, problems = generate()
    for name, text in files.items():
        path = out / name
        if not path.exists() or path.read_text("utf-8") != text:
            path.write_text(text, "utf-8")
    for problem in problems:
        logger.warning(problem)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", write_generated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
