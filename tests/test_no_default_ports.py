"""No test may start a broker on a default port: every ``serve`` command line the suite builds
overrides (or turns off) every listener that is on by default, so tests never collide with a broker
running on the machine, nor with each other.

The command lines are found in the tests' source (AST): every list, tuple or call whose items hold
the string "serve" (``[sys.executable, "-m", "servers", "serve", ...]``, ``sansmq("serve", ...)``).
``*NAME`` items are expanded when NAME is a constant of the module or imported from our packages
(``OPS_EPHEMERAL``, ``QUIET``...). Command lines that never bind are exempt: ``--check-config``,
``--help``, and argparse-only calls (``parse_args``).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest

from servers.cli import PROTOCOLS

TESTS = Path(__file__).parent
#: every listener a bare ``sansmq serve`` binds: the protocols on by default and the HTTP ones
DEFAULT_LISTENERS = tuple(proto for proto, _, on in PROTOCOLS if on) + ("http", "prometheus")
NEVER_BINDS = ("--check-config", "--help", "-h", "--version")
PARSE_ONLY = ("parse_args", "parse_known_args")


def _constants(path: Path) -> dict[str, Any]:
    """Module-level names of a test file bound to values computable from the file alone (literals,
    expressions of imported names), and the names it imports (from a sibling test module or ours)."""
    out: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            sibling = path.parent / f"{node.module}.py"
            source = _constants(sibling) if sibling.exists() else None
            for alias in node.names:
                try:
                    out[alias.asname or alias.name] = (source[alias.name] if source is not None else
                                                       getattr(importlib.import_module(node.module), alias.name))
                except (ImportError, AttributeError, KeyError):
                    continue
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:  # our own test code: its constant expressions (tuples of flags) are safe to evaluate
                out[node.targets[0].id] = eval(compile(ast.Expression(node.value), str(path), "eval"), dict(out))
            except Exception:  # noqa: BLE001 - a value known only at run time
                continue
    return out


def _items(node: ast.expr, names: dict[str, Any]) -> list[str | None]:
    """The items of a command line: strings where known, None for a value computed at run time."""
    elts = node.args if isinstance(node, ast.Call) else node.elts  # type: ignore[attr-defined]
    out: list[str | None] = []
    for elt in elts:
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            out.append(elt.value)
        elif isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Name) and isinstance(
                names.get(elt.value.id), (tuple, list)):
            out.extend(str(v) for v in names[elt.value.id])
        else:
            out.append(None)
    return out


def _unset_listeners(args: list[str | None]) -> list[str]:
    given = {a.split("=", 1)[0] for a in args if a}
    # a cluster node also binds its node-to-node link (default port 25672)
    wanted = DEFAULT_LISTENERS + (("cluster-address",) if "--node" in given else ())
    return [name for name in wanted if f"--{name}" not in given and f"--no-{name}" not in given]


def serve_command_lines() -> list[tuple[str, int, list[str | None]]]:
    """(file, line, items) of every ``serve`` command line in the test suite."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text()
        if '"serve"' not in source:
            continue
        tree = ast.parse(source)
        names = _constants(path)
        parse_only = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                      and isinstance(node.func, ast.Attribute) and node.func.attr in PARSE_ONLY for arg in node.args}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.List, ast.Tuple, ast.Call)) or id(node) in parse_only:
                continue
            items = _items(node, names)
            if "serve" not in items:
                continue
            found.append((str(path.relative_to(TESTS)), node.lineno, items))
    return found


def test_the_scan_finds_the_suites_serve_command_lines() -> None:
    where = {f for f, _, _ in serve_command_lines()}
    assert {"e2e/e2ekit.py", "e2e/test_e2e_delay_retry.py", "e2e/test_e2e_cli_errors.py"} <= where


@pytest.mark.parametrize(("path", "line", "items"), serve_command_lines(),
                         ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_every_serve_overrides_every_default_listener(path: str, line: int, items: list[str | None]) -> None:
    if any(a in NEVER_BINDS for a in items):
        return
    missing = _unset_listeners(items)
    assert not missing, (f"tests/{path}:{line} starts `serve` without overriding {', '.join(missing)}: it would bind "
                         f"the default port(s); pass --{missing[0]} 127.0.0.1:0 (see OPS_EPHEMERAL) or --no-{missing[0]}")


def test_the_check_catches_a_missing_override() -> None:
    tree = ast.parse('cmd = [sys.executable, "-m", "servers", "serve", *OPS, "--stomp", "127.0.0.1:0", "--amqp", "x"]')
    names = {"OPS": ("--http", "127.0.0.1:0", "--prometheus", "127.0.0.1:0")}
    node = tree.body[0].value  # type: ignore[attr-defined]
    assert _unset_listeners(_items(node, names)) == ["ws"]
