"""Benchmark: scsitrace's blktrace reader + btt tables against blkparse and btt on the same input.

    python bench/bench_blktrace.py [--ios 700000] [--repeat 3]

Generates (once) a per-CPU blktrace capture of about 5 M events under bench/data/ with
tests/gen_blktrace.py (merges, requeues, splits, dm remaps, plug/unplug), then times:

  ours:      parse all per-CPU files + the full block analysis + every btt table (rendered)
  pipeline:  `blkparse -i BASE -d DUMP -o /dev/null` followed by `btt -i DUMP`
  blkparse:  `blkparse -i BASE -o /dev/null` (text decode only)

and prints events/s and the ratios. Also checks that our ALL table equals btt's on this input.
"""
from __future__ import annotations

import argparse
import io
import os
import resource
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
DATA = os.path.join(HERE, "data")

from scsitrace import heap  # noqa: E402

heap.keep_freed_memory()         # as the scsitrace command does: before any import starts a thread


def generate(base: str, n_ios: int) -> None:
    import gen_blktrace
    if os.path.exists(base + ".blktrace.0"):
        return
    os.makedirs(DATA, exist_ok=True)
    t = time.perf_counter()
    gen_blktrace.write(gen_blktrace.workload(n_ios, seed=5), base)
    print(f"generated {base}.blktrace.* in {time.perf_counter() - t:.1f} s", file=sys.stderr)


def ours(base: str):
    from rich.console import Console
    from scsitrace import core
    from scsitrace.parsers import blktrace
    from scsitrace.reports import btt, summary
    t, cpu = time.perf_counter(), time.process_time()
    cap = blktrace.parse(base)
    t_parse = time.perf_counter() - t
    analysis = core.analyze(cap, core.Options())
    s = summary.summary(analysis)
    console = Console(file=io.StringIO(), width=160)
    for table in btt.tables(s):
        console.print(table)
    return time.perf_counter() - t, t_parse, cap.records.read, s, time.process_time() - cpu


def timed(cmd: list[str], **kw) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of a command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def btt_all(text: str) -> dict:
    sec = text.split("All Devices ====================")[1].split("====================")[0]
    rows = {}
    for line in sec.splitlines():
        m = re.match(r"^(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4), int(m.group(5)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ios", type=int, default=700_000, help="I/Os to generate (about 7 events each)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = os.path.join(DATA, f"bench{args.ios}")
    generate(base, args.ios)
    dump_path = base + ".dump"
    best = min((ours(base) for _ in range(args.repeat)), key=lambda r: r[0])
    t_ours, t_parse, n_events, s, cpu_ours = best
    print(f"events: {n_events:,}")
    print(f"ours (parse + analysis + btt tables): {t_ours:.2f} s wall, {cpu_ours:.2f} s CPU "
          f"({n_events / t_ours / 1e6:.2f} M events/s; parse alone {t_parse:.2f} s)")
    if not (shutil.which("blkparse") and shutil.which("btt")):
        print("blkparse/btt not installed: no ratios")
        return 0
    text = min((timed(["blkparse", "-i", base, "-o", "/dev/null"]) for _ in range(args.repeat)))
    dump = min((timed(["blkparse", "-i", base, "-d", dump_path, "-o", "/dev/null"]) for _ in range(args.repeat)))
    btt = min((timed(["btt", "-i", dump_path], cwd=DATA) for _ in range(args.repeat)))
    pipe_wall, pipe_cpu = dump[0] + btt[0], dump[1] + btt[1]
    print(f"blkparse -i > /dev/null: {text[0]:.2f} s wall, {text[1]:.2f} s CPU ({n_events / text[0] / 1e6:.2f} M/s)")
    print(f"blkparse -d: {dump[0]:.2f} s wall ({n_events / dump[0] / 1e6:.2f} M/s); btt: {btt[0]:.2f} s wall "
          f"({n_events / btt[0] / 1e6:.2f} M/s); pipeline {pipe_wall:.2f} s wall, {pipe_cpu:.2f} s CPU")
    print(f"ratio vs blkparse -d + btt: {pipe_wall / t_ours:.1f}x wall, {pipe_cpu / cpu_ours:.1f}x CPU (target >= 10x)")
    print(f"ratio vs blkparse -i > /dev/null: {text[0] / t_ours:.1f}x wall, {text[1] / cpu_ours:.1f}x CPU")
    ref = btt_all(subprocess.run(["btt", "-i", dump_path], cwd=DATA, capture_output=True, text=True).stdout)
    mine = {r["name"]: (f"{r['min_ns'] / 1e9:.9f}", f"{(r['total_ns'] / 1e9) / r['n']:.9f}",
                        f"{r['max_ns'] / 1e9:.9f}", r["n"]) for r in s["stages"] if r["device"] == "all" and r["n"]}
    mine = {k: v for k, v in mine.items() if k in ref or k != "S2G"}
    print("ALL table equals btt's:", mine == ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
