"""Committed scripts and docs name no absolute path of the machine they were written on: their
defaults are relative to the checkout (``../shared/bench`` beside it, ``.venv`` in it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: home and work directories of a particular machine; recorded benchmark outputs are exempt
MACHINE_PATH = re.compile(r"(?<![\w./])/(?:work|root|home/\w+)/")
CHECKED = ("benchmarks", "scripts", "tools", "tests", "src", "fuzz", "examples", "docs")


def test_no_machine_paths_in_scripts_and_docs() -> None:
    offenders = []
    for top in CHECKED:
        for path in (ROOT / top).rglob("*"):
            if (not path.is_file() or path.suffix not in (".py", ".sh", ".md", ".toml", ".js", ".html", ".cfg")
                    or "node_modules" in path.parts or "results" in path.parts or "_build" in path.parts):
                continue
            for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if MACHINE_PATH.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    for name in ("README.md", "pyproject.toml", "tox.ini"):
        for no, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            if MACHINE_PATH.search(line):
                offenders.append(f"{name}:{no}: {line.strip()}")
    assert offenders == []
