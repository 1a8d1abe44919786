"""Install-time build hook: the compiled codecs and engine hot path (mypyc) and wsframe's C masking (cffi).

Both are optional and built only when a C compiler is there; otherwise the install still succeeds
with the same modules as pure Python (``amqpproto.COMPILED``, ``engine.COMPILED`` etc. say which was loaded,
``wsframe._mask.ACCELERATOR_ERROR`` why masking is pure). ``SANSMQ_PURE_PYTHON=1`` at build time
skips both. Editable installs build in place too; the tests run the sources (PYTHONPATH=src).
"""
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"

#: The codecs' modules, compiled from the same source by mypyc (all of them are on the per-message
#: path) except the package fronts and wsframe's cffi build script.
COMPILED_PACKAGES = ("stompproto", "amqpproto", "wsframe")
NOT_COMPILED = {"__init__.py", "_mask_build.py"}
#: The engine's per-message path (chosen by profiling bench_amqp_engine.py and bench_engine_stomp.py):
#: the broker, the sessions' publish and deliver, the model's queues, light topics, paging and routing, the
#: segment store's index and segment files. Left interpreted, with the reason: ``_message`` and
#: ``records`` (a recovered message's lazy body is a property over ``Message``'s slot: compiled
#: callers would read the slot past it); ``model.routers`` (delayed exchanges make router classes at
#: run time from two bases); ``model.publish`` and ``model.delivery`` (duck-typed: a delayed exchange's
#: target and a light topic subscription stand in for a ``Queue``, which compiled code checks for; they
#: need a declared protocol first); ``model.state`` (``Model`` extends it and tests patch its
#: methods); the stream logs (tests subclass and patch ``FileStreamLog``); the segment store's mixin
#: parts (closures in a mixin's methods crash mypyc 2.4); everything off the per-message path (config,
#: admin, cluster, PostgreSQL, simulation: compile time for nothing). Classes mypyc cannot make
#: native are marked in the source (engine/_mypyc.py).
ENGINE_COMPILED = (
    "engine/_actions.py", "engine/_broker.py", "engine/_props.py", "engine/_session.py",
    "engine/amqp/acks.py", "engine/amqp/base.py", "engine/amqp/channel.py", "engine/amqp/consume.py",
    "engine/amqp/permissions.py", "engine/amqp/properties.py", "engine/amqp/publish.py",
    "engine/amqp/session.py", "engine/amqp/topology.py",
    "engine/model/light.py", "engine/model/objects.py", "engine/model/paging.py", "engine/model/routing.py",
    "engine/model/security.py",
    "engine/stomp/base.py", "engine/stomp/delivery.py", "engine/stomp/permissions.py",
    "engine/stomp/sending.py", "engine/stomp/session.py", "engine/stomp/subscribe.py",
    "engine/stomp/subscriptions.py", "engine/stomp/transactions.py", "engine/stomp/wire.py",
    "engine/ws/session.py",
    "engine/storage/segment/_files.py", "engine/storage/segment/_index.py",
)
#: The engine is compiled only on request (``SANSMQ_COMPILED_ENGINE=1`` at build time): measured, it is
#: slower compiled than interpreted while its hot classes (sessions, channels, Queue, Message, Broker)
#: stay plain Python classes, whose attributes compiled code reads through the generic C API where
#: CPython 3.11's interpreter has inline caches (docs/benchmarks.md, "Compiled engine").
COMPILE_ENGINE = bool(os.environ.get("SANSMQ_COMPILED_ENGINE"))
#: ``pip install -e`` (setuptools' editable_wheel; develop for the legacy path)
EDITABLE = bool({"editable_wheel", "develop"} & set(sys.argv))


def _codec_sources() -> list[str]:
    paths = []
    for package in COMPILED_PACKAGES:
        for path in sorted((SRC / package).glob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            if path.name not in NOT_COMPILED and rel not in NOT_COMPILED:
                paths.append(os.path.relpath(path, ROOT))
    return paths


def _engine_sources() -> list[str]:
    return [os.path.relpath(SRC / rel, ROOT) for rel in ENGINE_COMPILED]


def _have_c_compiler() -> bool:
    """Can this Python build C extensions? (a trial compile of a file including Python.h)"""
    from distutils.ccompiler import new_compiler
    from distutils.errors import CCompilerError, DistutilsError
    from distutils.sysconfig import customize_compiler, get_python_inc

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text("#include <Python.h>\nint sansmq_probe(void) { return 0; }\n")
        try:
            compiler.compile([str(probe)], output_dir=tmp, include_dirs=[get_python_inc()])
        except (CCompilerError, DistutilsError, OSError):
            return False
    return True


def _mypyc_extensions() -> list:
    """The mypyc-built codec and engine modules, or [] (pure Python) with the reason on stderr."""
    if os.environ.get("SANSMQ_PURE_PYTHON"):
        print("sansmq: SANSMQ_PURE_PYTHON is set: pure-Python codecs and engine", file=sys.stderr)
        return []
    if EDITABLE:
        return []  # an editable install runs the sources as they are edited: pure Python
    if not _have_c_compiler():
        print("sansmq: no working C compiler: pure-Python codecs and engine", file=sys.stderr)
        return []
    from mypyc.build import mypycify  # a build requirement (pyproject.toml)

    # mypy reads its configuration (the codecs' strict settings) from pyproject.toml; relative
    # paths there (mypy_path) are relative to the project root.
    os.chdir(ROOT)
    groups = [(_codec_sources(), "sansmq_codecs")]
    if COMPILE_ENGINE:
        # one mypy run, two groups: two C libraries that build_ext compiles in parallel (setup() below)
        groups.append((_engine_sources(), "sansmq_engine"))
    return mypycify(["--no-warn-unused-configs", *(path for paths, _ in groups for path in paths)], opt_level="3",
                    separate=groups)


def _mask_extension() -> list:
    if os.environ.get("SANSMQ_PURE_PYTHON"):
        return []
    build = SRC / "wsframe" / "_mask_build.py"
    spec = importlib.util.spec_from_file_location("_wsframe_mask_build", build)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    extension = module.ffibuilder.distutils_extension(tmpdir="build/cffi")
    extension.optional = True  # a failed compile is a warning, not a failed install
    return [extension]


# build_ext compiles the extensions in parallel: the two mypyc groups are the long compiles
setup(ext_modules=[*_mypyc_extensions(), *_mask_extension()],
      options={"build_ext": {"parallel": os.cpu_count() or 1}})
