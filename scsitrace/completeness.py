"""Is a capture complete? Notes that say where it is not, and which figures that changes.

Layer-neutral statements built from what each layer's analysis already has: unpaired URBs
and commands (usb), commands without an end (scsilog). Parsers state what only the file
shows (missing per-CPU blktrace files and sequence gaps: parsers/_blktrace_gaps.py; event
counters of ftrace and blkparse text: parsers/_counters.py).
"""
from __future__ import annotations

import polars as pl

SRT_FIGURES = "the response-time table (SRT) and the stage percentages"


def usb_notes(no_submit: int, no_complete: int, ios: pl.DataFrame) -> list[str]:
    """URBs whose submit or completion is not in the capture (how many of each), and commands
    left unpaired (by reason), each with the figures they leave out."""
    unpaired = {}
    if ios.height and "reason" in ios.columns:
        unpaired = dict(ios.filter(pl.col("reason").is_not_null()).group_by("reason").len().iter_rows())
    return usb_notes_counted(int(no_submit), int(no_complete), unpaired)


def usb_notes_counted(no_submit: int, no_complete: int, unpaired: dict) -> list[str]:
    """`usb_notes` from the counts: URBs without submit, without completion, unpaired
    commands per reason."""
    notes = []
    if no_submit or no_complete:
        parts = []
        if no_submit:
            parts.append(f"{no_submit} completion(s) without their submit (the capture started mid-URB)")
        if no_complete:
            parts.append(f"{no_complete} submit(s) without their completion (the capture ended, or lost "
                         "events)")
        notes.append("unpaired URBs: " + "; ".join(parts) + f"; they are not in {SRT_FIGURES}")
    if unpaired:
        listed = "; ".join(f"{unpaired[why]} x {why}" for why in sorted(unpaired))
        notes.append(f"{sum(unpaired.values())} command(s) unpaired ({listed}): counted, "
                     f"without a response time, not in {SRT_FIGURES}")
    return notes


def unusual_notes(analysis) -> list[str]:
    """Legal but unusual captures, said in so many words: a single record (nothing to time),
    no elapsed time, a bus trace of nothing but BUS FREE."""
    notes = []
    records = analysis.capture.records
    if records.read == 1:
        notes.append("the capture holds a single record: no interval can be measured")
    elif analysis.elapsed_ns == 0 and records.read > 1:
        notes.append("all records carry the same time: elapsed time 0, no rates or percentages")
    if analysis.layer == "bus" and analysis.elapsed_ns > 0 and analysis.ios_completed == 0:
        phases = analysis.segments["phase"].unique().to_list() if analysis.segments.height else []
        if phases == ["BUS FREE"]:
            notes.append("the bus is free for the whole trace: no arbitration, selection or I/O in it")
    return [n for n in notes if n not in analysis.notes]
