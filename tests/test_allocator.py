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
if sys.argv[1] in ("keep", "elsewhere"):
    from spmlkit import allocator
    if sys.argv[1] == "elsewhere":  # as on macOS or Windows, in a process whose C library is glibc's
        allocator.sys = type("OtherPlatform", (), {"platform": "darwin"})
    kept = allocator.keep_freed_memory()
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
    """Off Linux it says it changed nothing, and it did not. Where glibc is at hand (so that a
    change would show), a fresh interpreter that takes itself for macOS calls it, and glibc still
    maps a large block on its own there, as in a process that never called it."""
    from spmlkit import allocator

    if _glibc_has_mallinfo2():  # asked before this process, too, takes itself for macOS below
        elsewhere = _allocate("elsewhere")
        assert elsewhere["kept"] is False
        assert elsewhere["mapped"] >= 48_000_000, \
            "the allocator was changed off Linux: glibc no longer maps large blocks"
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False
