"""Bus layer benchmark (issue 2): a level-2 (REQ/ACK) trace of >= 10 M transitions.

Prints transitions/s for ancot-text parse + analyze, for analysis of the in-memory frame,
and peak memory of each (measured in a fresh child process). Each is also shown with a
first call of the compiled passes (the Rust extension module's load: milliseconds; with
numba it was its import and cached code, about 1 s per process) outside the timing. Not a
test.

    python bench/bench_bus.py [--transitions 10000000]
    python bench/bench_bus.py --whole FILE [--repeat 3]

--whole: `scsitrace analyze FILE --json` as a whole process against `wc -l FILE` (reading
every line of the same file: the floor of any line-based reader), run in turn (ours, wc,
ours...): wall and CPU seconds and peak RSS of each, the ratios ours / wc. Issue 29's figure
is the 77 M-transition level-2 trace of `scsitrace simulate --level 2 --duration 6.64`.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
DATA = HERE / "data"


def build_frame(n_target: int) -> pl.DataFrame:
    """Tile a model of 4 targets doing 32 KiB reads (disconnect, reconnect, data) to n transitions."""
    from busmodel import BusBuilder
    b = BusBuilder(level=2)
    b.bus_free()
    read10 = bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 64, 0])
    ios = [b.command(t, read10, disconnect_after_command=True)[0] for t in (0, 1, 2, 3)]
    for t, io in zip((0, 1, 2, 3), ios):
        b.reconnect(t, io, data_in=bytes(16384), disconnect_again=True)
        b.reconnect(t, io, data_in=bytes(16384))
    b.bus_free()
    unit = b.transitions()
    period = int(unit["t_ns"][-1]) + 50
    reps = max(1, -(-n_target // unit.height))
    t = unit["t_ns"].to_numpy()
    offsets = np.repeat(np.arange(reps, dtype=np.int64) * period, unit.height)
    return pl.DataFrame({
        "t_ns": np.tile(t, reps) + offsets,
        "lines": np.tile(unit["lines"].to_numpy(), reps),
        "db": pl.Series([None] * (unit.height * reps), dtype=pl.UInt8),
        "dbp": pl.Series([None] * (unit.height * reps), dtype=pl.Boolean),
    })


def child(mode: str, path: str) -> None:
    from scsitrace import core, parsers
    from scsitrace.model import Capture
    if mode == "text-warm":  # the scanner's first call (the extension module's load) outside the timing
        from scsitrace.parsers import _ancot_scan
        _ancot_scan.scan_block(b"0 0\n", _ancot_scan.Layout(np.array([1], dtype=np.uint16), 0))
    t0 = time.perf_counter()
    if mode.startswith("text"):
        cap = parsers.parse(path)
    else:
        frame = pl.read_parquet(path)
        cap = Capture(layer="bus", path=path, format="parquet",
                      meta={"tick_ns": 50, "initiator": 7,
                            "signals": ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]})
        if mode == "frame-warm":  # a first analysis (the compiled passes' load) outside the timing
            warm = Capture(layer="bus", path=path, format="parquet", meta=dict(cap.meta))
            warm.chunks = lambda: iter([frame.head(1000)])
            core.analyze(warm)
        cap.chunks = lambda: iter([frame])
        t0 = time.perf_counter()  # the frame is in memory: time the analysis alone
    if mode == "converted":
        cap = parsers.parse(path)  # `scsitrace convert` output, streamed by row groups
        t0 = time.perf_counter()
    a = core.analyze(cap)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{a.source['transitions']} {dt:.3f} {peak:.0f} {a.ios_completed}")


def run_child(mode: str, path: Path):
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(path)], capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2]), int(out[3])


def whole_process(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one run of a command, its output discarded."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def whole(path: str, repeat: int) -> None:
    """The analysis of `path` against `wc -l` on it, interleaved; the best of each figure."""
    import tempfile
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    ours, wc = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            ours.append(whole_process([scsitrace, "analyze", path, "--json", os.path.join(tmp, "s.json")]))
            wc.append(whole_process(["wc", "-l", path]))
    size = os.path.getsize(path)
    for name, runs in (("scsitrace analyze --json", ours), ("wc -l", wc)):
        wall, cpu, peak = min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)
        # wc's own peak is a few MiB: its figure is this (numpy, polars) process' size at the fork
        shown = f"peak {peak:6.0f} MiB" if runs is ours else "peak (this process at the fork)"
        print(f"{name:<26} {wall:7.2f} s wall ({size / wall / 1e6:6.0f} MB/s) {cpu:7.2f} s CPU  {shown}")
    print(f"ratio ours / wc -l: wall {min(r[0] for r in ours) / min(r[0] for r in wc):.2f}x, "
          f"CPU {min(r[1] for r in ours) / min(r[1] for r in wc):.2f}x "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transitions", type=int, default=10_000_000)
    ap.add_argument("--whole", metavar="FILE", help="whole-process analyze of FILE against wc -l")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.whole:
        whole(args.whole, args.repeat)
        return
    DATA.mkdir(exist_ok=True)
    text = DATA / f"bus-l2-{args.transitions}.ancot"
    parquet = text.with_suffix(".parquet")
    if not text.exists():
        t0 = time.perf_counter()
        frame = build_frame(args.transitions)
        frame.write_parquet(parquet)
        from scsitrace.parsers import ancot
        with open(text, "w") as fh:
            w = ancot.Writer(fh, signals=["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"])
            for i in range(0, frame.height, 2_000_000):
                w.write(frame.slice(i, 2_000_000))
        print(f"generated {frame.height:,} transitions ({os.path.getsize(text) / 2**20:.0f} MiB text) "
              f"in {time.perf_counter() - t0:.1f} s")
    n, dt, peak, ios = run_child("text", text)
    print(f"ancot-text parse+analyze: {n:,} transitions in {dt:.2f} s = {n / dt / 1e6:.2f} M/s, "
          f"peak {peak:.0f} MiB, {ios} I/Os (target >= 5 M/s)")
    n, dt, peak, ios = run_child("text-warm", text)
    print(f"  same, the scanner's first call before the timing: {dt:.2f} s = {n / dt / 1e6:.2f} M/s")
    n, dt, peak, ios = run_child("frame", parquet)
    print(f"in-memory frame analyze:  {n:,} transitions in {dt:.2f} s = {n / dt / 1e6:.2f} M/s, "
          f"peak {peak:.0f} MiB, {ios} I/Os (target >= 20 M/s)")
    n, dt, peak, ios = run_child("frame-warm", parquet)
    print(f"  same, a first analysis of 1000 rows before the timing: {dt:.2f} s = {n / dt / 1e6:.2f} M/s")
    converted = DATA / f"bus-l2-{args.transitions}.converted.parquet"
    if not converted.exists():
        subprocess.run([sys.executable, "-m", "scsitrace.cli", "convert", str(text), "-o", str(converted)],
                       check=True, capture_output=True)
    n, dt, peak, ios = run_child("converted", converted)
    print(f"converted Parquet read+analyze: {n:,} transitions in {dt:.2f} s = {n / dt / 1e6:.2f} M/s, "
          f"peak {peak:.0f} MiB, {ios} I/Os")


if __name__ == "__main__":
    main()
