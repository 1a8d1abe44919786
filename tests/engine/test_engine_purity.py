"""The engine core never reads a clock or an entropy source of its own (AST check of the sources)."""

import ast
from pathlib import Path

import engine

FORBIDDEN_MODULES = {"time", "os", "uuid", "secrets", "datetime", "threading", "asyncio", "socket"}


def core_sources():
    root = Path(engine.__file__).parent
    return [p for p in sorted(root.glob("*.py")) if p.name != "testing.py"]


def test_core_imports_no_clock_or_entropy():
    for path in core_sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not names & FORBIDDEN_MODULES, f"{path.name}:{node.lineno} imports {names & FORBIDDEN_MODULES}"


def test_core_uses_only_the_injected_rng_and_never_id():
    for path in core_sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                assert not (isinstance(func, ast.Name) and func.id == "id"), f"{path.name}:{node.lineno} calls id()"
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    assert func.value.id != "random", f"{path.name}:{node.lineno} calls random.{func.attr}"
