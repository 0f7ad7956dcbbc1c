"""Is a blktrace capture complete? What the files themselves can tell:

- per-CPU files: blktrace writes `<dev>.blktrace.<cpu>` for every CPU it traced, so a gap in
  the numbers (`.0` and `.2` without `.1`) is a file that is missing; an empty file is a CPU
  that recorded nothing;
- sequence numbers: the kernel numbers each CPU's data records 1, 2, 3...; a jump is records
  lost (relay buffer overruns: the "N events dropped" blktrace prints at the end).

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

import numpy as np

from scsitrace._jit import compiled
from scsitrace._keys import dense_ids

from ._bytes import u32

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


def sequence_gaps(b: np.ndarray, offs: np.ndarray, order: str, seq_at: int, cpu_at: int) -> dict[int, int]:
    """{cpu: records missing} from the jumps in each CPU's sequence numbers, data records only
    (in file order; a sequence that restarts is a new trace session, not a loss). Two
    compiled passes: the fields read in place, then each record against its CPU's last."""
    if len(offs) < 2:
        return {}
    seq, cpu = _fields(b, offs.astype(np.int64), seq_at, cpu_at, order != "<")
    ids, first = dense_ids(cpu)
    lost = _lost(seq, ids, len(first))
    return {int(cpu[first[k]]): int(lost[k]) for k in np.flatnonzero(lost)}


@compiled
def _fields(b, offs, seq_at, cpu_at, big):
    seq, cpu = np.empty(offs.shape[0], np.int64), np.empty(offs.shape[0], np.int64)
    for i in range(offs.shape[0]):
        seq[i] = np.int64(u32(b, offs[i] + seq_at, big))
        cpu[i] = np.int64(u32(b, offs[i] + cpu_at, big))
    return seq, cpu


@compiled
def _lost(seq, ids, n_ids):
    """Per id, the sum of the jumps (step - 1 where a record's sequence number is more than
    one past the last of its id)."""
    last = np.full(n_ids, -1, np.int64)
    lost = np.zeros(n_ids, np.int64)
    for i in range(seq.shape[0]):
        k = ids[i]
        step = seq[i] - last[k]
        lost[k] += step - 1 if last[k] >= 0 and step > 1 else 0
        last[k] = seq[i]
    return lost


def gap_notes(gaps: dict[int, int]) -> list[str]:
    if not gaps:
        return []
    total = sum(gaps.values())
    per = ", ".join(f"CPU {c}: {n}" for c, n in sorted(gaps.items()))
    return [f"incomplete capture: {total} events lost (gaps in the per-CPU sequence numbers; {per}); "
            f"affected: {AFFECTED}"]


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
