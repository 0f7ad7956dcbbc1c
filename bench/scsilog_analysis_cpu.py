"""The kernel-log layer's analysis alone (the batches' main-thread CPU, the parse excluded):
the log's event blocks are read first, then analysed from memory.

    python bench/scsilog_analysis_cpu.py LOG [--runs 3]
"""
from __future__ import annotations

import argparse
import time

from scsitrace import core, parsers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    capture = parsers.parse(args.log, "auto", strict=True)
    blocks = list(capture.chunks())
    events = sum(b.height for b in blocks)

    def chunks():
        yield from blocks
    best = None
    for _ in range(args.runs):
        capture.chunks = chunks
        t0 = time.process_time()
        a = core.analyze(capture, core.Options(series=False))
        cpu = time.process_time() - t0
        best = cpu if best is None else min(best, cpu)
    print(f"{args.log}: {events} events, {a.ios_completed} paired; analysis {best:.3f} s CPU "
          f"= {best / max(events, 1) * 1e9:.0f} ns an event")


if __name__ == "__main__":
    main()
