"""Differential test of the masking paths: big-int XOR, strided translate, the cffi
accelerator, and the dispatching ``mask`` must all equal the RFC 6455 5.3 definition."""
import os
import subprocess
import sys

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


def test_pure_python_fallback_without_a_compiler(tmp_path):
    code = (
        "from wsframe import _mask as m, Connection, CLIENT, SERVER, BytesMessage, NEED_DATA\n"
        "assert m.mask_c is None and m.ACCELERATOR_ERROR, m.ACCELERATOR_ERROR\n"
        "c = Connection(CLIENT, handshake=False); s = Connection(SERVER, handshake=False)\n"
        "s.receive_data(c.send(BytesMessage(bytes(range(256)) * 64)))\n"
        "assert s.next_event() == BytesMessage(bytes(range(256)) * 64)\n"
    )
    env = dict(os.environ, CC="/bin/false", WSFRAME_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
