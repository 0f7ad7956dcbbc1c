"""VCD reader benchmark: a level-3 (REQ/ACK + DB) bus trace of a few million value changes.

Writes the same transitions as a scsimon-style VCD (8-bit `data` vector) and an active-low
logic-analyzer VCD (eight DB wires, sigrok-style lines), and the same data as ancot-text.
Prints, for each, transitions/s and value changes/s of `parse` + consuming every chunk,
with peak memory (fresh child process), and ratios against:
- the ancot-text reader on the same transitions (our other bus-level reader);
- pywellen (the Rust VCD reader behind the Surfer waveform viewer), when installed:
  loading the file and streaming every mapped signal's changes, and it also cross-checks
  the number of changes per signal against ours.
Not a test.

    python bench/bench_vcd.py [--transitions 2000000] [--file F.vcd]

--file measures one existing VCD instead (e.g. `scsitrace simulate --level 3 --format vcd
--duration 2.18`: 438 MB), against pywellen.
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
SIGNALS = ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]


def build_frame(n_target: int) -> pl.DataFrame:
    """Tile a level-3 model of 4 targets doing 8 KiB reads and writes to n transitions."""
    from busmodel import BusBuilder
    b = BusBuilder(level=3)
    b.bus_free()
    read10 = bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 16, 0])
    payload = bytes(range(256)) * 16
    ios = [b.command(t, read10, disconnect_after_command=True)[0] for t in (0, 1, 2, 3)]
    for t, io in zip((0, 1, 2, 3), ios):
        b.reconnect(t, io, data_in=payload[:4096], disconnect_again=True)
        b.reconnect(t, io, data_in=payload[4096:])
    b.bus_free()
    unit = b.transitions()
    period = int(unit["t_ns"][-1]) + 50
    reps = max(1, -(-n_target // unit.height))
    offsets = np.repeat(np.arange(reps, dtype=np.int64) * period, unit.height)
    frame = pl.concat([unit] * reps).with_columns(pl.col("t_ns") + offsets)
    return frame.with_columns(pl.lit(None, dtype=pl.Boolean).alias("dbp"))


def child(mode: str, path: str) -> None:
    from scsitrace import parsers
    t0, c0 = time.perf_counter(), time.process_time()
    if mode.startswith("wellen"):
        n, changes = _wellen(path, stream=mode == "wellen-stream")
    else:
        cap = parsers.parse(path, mode)
        n = sum(len(c) for c in cap.chunks())
        changes = cap.records.read
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{n} {changes} {dt:.3f} {_peak_mib():.0f} {cpu:.3f}")


def _peak_mib() -> float:
    """VmHWM of this process (ru_maxrss would include the parent's pages from before exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _wellen(path: str, stream: bool) -> tuple[int, int]:
    """Load with pywellen the signals our reader maps (Rust only), and optionally stream
    their changes through a Python callback (what a Python user of pywellen must do)."""
    import pywellen
    from scsitrace.parsers import vcd
    mapped = set(vcd.parse(path).meta["mapping"].values())
    wave = pywellen.Waveform(path)
    wanted = [v for v in wave.all_vars() if v.full_name in mapped]
    for v in wanted:
        v.signal
    count = [0]
    if stream:
        def seen(_time, _signal, _value):
            count[0] += 1
        wave.stream_changes(seen, wanted)
    return 0, count[0]


def run_child(mode: str, path: Path):
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(path)], capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]), float(out[2]), float(out[3]), float(out[4])


def mapped_changes(path: Path) -> int:
    """Value changes of mapped signals, counted by our reader's rules (for the cross-check)."""
    from scsitrace.parsers import _vcd_header, vcd
    cap = vcd.parse(str(path))
    codes = {cap_var.code for cap_var in _vcd_header._HeaderReader(str(path)).read().vars
             if cap_var.path in set(cap.meta["mapping"].values())}
    n = 0
    with open(path) as fh:
        body = False
        for line in fh:
            if line.startswith("$enddefinitions"):
                body = True
                continue
            if not body:
                continue
            toks = line.split()
            i = 0
            while i < len(toks):
                tok = toks[i]
                if tok[0] in "bB":
                    n += toks[i + 1] in codes
                    i += 2
                    continue
                if tok[0] in "01xXzZ" and tok[1:] in codes:
                    n += 1
                i += 1
    return n


def compare_file(path: Path) -> None:
    """Our reader and pywellen's load of the same file, in turn, three times."""
    mb = os.path.getsize(path) / 1e6
    for _ in range(3):
        n, records, dt, peak, cpu = run_child("vcd", path)
        _, _, l_dt, l_peak, l_cpu = run_child("wellen-load", path)
        print(f"vcd {mb:.0f} MB: ours {dt:.2f} s ({cpu:.2f} CPU s, {mb / dt:.0f} MB/s, peak {peak:.0f} MiB, "
              f"{n:,} transitions) | pywellen load {l_dt:.2f} s ({l_cpu:.2f} CPU s, peak {l_peak:.0f} MiB): "
              f"ours/pywellen wall {dt / l_dt:.2f}x, CPU {cpu / l_cpu:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transitions", type=int, default=2_000_000)
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--file")
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.file:
        compare_file(Path(args.file))
        return
    import gen_vcd
    from scsitrace.parsers import ancot
    DATA.mkdir(exist_ok=True)
    stem = DATA / f"bus-l3-{args.transitions}"
    files = {"scsimon": stem.with_suffix(".scsimon.vcd"), "la_bits": stem.with_suffix(".la.vcd")}
    text = stem.with_suffix(".ancot")
    if not all(p.exists() for p in [*files.values(), text]):
        t0 = time.perf_counter()
        frame = build_frame(args.transitions)
        for style, path in files.items():
            gen_vcd.write(path, frame, signals=SIGNALS, data=["DB"], style=style, timescale="1 ns")
        ancot.write(str(text), frame, signals=SIGNALS, data=["DB"], tick_ns=1)
        print(f"generated {frame.height:,} transitions in {time.perf_counter() - t0:.1f} s")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: wall times suffer on a busy "
          "machine, CPU seconds less)")
    n_a, rec_a, dt_a, peak_a, cpu_a = run_child("ancot", text)
    print(f"ancot-text {os.path.getsize(text) / 2**20:.0f} MiB: {n_a:,} transitions in {dt_a:.2f} s "
          f"({cpu_a:.2f} CPU s) = {n_a / dt_a / 1e6:.2f} M transitions/s, peak {peak_a:.0f} MiB")
    try:
        import pywellen  # noqa: F401
        have_wellen = True
    except ImportError:
        have_wellen = False
        print("pywellen not installed: no comparison with it (pip install pywellen)")
    for style, path in files.items():
        n, records, dt, peak, cpu = run_child("vcd", path)
        print(f"vcd {style} {os.path.getsize(path) / 2**20:.0f} MiB: {n:,} transitions, {records:,} "
              f"timestamps+changes in {dt:.2f} s ({cpu:.2f} CPU s) = {n / dt / 1e6:.2f} M transitions/s, "
              f"{records / dt / 1e6:.2f} M records/s, peak {peak:.0f} MiB; "
              f"ancot-text/vcd CPU ratio {cpu_a / cpu:.2f} (same transitions)")
        if have_wellen:
            _, _, l_dt, l_peak, l_cpu = run_child("wellen-load", path)
            _, w_changes, w_dt, w_peak, w_cpu = run_child("wellen-stream", path)
            ours = mapped_changes(path)
            print(f"  pywellen load of the mapped signals (Rust): {l_dt:.2f} s ({l_cpu:.2f} CPU s), "
                  f"peak {l_peak:.0f} MiB; ours/pywellen: wall {dt / l_dt:.2f}x, CPU {cpu / l_cpu:.2f}x, "
                  f"peak {peak / l_peak:.2f}x")
            print(f"  pywellen load + Python stream: {w_changes:,} changes in {w_dt:.2f} s ({w_cpu:.2f} CPU s), "
                  f"peak {w_peak:.0f} MiB, CPU ratio {w_cpu / cpu:.2f}; changes counted by our tokenizer "
                  f"rules {ours:,} ({'same' if ours == w_changes else 'DIFFERENT'})")


if __name__ == "__main__":
    main()
