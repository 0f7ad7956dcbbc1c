"""Is a blktrace capture complete? What the files themselves can tell:

- per-CPU files: blktrace writes `<dev>.blktrace.<cpu>` for every CPU it traced, so a gap in
  the numbers (`.0` and `.2` without `.1`) is a file that is missing; an empty file is a CPU
  that recorded nothing;
- sequence numbers: the kernel numbers each CPU's data records 1, 2, 3...; a jump is records
  lost (relay buffer overruns: the "N events dropped" blktrace prints at the end). The native
  reader (native/src/block/reader.rs) counts them per file and CPU, in file order (a sequence
  that restarts is a new trace session, not a loss); `gap_notes` states them.

- blktrace's own report (what it prints when it stops: `CPU  N:  E events, ...` and
  `Total: E events (dropped D), ...`), when it was saved beside the capture as
  `<base>.blktrace-stdout.txt` or `blktrace-stdout.txt`: events the kernel dropped (a full
  relay buffer drops an event before it is numbered, so drops leave no sequence gap) and
  CPUs that were traced but whose file is absent (even the last one, which the file numbers
  cannot show).

Each finding is a note naming the figures it affects (the block layer's stage times pair
events of one request, which may be queued on one CPU and completed on another).
"""
from __future__ import annotations

import os
import re

AFFECTED = ("Q2C, D2C and I2D (a request whose completion or dispatch is lost is left unpaired or, "
            "as btt does, paired with a later event of the same sector), the I/O and byte counts, "
            "and the bandwidth")


def file_notes(files: list[tuple[str, int | None]], sizes: list[int]) -> list[str]:
    """Notes for missing and empty per-CPU files (files: (path, cpu from its name))."""
    cpus = [cpu for _, cpu in files if cpu is not None]
    notes = []
    if cpus:
        missing = sorted(set(range(max(cpus) + 1)) - set(cpus))
        if missing:
            base = os.path.basename(files[0][0]).rsplit(".", 1)[0]
            names = ", ".join(f"{base}.{c}" for c in missing)
            notes.append(f"incomplete capture: per-CPU file(s) {names} missing (CPUs {_ranges(missing)} "
                         f"not read); affected: {AFFECTED}")
    empty = [os.path.basename(path) for (path, _), size in zip(files, sizes) if size == 0]
    if empty and len(empty) < len(files):
        notes.append(f"{', '.join(empty)}: empty (that CPU recorded no events)")
    return notes


def gap_notes(gaps: dict[int, int]) -> list[str]:
    if not gaps:
        return []
    total = sum(gaps.values())
    per = ", ".join(f"CPU {c}: {n}" for c, n in sorted(gaps.items()))
    return [f"incomplete capture: {total} events lost (gaps in the per-CPU sequence numbers; {per}); "
            f"affected: {AFFECTED}"]


def disorder_notes(found: list[tuple[str, int]]) -> list[str]:
    """Files whose records go back in time only after the reader's first million records (it
    sorts a capture when that shows among them): merged as read."""
    return [f"{os.path.basename(path)}: {n} records earlier than the record before them in the file, "
            f"after the first million records: merged as read, not sorted; "
            f"affected: {AFFECTED}" for path, n in found if n]


def window_notes(path: str, order, window: int) -> list[str]:
    """A piped stream put in time order as read (parsers/_time_order.py): what did not fit
    its window of one chunk (`window` records)."""
    name = os.path.basename(path)
    if order.sorted_whole:
        return [f"{name}: records out of time order by more than the reorder window ({window:,} records) among "
                f"the first {order.probe:,}: the stream was read whole and sorted (memory grows with the capture)"]
    if order.disorder:
        return [f"{name}: {order.disorder} chunks of records hold records earlier than records of chunks before "
                f"them, after the first {order.probe:,} records: those records are analysed where they were "
                f"read, not in time order; affected: {AFFECTED}"]
    return []


def _ranges(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def report_notes(files: list[tuple[str, int | None]]) -> list[str]:
    """Notes from blktrace's saved report beside the capture (see the module docstring)."""
    first = files[0][0]
    base = first.rsplit(".blktrace.", 1)[0] if ".blktrace." in first else None
    if base is None:
        return []
    where = os.path.dirname(first) or "."
    for name in (base + ".blktrace-stdout.txt", os.path.join(where, "blktrace-stdout.txt")):
        if os.path.isfile(name):
            break
    else:
        return []
    try:
        with open(name, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return []
    notes = []
    dropped = sum(int(n) for n in re.findall(r"\(dropped (\d{1,18})\)", text))
    if dropped:
        notes.append(f"incomplete capture: blktrace reported {dropped} events dropped "
                     f"({os.path.basename(name)}); affected: {AFFECTED}")
    traced = {int(c) for c in re.findall(r"^\s*CPU\s*(\d{1,6}):\s+\d+ events", text, re.M)}
    have = {cpu for _, cpu in files if cpu is not None}
    absent = sorted(traced - have - set(range(max(have) + 1 if have else 0)))
    if absent:
        names = ", ".join(f"{os.path.basename(base)}.blktrace.{c}" for c in absent)
        notes.append(f"incomplete capture: blktrace traced CPUs {_ranges(absent)} but {names} is missing "
                     f"({os.path.basename(name)}); affected: {AFFECTED}")
    return notes
