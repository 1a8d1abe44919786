"""The engine core never reads a clock or an entropy source of its own, and its modules import each
other without circles (AST checks of the sources).

Every module of the ``engine`` package is core except ``engine.storage`` (the stores that do file
and database I/O by design), the stream logs' file and PostgreSQL backends, the file-system seam
under them (``engine.fs``, the real one, and ``engine.simfs``), and ``engine.testing`` and
``engine.sim`` (the simulation tools, which own a clock and run processes)."""

import ast
from pathlib import Path

import engine

FORBIDDEN_MODULES = {"time", "os", "uuid", "secrets", "datetime", "threading", "asyncio", "socket"}
ROOT = Path(engine.__file__).parent
NOT_PURE = ("storage/", "streams/_files.py", "streams/_directory.py", "streams/_pglog.py", "fs.py", "powercut.py", "simfs.py", "testing.py", "sim/")
#: core modules allowed one of the forbidden imports, and why
ALLOWED = {"streams/args.py": {"datetime"}}  # reads AMQP timestamp values; never asks for the time
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter"}


def all_sources() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def core_sources() -> list[Path]:
    return [p for p in all_sources() if not p.relative_to(ROOT).as_posix().startswith(NOT_PURE)]


def test_core_covers_the_subpackages():
    names = {p.relative_to(ROOT).as_posix() for p in core_sources()}
    for expected in ("model/delivery.py", "model/publish.py", "stomp/session.py", "amqp/channel.py",
                     "ws/session.py", "_broker.py"):
        assert expected in names
    assert not any(n.startswith("storage/") for n in names)


def test_core_imports_no_clock_or_entropy():
    for path in core_sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = {(node.module or "").split(".")[0]}
            else:
                continue
            names -= ALLOWED.get(path.relative_to(ROOT).as_posix(), set())
            assert not names & FORBIDDEN_MODULES, f"{path}:{node.lineno} imports {names & FORBIDDEN_MODULES}"


def test_core_modules_allowed_a_clock_module_never_read_the_clock():
    for rel in ALLOWED:
        path = ROOT / rel
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in CLOCK_CALLS, f"{rel}:{node.lineno} calls .{node.func.attr}()"


def test_core_uses_only_the_injected_rng_and_never_id():
    for path in core_sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                assert not (isinstance(func, ast.Name) and func.id == "id"), f"{path}:{node.lineno} calls id()"
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    assert func.value.id != "random", f"{path}:{node.lineno} calls random.{func.attr}"


# -- the import graph ----------------------------------------------------------------------------
def module_name(path: Path) -> str:
    parts = ["engine", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The engine modules ``path`` imports, wherever the import stands (a TYPE_CHECKING block or a
    function body is a dependency too). ``from pkg import name`` counts ``pkg.name`` when that is a
    module, else ``pkg``; importing ``pkg.sub`` runs ``pkg`` first, so that counts too (unless
    ``pkg`` is a package the importer lives in: that one is already running)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str) -> None:
        while name:
            if name in known and name != me and not me.startswith(name + "."):
                found.add(name)
            name = name.rpartition(".")[0]

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            add(base)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    add(f"{base}.{alias.name}")
    return found


def import_graph() -> dict[str, set[str]]:
    paths = all_sources()
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, known) for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (depth-first search), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_find_cycle_finds_a_circle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_reads_relative_and_package_imports():
    graph = import_graph()
    assert "engine.model.state" in graph["engine.model.delivery"]
    assert "engine.model" in graph["engine.amqp.channel"]  # ``from ..model import ...``
    assert "engine.stomp.destinations" in graph["engine.stomp.subscribe"]
    assert "engine.stomp" not in graph["engine.stomp.session"]  # its own package is already running
    assert {"engine.stomp", "engine.amqp"} <= graph["engine.ws.session"]


def test_engine_modules_import_each_other_without_circles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


def test_the_model_never_imports_a_session_or_the_broker():
    graph = import_graph()
    upper = {"engine._broker", "engine._session", "engine.testing"}
    for name, deps in graph.items():
        if name.startswith("engine.model"):
            assert not {d for d in deps if d in upper or d.split(".")[1] in ("stomp", "amqp", "ws")}, name
