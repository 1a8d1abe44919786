"""The configuration file reference, generated from ``engine.config_schema`` and ``engine.config``.

Keys and their types come from the schema's checker tables (``TOP_LEVEL_KEYS`` and, for each table
key such as ``limits``, ``LIMIT_KEYS``); defaults from the dataclasses the schema fills; the text
from the ``#:`` comments in ``engine/config.py``, else from the key's comment in the shipped
``servers/example-config.toml``. A key documented in neither is reported, so the build fails
until someone says what it does.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from sphinx.pycode import ModuleAnalyzer

# What each schema checker accepts, by the checker's name (the schema's private helpers).
TYPE_NAMES = {
    "_bool": "boolean",
    "_str": "string",
    "_str_list": "array of strings",
    "_count": "integer >= 0",
    "_number": "number >= 0",
    "_int_pair": "array of two integers",
    "dict": "table",
}
# Keys whose integer value is a number of bytes: their default also shows in KiB/MiB/GiB.
_BYTES = re.compile(r"size|bytes|buffer|watermark")
_KEY_LINE = re.compile(r"^#?\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^#])*?(?:#\s*(?P<c>.*))?$")
_TABLE_LINE = re.compile(r"^\[\s*([A-Za-z_]+)[^\]]*\]\s*(?:#\s*(?P<c>.*))?$")


def example_comments(text: str) -> dict[str, str]:
    """``{"limits.queue_window": "comment", ...}`` from an example config: a key's trailing comment,
    else the comment block right above it (keys of ``[users.NAME]`` are ``users.KEY``)."""
    found: dict[str, str] = {}
    table, block = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            block = []
            continue
        if m := _TABLE_LINE.match(line):
            table, block = m.group(1), []
            if m.group("c"):
                found.setdefault(table, m.group("c").strip())
            continue
        if m := _KEY_LINE.match(line):
            name = f"{table}.{m.group(1)}" if table else m.group(1)
            text_ = (m.group("c") or " ".join(block)).strip()
            if text_:
                found.setdefault(name, text_)
            block = []
        elif line.startswith("#"):
            block.append(line.lstrip("#").strip())
    return found


def _owner(config_module: Any, keys: list[str]) -> type:
    """The dataclass of ``engine.config`` whose fields hold these keys (Config, Limits, Tls, User)."""
    for cls in vars(config_module).values():
        if dataclasses.is_dataclass(cls) and isinstance(cls, type):
            if set(keys) <= {f.name for f in dataclasses.fields(cls)}:
                return cls
    raise LookupError(f"no dataclass in {config_module.__name__} has the fields {keys}")


def _default(cls: type, key: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[key]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _toml(value: Any, key: str) -> str:
    if value is dataclasses.MISSING:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "``true``" if value else "``false``"
    if isinstance(value, str):
        return f'``"{value}"``'
    if isinstance(value, (tuple, list)):
        return "``[" + ", ".join(_toml(v, key).strip("`") for v in value) + "]``"
    text = f"``{value}``"
    if isinstance(value, int) and value >= 1024 and _BYTES.search(key):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                text += f" ({value / size:g} {unit})"
                break
    return text


def _type(checker: Callable[[Any], Any]) -> str:
    name = getattr(checker, "__name__", repr(checker))
    return TYPE_NAMES.get(name, name)


def _section_keys(schema: Any, key: str) -> dict[str, Callable[[Any], Any]]:
    """The checker table of a table key: ``LIMIT_KEYS`` for ``limits``, ``USER_KEYS`` for ``users``..."""
    for candidate in (f"{key.upper()}_KEYS", f"{key.upper().rstrip('S')}_KEYS"):
        if isinstance(getattr(schema, candidate, None), dict):
            return getattr(schema, candidate)  # type: ignore[no-any-return]
    raise LookupError(f"{schema.__name__} has no key table for [{key}] ({key.upper()}_KEYS)")


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = [".. list-table::", "   :header-rows: 1", "   :widths: 22 14 18 46", "",
           "   * - key", "     - type", "     - default", "     - meaning"]
    for key, type_, default, text in rows:
        out += [f"   * - ``{key}``", f"     - {type_}", f"     - {default}", f"     - {text}"]
    return out


def rst(schema_name: str = "engine.config_schema", config_name: str = "engine.config",
        example: tuple[str, str] = ("servers", "example-config.toml")) -> tuple[str, list[str]]:
    """The reference as reStructuredText, and the keys that have no description (problems)."""
    schema = importlib.import_module(schema_name)
    config_module = importlib.import_module(config_name)
    attr_docs = ModuleAnalyzer.for_module(config_name).find_attr_docs()
    comments = example_comments(resources.files(example[0]).joinpath(example[1]).read_text("utf-8"))
    problems: list[str] = []

    def describe(cls: type, key: str, dotted: str) -> str:
        lines = attr_docs.get((cls.__name__, key))
        text = " ".join(line.strip() for line in lines if line.strip()) if lines else comments.get(dotted, "")
        if not text:
            problems.append(f"config key {dotted!r} has no '#:' comment in {config_name} and no comment in "
                            f"{example[1]}")
        return text.replace("|", "\\|")

    top = schema.TOP_LEVEL_KEYS
    scalars = [k for k, checker in top.items() if checker is not dict]
    owner = _owner(config_module, scalars)
    out = ["Top-level keys", "--------------", ""]
    out += _table([(k, _type(top[k]), _toml(_default(owner, k), k), describe(owner, k, k)) for k in scalars])
    for key in (k for k, checker in top.items() if checker is dict):
        keys = _section_keys(schema, key)
        cls = _owner(config_module, list(keys))
        title = f"[{key}.NAME]" if key == "users" else f"[{key}]"
        out += ["", title, "-" * len(title), ""]
        if comments.get(key):
            out += [comments[key].replace("|", "\\|"), ""]
        out += _table([(f"{key}.{k}", _type(checker), _toml(_default(cls, k), k),
                        describe(cls, k, f"{key}.{k}")) for k, checker in keys.items()])
    return "\n".join(out) + "\n", problems
