"""blkparse's summary blocks (per CPU, `CPU0 (sda):`, and in all, `Total (sda):`) checked
against the event lines of the same text: each counter blkparse printed (Reads/Writes Queued,
Dispatches, Requeued, Completed, Merges; IO and timer unplugs) against the events counted the
way blkparse counts them (by the event's CPU field and its RWBS: W is a write, else a read;
merges are M and F, unplugs U and UT; the events are counted in the compiled scan,
parsers/_blkparse_native.py `Tally`). A summary that disagrees is said in a note: the text
was cut, edited or put together from several runs."""
from __future__ import annotations

import re


BLOCK_START = re.compile(r"^(?:CPU(?P<cpu>\d+)|Total) \((?P<name>[^)]*)\):\s*$")
COUNTER = re.compile(r"(?P<rw>Reads?|Writes?) (?P<what>Queued|Dispatches|Requeued|Completed|Merges):\s+(?P<n>[\d,]+)"
                     r"|(?P<unplug>IO|Timer) unplugs:\s+(?P<u>\d+)")
# blkparse's counter -> the action letters it counts
LETTERS = {"Queued": ("Q",), "Dispatches": ("D",), "Requeued": ("R",), "Completed": ("C",), "Merges": ("M", "F"),
           "IO": ("U",), "Timer": ("UT",)}


def read_counters(lines: list[str], blocks: dict, state: dict) -> None:
    """Add the counters of these summary lines to blocks[(cpu or "total")][counter name];
    `state` carries the current block across calls."""
    for line in lines:
        m = BLOCK_START.match(line.strip())
        if m:
            state["block"] = int(m.group("cpu")) if m.group("cpu") is not None else "total"
            continue
        if line.strip() == "" or not line.startswith((" ", "\t")):
            if not line.startswith((" ", "\t")):
                state["block"] = None
            continue
        key = state.get("block")
        if key is None:
            continue
        for c in COUNTER.finditer(line):
            if c.group("unplug"):
                name, n = f"{c.group('unplug')} unplugs", c.group("u")
            else:
                rw = "Reads" if c.group("rw").startswith("Read") else "Writes"
                name, n = f"{rw} {c.group('what')}", c.group("n")
            n = int(n.replace(",", ""))
            counts = blocks.setdefault(key, {})
            counts[name] = counts.get(name, 0) + n


def _expected(counts: dict, cpu=None) -> dict[str, int]:
    """The counters blkparse would print for these events (one CPU's, or all)."""
    out = {}
    for (c, act, w), n in counts.items():
        if cpu is not None and c != cpu:
            continue
        for what, letters in LETTERS.items():
            if act not in letters:
                continue
            name = f"{what} unplugs" if what in ("IO", "Timer") else f"{'Writes' if w else 'Reads'} {what}"
            out[name] = out.get(name, 0) + n
    return out


def notes(blocks: dict, counts: dict) -> list[str]:
    """One note per summary block whose counters disagree with the events."""
    out = []
    for key in sorted(blocks, key=lambda k: (k == "total", k if k != "total" else 0)):
        want = _expected(counts, None if key == "total" else key)
        printed = blocks[key]
        diffs = [f"{name} {n:,} (events: {want.get(name, 0):,})" for name, n in printed.items()
                 if n != want.get(name, 0)]
        if diffs:
            where = "its total" if key == "total" else f"CPU {key}"
            out.append(f"blkparse's summary disagrees with the event lines for {where}: " + ", ".join(diffs)
                       + " (the text was cut, edited or joined from several runs; the analysis uses the events)")
    return out
