"""Whether this machine has the NVIDIA driver, asked of the loader directly (not of warmprof, whose
answer the tests check)."""

import ctypes


def has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True
