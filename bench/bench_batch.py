"""Benchmark: one `scsitrace batch` call against one `scsitrace analyze` process per trace.

    python bench/bench_batch.py [--traces 200] [--jobs 2] [--sample 200]

Makes a directory of N small traces (copies of the committed bus fixtures under
fixtures/bus/, ancot-text and VCD, 3-14 KB each, cycled), then times as whole processes:

  batch:     `scsitrace batch DIR -o OUT --jobs J` (one call: J worker processes, each
             started once)
  separate:  `scsitrace analyze TRACE --json FILE` once per trace, J at a time (as
             `xargs -P J` would); with --sample S < N only S of them are run and the
             time is scaled to N

and prints wall and CPU seconds of each, the ratios separate/batch (the issue's target:
10x), and the peak RSS of the largest single process. It also checks that the batch's
rows equal the separate runs' JSON (elapsed time, I/Os, every category's total) for the
traces both analysed. Wall-clock ratios swing with the machine's load; the CPU ratio is
the steadier figure on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "bus")
SMALL = 64 << 10


def small_traces() -> list[str]:
    out = []
    for case in sorted(os.listdir(FIXTURES)):
        for name in os.listdir(os.path.join(FIXTURES, case)):
            path = os.path.join(FIXTURES, case, name)
            if name.startswith("trace.") and os.path.getsize(path) <= SMALL:
                out.append(path)
    return out


def make_corpus(d: str, n: int) -> list[str]:
    sources = small_traces()
    paths = []
    for i in range(n):
        src = sources[i % len(sources)]
        dest = os.path.join(d, f"{i:04d}-{os.path.basename(os.path.dirname(src))}{os.path.splitext(src)[1]}")
        shutil.copy(src, dest)
        paths.append(dest)
    return paths


def children() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_maxrss


def run_parallel(cmds: list[list[str]], jobs: int) -> None:
    running: list[subprocess.Popen] = []
    for cmd in cmds:
        while len(running) >= jobs:
            running[0].wait()
            running = [p for p in running if p.poll() is None]
        running.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for p in running:
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sample", type=int, default=None, help="separate processes to run (default: all)")
    args = ap.parse_args()
    exe = shutil.which("scsitrace", path=os.path.dirname(sys.executable)) or "scsitrace"
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus")
        os.makedirs(corpus)
        paths = make_corpus(corpus, args.traces)
        out = os.path.join(tmp, "out")

        cpu0, _ = children()
        t = time.perf_counter()
        subprocess.run([exe, "batch", corpus, "-o", out, "--jobs", str(args.jobs)], check=True,
                       stdout=subprocess.DEVNULL)
        batch_wall = time.perf_counter() - t
        batch_cpu, batch_rss = children()
        batch_cpu -= cpu0

        sample = paths[:args.sample] if args.sample else paths
        jsons = os.path.join(tmp, "json")
        os.makedirs(jsons)
        cmds = [[exe, "analyze", p, "--json", os.path.join(jsons, os.path.basename(p) + ".json")] for p in sample]
        cpu0, _ = children()
        t = time.perf_counter()
        run_parallel(cmds, args.jobs)
        scale = len(paths) / len(sample)
        sep_wall = (time.perf_counter() - t) * scale
        sep_cpu, sep_rss = children()
        sep_cpu = (sep_cpu - cpu0) * scale

        import polars as pl
        rows = {r["trace"]: r for r in pl.read_parquet(os.path.join(out, "summary.parquet")).iter_rows(named=True)}
        for p in sample:
            alone = json.load(open(os.path.join(jsons, os.path.basename(p) + ".json")))
            row = rows[p]
            assert row["status"] == "ok", (p, row["error"])
            assert (row["elapsed_ns"], row["ios_completed"]) == (alone["elapsed_ns"], alone["ios_completed"]), p
            assert all(row[f"total_ns.{c['name']}"] == c["total_ns"] for c in alone["categories"]), p

    n = len(paths)
    scaled = f" (scaled from {len(sample)})" if len(sample) != n else ""
    print(f"{n} small traces, {args.jobs} at a time")
    print(f"batch:    {batch_wall:7.2f} s wall  {batch_cpu:7.2f} s CPU  ({n / batch_wall:6.1f} traces/s)")
    print(f"separate: {sep_wall:7.2f} s wall  {sep_cpu:7.2f} s CPU{scaled}")
    print(f"ratio separate/batch: {sep_wall / batch_wall:.1f}x wall, {sep_cpu / batch_cpu:.1f}x CPU (target 10x)")
    print(f"peak RSS of one process: {max(batch_rss, sep_rss) / 1024:.0f} MiB "
          f"(children's largest; batch alone {batch_rss / 1024:.0f} MiB)")
    print("rows checked against the separate runs' JSON: equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
