"""spmlkit.allocator: freed memory stays in the process (docs/architecture.md, "Freed memory").

glibc reports where its memory lives through ``mallinfo2``: ``hblkhd`` counts the bytes of
blocks it mapped one by one (given back to the system when freed), ``arena`` its heap. Each
check runs in a fresh interpreter, whose allocator nothing in the test session has set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, json, sys
import torch

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
kept = None
if sys.argv[1] == "keep":
    from spmlkit.allocator import keep_freed_memory
    kept = keep_freed_memory()
before = libc.mallinfo2()
block = torch.zeros(12_000_000)  # 48 MB: above glibc's largest default mmap threshold (32 MB)
during = libc.mallinfo2()
print(json.dumps({"kept": kept, "mapped": during.hblkhd - before.hblkhd, "heap": during.arena - before.arena}))
"""


def _glibc_has_mallinfo2() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


needs_glibc = pytest.mark.skipif(not _glibc_has_mallinfo2(), reason="needs Linux with glibc 2.33 or later "
                                 "(mallinfo2), which says where malloc's memory lives")


def _allocate(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_glibc
def test_a_large_tensor_comes_from_the_heap_once_freed_memory_is_kept() -> None:
    plain, kept = _allocate("plain"), _allocate("keep")
    assert plain["kept"] is None and plain["mapped"] >= 48_000_000  # glibc maps it on its own
    assert kept["kept"] is True
    assert kept["mapped"] == 0 and kept["heap"] >= 48_000_000  # the heap serves it instead


def test_elsewhere_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    from spmlkit import allocator

    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False
