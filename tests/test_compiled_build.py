"""Which build of the codecs and the engine the tests import: the sources (pure Python; what the suite runs by
default, PYTHONPATH=src) or the mypyc-compiled install (scripts/test-compiled.sh sets
SANSMQ_EXPECT_COMPILED=1). A run meant for one build that imports the other fails here instead of
silently testing the wrong code."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from pathlib import Path

import pytest

import amqpproto
import engine
import stompproto
import wsframe

EXPECT_COMPILED = os.environ.get("SANSMQ_EXPECT_COMPILED") == "1"
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [stompproto, amqpproto, wsframe, engine]


def _setup_module():
    """setup.py's list of compiled modules (it is a script: read its constants without running setup())."""
    source = (ROOT / "setup.py").read_text()
    namespace: dict[str, object] = {"__file__": str(ROOT / "setup.py")}
    exec(compile(source.split("\ndef ", 1)[0], "setup.py", "exec"), namespace)  # the constants only
    return namespace


def _compiled_modules() -> list[str]:
    consts = _setup_module()
    names = []
    for package in consts["COMPILED_PACKAGES"]:
        for path in sorted((ROOT / "src" / package).glob("*.py")):
            rel = f"{package}/{path.name}"
            if path.name not in consts["NOT_COMPILED"] and rel not in consts["NOT_COMPILED"]:
                names.append(f"{package}.{path.stem}")
    if consts["COMPILE_ENGINE"]:  # SANSMQ_COMPILED_ENGINE=1, at build time and here
        names += [rel.removesuffix(".py").replace("/", ".") for rel in consts["ENGINE_COMPILED"]]
    return names


def _is_extension(module_name: str) -> bool:
    module = importlib.import_module(module_name)
    return module.__file__ is not None and module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda m: m.__name__)
def test_flag_says_which_build_is_loaded(package):
    expected = EXPECT_COMPILED and (package is not engine or bool(_setup_module()["COMPILE_ENGINE"]))
    assert package.COMPILED is expected, (package.__file__, sys.path[:3])


def test_every_listed_module_is_of_the_expected_build():
    modules = _compiled_modules()
    assert {"amqpproto._receiving", "amqpproto.spec", "stompproto._readers", "stompproto._events",
            "wsframe._readers"} <= set(modules)
    wrong = [name for name in modules if _is_extension(name) is not EXPECT_COMPILED]
    assert not wrong, f"expected {'compiled' if EXPECT_COMPILED else 'pure-Python'} modules: {wrong}"

