"""How a scsitrace run uses the C heap.

An analysis allocates and frees many large temporary arrays (hundreds of MB for a 5 M-event
trace). By default glibc serves each large block with its own mmap and gives it back to the
kernel when freed, so the next array costs fresh pages that the kernel must zero: measured
at about 0.3 ns per byte here, a quarter of the blktrace analysis' time. Served from the heap
and kept there when freed, the memory is reused instead; the peak stays the same.

Worker threads (the per-file decode, the block machine) would otherwise get heaps of their own
(glibc arenas, at most 64 MB each), which serve larger blocks with fresh mmaps whatever the
settings: one arena for all threads keeps their blocks in the reused heap too. glibc fixes the
number of arenas when a thread first needs one, so this must run before any thread allocates:
the CLI calls it first thing, before importing numpy.
"""
from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8       # mallopt parameters (glibc malloc.h)
KEEP_BYTES = 2**31 - 1                       # free memory kept at the heap's top (mallopt takes an int)


def keep_freed_memory() -> bool:
    """Large blocks from the heap, freed memory kept for reuse (glibc only; elsewhere a no-op).
    Returns whether it applied."""
    try:
        mallopt = ctypes.CDLL(None).mallopt     # the interpreter's own C library (no ctypes.util search)
    except (OSError, AttributeError):
        return False
    return (bool(mallopt(M_ARENA_MAX, 1)) and bool(mallopt(M_MMAP_MAX, 0))
            and bool(mallopt(M_TRIM_THRESHOLD, KEEP_BYTES)))


def release_freed_memory() -> None:
    """Gives the heap's free memory back to the kernel (glibc's malloc_trim; elsewhere a
    no-op): after building a large frame from compiled rows and numpy columns, whose freed
    memory polars' own allocator cannot reuse."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
