"""Build script of the optional C masking accelerator, ``wsframe._cmask`` (cffi, API mode).

setup.py builds it at install time as an optional extension: without a C compiler the install
still succeeds and wsframe uses its pure-Python masking paths (see ``_mask``). Nothing here runs
at import time of wsframe. By hand: ``python src/wsframe/_mask_build.py`` builds it in place.
"""
from __future__ import annotations

import cffi

CDEF = "void wsframe_mask(const unsigned char *key, const unsigned char *src, unsigned char *dst, size_t n);"
CSRC = r"""
#include <stdint.h>
#include <string.h>
void wsframe_mask(const unsigned char *key, const unsigned char *src, unsigned char *dst, size_t n) {
    uint32_t k32;
    uint64_t k64, v;
    size_t i = 0;
    memcpy(&k32, key, 4);
    k64 = ((uint64_t)k32 << 32) | k32;  /* the key repeats every 4 bytes, so twice per word */
    for (; i + 8 <= n; i += 8) {
        memcpy(&v, src + i, 8);
        v ^= k64;
        memcpy(dst + i, &v, 8);
    }
    for (; i < n; i++)
        dst[i] = src[i] ^ key[i & 3];
}
"""

ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source("wsframe._cmask", CSRC, extra_compile_args=["-O2"])

if __name__ == "__main__":
    import os

    ffibuilder.compile(tmpdir=os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
