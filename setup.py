"""Install-time build hook: the compiled codecs (mypyc) and wsframe's C masking accelerator (cffi).

Both are optional and built only when a C compiler is there; otherwise the install still succeeds
with the same modules as pure Python (``amqpproto.COMPILED`` etc. say which was loaded,
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
#: ``pip install -e`` (setuptools' editable_wheel; develop for the legacy path)
EDITABLE = bool({"editable_wheel", "develop"} & set(sys.argv))


def _compiled_sources() -> list[str]:
    paths = []
    for package in COMPILED_PACKAGES:
        for path in sorted((SRC / package).glob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            if path.name not in NOT_COMPILED and rel not in NOT_COMPILED:
                paths.append(os.path.relpath(path, ROOT))
    return paths


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
    """The mypyc-built codec modules, or [] (pure Python) with the reason on stderr."""
    if os.environ.get("SANSMQ_PURE_PYTHON"):
        print("sansmq: SANSMQ_PURE_PYTHON is set: pure-Python codecs", file=sys.stderr)
        return []
    if EDITABLE:
        return []  # an editable install runs the sources as they are edited: pure Python
    if not _have_c_compiler():
        print("sansmq: no working C compiler: pure-Python codecs", file=sys.stderr)
        return []
    from mypyc.build import mypycify  # a build requirement (pyproject.toml)

    # mypy reads its configuration (the codecs' strict settings) from pyproject.toml; relative
    # paths there (mypy_path) are relative to the project root.
    os.chdir(ROOT)
    return mypycify(["--no-warn-unused-configs", *_compiled_sources()], opt_level="3", group_name="sansmq_codecs")


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


setup(ext_modules=[*_mypyc_extensions(), *_mask_extension()])
