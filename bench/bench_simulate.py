"""Benchmark: the simulator on the RAID-I Table 3 workload, and the analyzer on its trace.

    python bench/bench_simulate.py [--level 2] [--duration 6.64] [--keep]

Generates the Table 3 workload (4 disks, 32 KB sequential reads, BFR 1/2, readahead, no-copy
host) for 6.64 s of bus time at level 2 (about 80 M transitions) into bench/data/, then
analyses it end to end (`scsitrace analyze --profile raid1990 --json`, in a child process so
its peak memory is its own). Prints, separately:

  generation:  wall and CPU seconds, transitions/s, ratio to the 60 s budget
  analysis:    wall and CPU seconds, peak RSS, ratios to the 10 s / 4 GiB budgets
  Table 3:     each row next to the report's figure and the acceptance band

There is no reference tool for a simulator; the report's Table 3 is the reference.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
GIB = 1 << 30

# Table 3 of the report, and the acceptance bands of issue 3
PAPER = {"Arbitration": 0.06, "Selection": 0.20, "Command": 4.02, "Message Out": 0.72,
         "Message In": 0.22, "Data Transfer": 93.15, "Disconnect/Reconnect": 0.11,
         "Reselection": 0.02, "Status": 0.45, "Bus Free": 1.05}
PAPER_NORMALIZED_US = {"Arbitration": 6.5, "Selection": 22, "Command": 430, "Message Out": 77,
                       "Message In": 24, "Data Transfer": 10000, "Disconnect/Reconnect": 12,
                       "Reselection": 2.0, "Status": 48}


def generate(path: str, level: int, duration: float) -> tuple[float, float, int]:
    from scsitrace.sim import Workload, simulate
    cpu0, t0 = time.process_time(), time.perf_counter()
    res = simulate(Workload(duration_ns=int(round(duration * 1e9))), path, level=level)
    return time.perf_counter() - t0, time.process_time() - cpu0, res.transitions


def analyse(path: str) -> tuple[float, float, int, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "scsitrace.cli", "analyze", path, "--profile", "raid1990",
                          "--io-size", "32768", "--json", "-"], capture_output=True, text=True,
                         cwd=os.path.join(HERE, ".."))
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"analyze failed: {out.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss * 1024, json.loads(out.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", type=int, default=2, choices=(1, 2, 3))
    p.add_argument("--duration", type=float, default=6.64)
    p.add_argument("--keep", action="store_true", help="keep the generated trace")
    args = p.parse_args()
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, f"table3-l{args.level}.ancot")
    gen_wall, gen_cpu, n = generate(path, args.level, args.duration)
    size = os.path.getsize(path)
    print(f"generation: {n:,} transitions, {size / 1e6:,.0f} MB, {gen_wall:.1f} s wall, {gen_cpu:.1f} s CPU, "
          f"{n / gen_wall / 1e6:.2f} M transitions/s; {gen_wall / 60:.2f} x the 60 s budget")
    an_wall, an_cpu, rss, s = analyse(path)
    print(f"analysis:   {an_wall:.1f} s wall, {an_cpu:.1f} s CPU, peak RSS {rss / GIB:.2f} GiB; "
          f"{an_wall / 10:.2f} x the 10 s budget, {rss / (4 * GIB):.2f} x the 4 GiB budget")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"\n{'Table 3 row':<22}{'ours %':>9}{'paper %':>9}{'ours us':>10}{'paper us':>10}")
    for c in s["categories"]:
        norm = c["normalized_ns"]
        print(f"{c['name']:<22}{c['percent']:>9.2f}{PAPER.get(c['name'], float('nan')):>9.2f}"
              f"{(norm / 1000 if norm is not None else float('nan')):>10.1f}"
              f"{PAPER_NORMALIZED_US.get(c['name'], float('nan')):>10.1f}")
    cat = {c["name"]: c for c in s["categories"]}
    checks = [
        ("Data Transfer % (93.15 +- 3)", cat["Data Transfer"]["percent"], abs(cat["Data Transfer"]["percent"] - 93.15) <= 3),
        ("Bus Free % (<= 3)", cat["Bus Free"]["percent"], cat["Bus Free"]["percent"] <= 3),
        ("Command % (4.02 +- 2)", cat["Command"]["percent"], abs(cat["Command"]["percent"] - 4.02) <= 2),
        ("normalized Data Transfer us (10000 +- 15 %)", cat["Data Transfer"]["normalized_ns"] / 1000,
         abs(cat["Data Transfer"]["normalized_ns"] / 1e7 - 1) <= 0.15),
        ("I/Os completed (620 +- 10 %)", s["ios_completed"], abs(s["ios_completed"] / 620 - 1) <= 0.10),
        ("MBytes/sec (2.92 +- 10 %)", s["bandwidth_mib_s"], abs(s["bandwidth_mib_s"] / 2.92 - 1) <= 0.10),
    ]
    print()
    for name, value, ok in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {value:.2f}")
    if not args.keep:
        os.remove(path)
    return 0 if all(ok for _, _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
