"""Benchmark: the HTML report (with attribution) of the Table 3 workload's 6.64 s level-2 trace.

Budget from issue 6: written in <= 20 s and <= 10 MB. There is no external tool that
writes this report, so the ratios printed are against that budget; the breakdown shows
where the time goes (one read: bus analysis + attribution's collection; attribution's
report; views; HTML).

    python bench/bench_report.py [--duration 6.64] [--input ancot|parquet]

Generated data goes to bench/data/ (git-ignored): the simulator's trace and its Parquet
conversion, made once.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
BUDGET_S = 20.0
BUDGET_MB = 10.0


def ensure(duration: float) -> tuple[Path, Path]:
    DATA.mkdir(exist_ok=True)
    tag = f"{duration:g}".replace(".", "_")
    ancot = DATA / f"table3_l2_{tag}s.ancot"
    parquet = DATA / f"table3_l2_{tag}s.parquet"
    cli = [sys.executable, "-m", "scsitrace.cli"]
    if not ancot.exists():
        subprocess.run(cli + ["simulate", "-o", str(ancot), "--level", "2", "--duration", str(duration),
                              "--seed", "1"], check=True, cwd=HERE.parent)
    if not parquet.exists():
        subprocess.run(cli + ["convert", str(ancot), "-o", str(parquet)], check=True, cwd=HERE.parent)
    return ancot, parquet


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=6.64)
    ap.add_argument("--input", choices=("ancot", "parquet"), default="parquet")
    args = ap.parse_args()
    ancot, parquet = ensure(args.duration)
    trace = parquet if args.input == "parquet" else ancot

    from scsitrace import core, parsers
    from scsitrace import bandwidth as views
    from scsitrace.reports import attribution, html, summary
    out = DATA / "bench_report.html"
    clock = time.perf_counter
    cpu = time.process_time      # this process's CPU: meaningful on a shared, loaded machine
    t0, c0 = clock(), cpu()
    capture = parsers.parse(str(trace))
    collector = attribution.Collector()      # as the commands do: collect during the one read
    collector.tap(capture)
    analysis = core.analyze(capture)
    t1, c1 = clock(), cpu()
    attr = attribution.attribute(analysis, collector)
    t2, c2 = clock(), cpu()
    s = summary.summary(analysis)
    v = views.views(analysis)
    t3, c3 = clock(), cpu()
    html.write_report(str(out), analysis, s, attribution=attr, views=v)
    t4, c4 = clock(), cpu()
    total = t4 - t0
    mb = os.path.getsize(out) / 1e6
    print(f"input {trace.name}: {analysis.capture.records.read} transitions, {analysis.ios_completed} I/Os, "
          f"{analysis.elapsed_ns / 1e9:.3f} s of bus time")
    print(f"  stage                   wall     cpu (os.cpu_count={os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    print(f"  read, bus analysis and attribution's collection {t1 - t0:7.2f} s {c1 - c0:7.2f} s")
    print(f"  attribution report  {t2 - t1:7.2f} s {c2 - c1:7.2f} s   periodic: "
          + ", ".join(f"{p['component']} every {p['period_bytes']} B x{p['count']}" for p in attr["periodic"]))
    print(f"  summary + views     {t3 - t2:7.2f} s {c3 - c2:7.2f} s")
    print(f"  HTML                {t4 - t3:7.2f} s {c4 - c3:7.2f} s")
    print(f"total {total:.2f} s wall, {c4 - c0:.2f} s cpu = {total / BUDGET_S:.2f} x the {BUDGET_S:g} s budget; "
          f"file {mb:.2f} MB = {mb / BUDGET_MB:.2f} x the {BUDGET_MB:g} MB budget")


if __name__ == "__main__":
    main()
