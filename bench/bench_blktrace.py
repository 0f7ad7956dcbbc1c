"""Benchmark: `scsitrace analyze` on per-CPU blktrace captures against `blkparse -d` + `btt`, whole
processes side by side, at 1x, 4x and 16x a base of about 5 M events (issue 29's sizes, 1 M, 5 M
and 50 M events: `--base-ios 143000 --scales 1,5,50`).

    python bench/bench_blktrace.py [--scales 1,4,16] [--base-ios 700000] [--repeat 1]
                                   [--reader-only] [--no-tools]
    python bench/bench_blktrace.py --read BASE      (the reader alone, one process: what it prints)

Generates (once) each capture under bench/data/ with tests/gen_blktrace.py (merges,
requeues, splits, dm remaps, plug/unplug), in pieces of the base size appended to the
per-CPU files (times, sectors and sequence numbers continued), so generating stays in
bounded memory. Per scale it prints, each as wall seconds and peak RSS of the process:

  reader:    the blktrace reader alone: every chunk of the stream read and dropped
  ours:      `scsitrace analyze BASE --json FILE` (whatever the block analysis on this checkout is)
  pipeline:  `blkparse -i BASE -d DUMP -o /dev/null`, then `btt -i DUMP` (wall: the sum; peak:
             the larger)

and the ratios pipeline / ours of wall time and of CPU time (user + sys: on a shared machine
the steadier figure), target >= 10x, and whether our ALL stage table equals btt's. With
--repeat N the runs alternate (ours, the pipeline, ours...) and the fastest of each is kept.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
DATA = os.path.join(HERE, "data")

from scsitrace import heap  # noqa: E402

heap.keep_freed_memory()         # as the scsitrace command does: before any import starts a thread

PERIOD_NS = 20_000               # gen_blktrace.workload's default: one I/O per period
SECTORS = 256                    # gen_blktrace.workload: sectors per I/O slot


def generate(base: str, n_ios: int, pieces: int) -> None:
    """`pieces` workloads of n_ios I/Os, one after the other in time (each from the last event
    of the one before, so each per-CPU file stays in time order) and on the disk."""
    import numpy as np
    import gen_blktrace as gen
    if os.path.exists(base + ".blktrace.0"):
        return
    os.makedirs(DATA, exist_ok=True)
    t = time.perf_counter()
    seq, after = {}, 0
    for k in range(pieces):
        ev = gen.workload(n_ios, seed=5 + k)
        ev["time"] += after         # after the last event of the piece before: no file goes back in time
        after = int(ev["time"].max()) + PERIOD_NS
        shift = k * n_ios * SECTORS
        ev["sector"] += shift
        ev["pdu_a"] = np.where(ev["action"] & 0xFFFF == gen.ACT["X"], ev["pdu_a"] + shift, ev["pdu_a"])
        ev["pdu_b"] = np.where(ev["pdu_kind"] == gen.PDU_REMAP, ev["pdu_b"] + shift, ev["pdu_b"])
        for cpu in (0, 1):
            sel = ev["cpu"] == cpu
            part = {name: col[sel] for name, col in ev.items()}
            with open(f"{base}.blktrace.{cpu}", "ab" if k else "wb") as fh:
                fh.write(gen.encode(part, seq_start=seq.get(cpu, 1), names=gen.PIDS if k == 0 and cpu == 0 else {}))
            seq[cpu] = seq.get(cpu, 1) + int(sel.sum())
    print(f"generated {base}.blktrace.* in {time.perf_counter() - t:.1f} s", file=sys.stderr)


def measured(cmd: list[str], **kw) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS in GB, stdout, CPU seconds) of one run of a command, as a whole
    process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **kw)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}")
    return wall, usage.ru_maxrss / 1e6, out, usage.ru_utime + usage.ru_stime


def best(runs: list[tuple]) -> tuple:
    """The fastest run (its stdout), with the largest peak and the least CPU of all runs."""
    fastest = min(runs, key=lambda r: r[0])
    return (fastest[0], max(r[1] for r in runs), fastest[2], min(r[3] for r in runs))


def read_only(base: str) -> None:
    """The reader alone (this process is what --reader measures)."""
    from scsitrace.parsers import blktrace
    cap = blktrace.parse(base, eager=False)
    n = 0
    for part in cap.chunks():
        n += len(part["t_ns"])
    print(json.dumps({"events": n, "records": cap.records.read}))


def pipeline(base: str, tmp: str) -> tuple:
    """`blkparse -i BASE -d DUMP -o /dev/null`, then `btt -i DUMP`: wall and CPU summed, the
    larger peak, btt's report."""
    dump = os.path.join(tmp, "dump")
    parse = measured(["blkparse", "-i", base, "-d", dump, "-o", "/dev/null"])
    btt = measured(["btt", "-i", dump], cwd=tmp)
    return parse[0] + btt[0], max(parse[1], btt[1]), btt[2], parse[3] + btt[3]


def btt_all(text: str) -> dict:
    sec = text.split("All Devices ====================")[1].split("====================")[0]
    rows = {}
    for line in sec.splitlines():
        m = re.match(r"^(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4), int(m.group(5)))
    return rows


def ours_all(summary: dict) -> dict:
    rows = {r["name"]: (f"{r['min_ns'] / 1e9:.9f}", f"{(r['total_ns'] / 1e9) / r['n']:.9f}",
                        f"{r['max_ns'] / 1e9:.9f}", r["n"])
            for r in summary.get("stages", []) if r["device"] == "all" and r["n"]}
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="1,4,16", help="multiples of the base capture (comma-separated)")
    ap.add_argument("--base-ios", type=int, default=700_000, help="I/Os of the 1x capture (about 7 events each)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--reader-only", action="store_true", help="time the reader alone, not the analysis")
    ap.add_argument("--no-tools", action="store_true", help="do not run blkparse and btt")
    ap.add_argument("--read", metavar="BASE", help=argparse.SUPPRESS)
    ap.add_argument("--generate", nargs=3, metavar=("BASE", "IOS", "PIECES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read:
        read_only(args.read)
        return 0
    if args.generate:
        generate(args.generate[0], int(args.generate[1]), int(args.generate[2]))
        return 0
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    tools = not args.no_tools and shutil.which("blkparse") and shutil.which("btt")
    print(f"{'scale':>5} {'events':>12} {'GB in':>6} | {'reader s':>8} {'GB':>5} | {'ours s':>7} {'cpu s':>6} {'GB':>5} | "
          f"{'blkparse -d + btt s':>19} {'cpu s':>6} {'GB':>5} | {'wall':>6} {'cpu':>6} | ALL = btt")
    for scale in (int(s) for s in args.scales.split(",")):
        base = os.path.join(DATA, f"blk{args.base_ios}" + (f"x{scale}" if scale > 1 else ""))
        if not os.path.exists(base + ".blktrace.0"):   # in a child: a process forked after generating
            subprocess.run([sys.executable, __file__, "--generate", base, str(args.base_ios), str(scale)],
                           check=True)                  # would inherit its peak RSS (ru_maxrss)
        size = sum(os.path.getsize(f"{base}.blktrace.{c}") for c in (0, 1)) / 1e9
        reader = best([measured([sys.executable, __file__, "--read", base]) for _ in range(args.repeat)])
        events = json.loads(reader[2])["events"]
        row = f"{scale:>4}x {events:>12,} {size:>6.2f} | {reader[0]:>8.2f} {reader[1]:>5.2f} |"
        if args.reader_only:
            print(row, flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "s.json")
            ours_runs, pipe_runs = [], []
            for _ in range(args.repeat):            # interleaved: a drift of the machine hits both
                ours_runs.append(measured([scsitrace, "analyze", base, "--json", out]))
                if tools:
                    pipe_runs.append(pipeline(base, tmp))
            ours = best(ours_runs)
            with open(out) as fh:
                summary = json.load(fh)
            row += f" {ours[0]:>7.2f} {ours[3]:>6.2f} {ours[1]:>5.2f} |"
            if not tools:
                print(row + " (blkparse/btt not installed)", flush=True)
                continue
            pipe = best(pipe_runs)
        ref = btt_all(pipe[2])
        same = {k: v for k, v in ours_all(summary).items() if k in ref or k != "S2G"} == ref
        print(row + f" {pipe[0]:>19.2f} {pipe[3]:>6.2f} {pipe[1]:>5.2f} | {pipe[0] / ours[0]:>5.1f}x "
              f"{pipe[3] / ours[3]:>5.1f}x | {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
