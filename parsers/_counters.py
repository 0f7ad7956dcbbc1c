"""Text formats whose writer counts what it wrote: compare the counters with the lines read,
and say what is missing (the error contract: nothing silently lost).

- ftrace's `trace` file: `# entries-in-buffer/entries-written: B/W` (W > B: the ring buffer
  was overwritten, W - B events lost before the file was read) and `CPU:N [LOST M EVENTS]`
  lines (events lost inside the file);
- blkparse's summary: `Events (...): N entries` (fewer event lines than N: lines missing)
  and `Skips: N forward` (blkparse saw N gaps in the per-CPU sequence numbers).
"""
from __future__ import annotations

import polars as pl

FTRACE_ENTRIES = r"entries-in-buffer/entries-written:\s*(\d+)/(\d+)"
FTRACE_LOST = r"^\s*CPU:\s*(\d+) \[LOST (\d+) EVENTS\]"
BLKPARSE_ENTRIES = r"^Events \([^)]*\): (\d+) entries"
BLKPARSE_SKIPS = r"^Skips: (\d+) forward"


def ftrace_counters(lines: pl.DataFrame, counters: dict) -> None:
    """Accumulate ftrace's counters from a block of `t` (text) lines into `counters`."""
    hits = lines.filter(pl.col("t").str.contains("entries-written", literal=True)
                        | pl.col("t").str.contains("[LOST ", literal=True))
    for text in hits["t"].to_list():
        found = pl.Series([text]).str.extract_groups(FTRACE_ENTRIES).struct.unnest().row(0)
        if found[0] is not None:
            counters["in_buffer"], counters["written"] = int(found[0]), int(found[1])
        lost = pl.Series([text]).str.extract_groups(FTRACE_LOST).struct.unnest().row(0)
        if lost[0] is not None and len(lost[1]) <= 18:
            counters.setdefault("lost", {})
            counters["lost"][int(lost[0])] = counters["lost"].get(int(lost[0]), 0) + int(lost[1])


def ftrace_notes(counters: dict) -> list[str]:
    notes = []
    written, kept = counters.get("written"), counters.get("in_buffer")
    if written is not None and kept is not None and len(str(written)) <= 18 and written > kept:
        notes.append(f"incomplete capture: ftrace wrote {written} events but its buffer kept {kept} "
                     f"({written - kept} overwritten before the trace was read); affected: the command "
                     "count, service times and the SERVICE/IDLE split")
    lost = counters.get("lost")
    if lost:
        per = ", ".join(f"CPU {c}: {n}" for c, n in sorted(lost.items()))
        notes.append(f"incomplete capture: ftrace lost {sum(lost.values())} events ({per}); affected: "
                     "commands whose dispatch or done was lost are unpaired, service times and counts")
    return notes


def blkparse_counters(lines: pl.DataFrame, counters: dict) -> None:
    """Accumulate blkparse's summary counters from a block of `t` lines."""
    for rx, key in ((BLKPARSE_ENTRIES, "entries"), (BLKPARSE_SKIPS, "skips")):
        found = lines.select(pl.col("t").str.extract(rx).alias("n")).filter(pl.col("n").is_not_null())
        for n in found["n"].to_list():
            if len(n) <= 18:
                counters[key] = counters.get(key, 0) + int(n)


def blkparse_notes(counters: dict, lines_seen: int) -> list[str]:
    notes = []
    entries = counters.get("entries")
    if entries is not None and entries > lines_seen:
        notes.append(f"incomplete capture: blkparse's summary counts {entries} events, the file holds "
                     f"{lines_seen} event lines ({entries - lines_seen} missing); affected: stage times, "
                     "I/O counts and the bandwidth")
    if counters.get("skips"):
        notes.append(f"incomplete capture: blkparse reports {counters['skips']} skipped events (gaps in the "
                     "per-CPU sequence numbers); affected: stage times, I/O counts and the bandwidth")
    return notes
