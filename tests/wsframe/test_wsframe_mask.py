"""Differential test of the masking paths: big-int XOR, strided translate, the cffi
accelerator, and the dispatching ``mask`` must all equal the RFC 6455 5.3 definition."""
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wsframe import _mask


def reference(key: bytes, data: bytes) -> bytes:
    # the obvious per-byte definition, used only as the oracle
    return bytes(b ^ key[i % 4] for i, b in enumerate(data))


def paths():
    found = [_mask.mask, _mask.mask_int, _mask.mask_translate]
    if _mask.mask_c is not None:
        found.append(_mask.mask_c)
    return found


def test_accelerator_state_is_explained():
    # either the C path is there, or the reason it is not is recorded
    assert (_mask.mask_c is None) == (_mask.ACCELERATOR_ERROR is not None)


def test_accelerator_is_built_where_a_compiler_is():
    # setup.py builds it at install time; where a C compiler exists a missing accelerator means
    # the build hook broke, and the differential tests below would silently lose the C path.
    if os.environ.get("WSFRAME_PURE_PYTHON"):
        pytest.skip("WSFRAME_PURE_PYTHON=1 disables the accelerator on purpose")
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler on this machine: the pure paths are all there is to compare")
    assert _mask.mask_c is not None, _mask.ACCELERATOR_ERROR


@given(key=st.binary(min_size=4, max_size=4), data=st.binary(max_size=3000), offset=st.integers(0, 7))
def test_all_paths_equal_the_definition(key, data, offset):
    expected = reference(key, data)
    view = memoryview(bytearray(bytes(offset) + data))[offset:]  # unaligned source buffer
    for fn in paths():
        assert fn(key, data) == expected, fn
        assert fn(key, bytearray(data)) == expected, fn
        assert fn(key, view) == expected, fn


def test_large_payload_and_involution():
    key = os.urandom(4)
    data = os.urandom(70_001)  # odd length: the key cycle does not line up with the end
    expected = reference(key, data)
    for fn in paths():
        masked = fn(key, data)
        assert masked == expected and type(masked) is bytes
        assert fn(key, masked) == data


FALLBACK_CHECK = (
    "from wsframe import _mask as m, Connection, CLIENT, SERVER, BytesMessage, NEED_DATA\n"
    "assert m.mask_c is None and m.ACCELERATOR_ERROR, m.ACCELERATOR_ERROR\n"
    "c = Connection(CLIENT, handshake=False); s = Connection(SERVER, handshake=False)\n"
    "s.receive_data(c.send(BytesMessage(bytes(range(256)) * 64)))\n"
    "assert s.next_event() == BytesMessage(bytes(range(256)) * 64)\n"
    "print(m.ACCELERATOR_ERROR)\n"
)


def _run(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "WSFRAME_PURE_PYTHON"}
    result = subprocess.run([sys.executable, "-c", code], env=dict(base, **env),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_pure_python_fallback_without_the_accelerator():
    # as installed without a C compiler: wsframe._cmask is missing (None in sys.modules makes
    # its import fail), and masking falls back to the pure paths with the reason recorded
    out = _run("import sys; sys.modules['wsframe._cmask'] = None\n" + FALLBACK_CHECK)
    assert "not available" in out


def test_pure_python_forced_by_environment():
    out = _run(FALLBACK_CHECK, WSFRAME_PURE_PYTHON="1")
    assert "WSFRAME_PURE_PYTHON" in out


def test_import_compiles_nothing():
    # importing wsframe never runs a compiler: with CC pointing at a failing program and the
    # accelerator blocked, import and masking still work, and no cffi build machinery is loaded
    out = _run("import sys; sys.modules['wsframe._cmask'] = None\n" + FALLBACK_CHECK
               + "assert 'cffi.recompiler' not in sys.modules and 'setuptools' not in sys.modules\n",
               CC="/bin/false")
    assert "not available" in out
