"""Install-time build hook: wsframe's optional C masking accelerator (the rest is pyproject.toml).

The extension is optional: with no C compiler the install still succeeds (setuptools prints a
warning) and wsframe falls back to its pure-Python masking; ``wsframe._mask.ACCELERATOR_ERROR``
then says why.
"""
import importlib.util
from pathlib import Path

from setuptools import setup

_build = Path(__file__).resolve().parent / "src" / "wsframe" / "_mask_build.py"
_spec = importlib.util.spec_from_file_location("_wsframe_mask_build", _build)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

mask_extension = _module.ffibuilder.distutils_extension(tmpdir="build/cffi")
mask_extension.optional = True  # a failed compile is a warning, not a failed install

setup(ext_modules=[mask_extension])
