"""sigrok session file (.sr) reader benchmark: 1 G samples of a busy SCSI bus.

Builds (once, cached in bench/data/) a 16-probe .sr file as PulseView writes it from a
16-channel analyzer: BSY SEL ATN MSG C/D I/O REQ ACK and DB0..DB7 (no RST; 2-byte samples),
100 MHz, 4 MiB deflated chunks, the level-3 model of bench_vcd.py (4 targets, 8 KiB reads,
250 ns per byte) sampled and repeated to the length asked. Then, each in a fresh process:
- `parse` + every chunk consumed (the reader: inflate, reduce to changes, extract lines):
  samples/s (issue target: 100 M samples/s), transitions/s, peak RSS;
- the same plus the bus analysis (`scsitrace analyze --json`'s work);
- `sigrok-cli -i FILE -O null`: libsigrok reading the same file and discarding it (the
  real tool's own read, one thread), run in turn with ours: our reader's and our whole
  analysis's time as a multiple of its time, with each one's CPU time and peak RSS (ours
  from `parse` on, without the interpreter's start-up; for the whole process, time
  `scsitrace analyze` with /usr/bin/time -v).
Not a test.

    python bench/bench_sr.py [--samples 1000000000] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
DATA = HERE / "data"
PROBES = [(n, n) for n in ("BSY", "SEL", "ATN", "MSG", "C/D", "I/O", "REQ", "ACK")] + \
    [(f"D{i}", f"DB{i}") for i in range(8)]
CHUNK_SAMPLES = 2 << 20          # 4 MiB of 2-byte samples, as libsigrok's srzip chunks
RATE = 100_000_000


def build(path: Path, n_samples: int) -> None:
    import gen_logic
    from bench_vcd import build_frame
    frame = build_frame(200_000)
    idx, words = gen_logic.changes(frame, PROBES, 10**9 // RATE)
    period = gen_logic.expand(idx, words, int(idx[-1]) + 100).astype("<u2")
    reps = -(-(CHUNK_SAMPLES + len(period)) // len(period)) + 1
    cyc = np.tile(period, reps)
    names = [p[0] for p in PROBES]
    md = ("[global]\nsigrok version=0.5.2\n\n[device 1]\ncapturefile=logic-1\n"
          f"total probes={len(names)}\nsamplerate=100 MHz\ntotal analog=0\n"
          + "".join(f"probe{k + 1}={n}\n" for k, n in enumerate(names)) + "unitsize=2\n")
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("version", "2")
        zf.writestr("metadata", md)
        done, k = 0, 0
        while done < n_samples:
            n = min(CHUNK_SAMPLES, n_samples - done)
            at = done % len(period)
            zf.writestr(f"logic-1-{k + 1}", cyc[at:at + n].tobytes())
            done += n
            k += 1
    tmp.rename(path)


def child(path: str, analyse: bool) -> None:
    from scsitrace import heap
    heap.keep_freed_memory()
    from scsitrace import core, parsers
    t0, c0 = time.perf_counter(), time.process_time()
    if analyse:
        a = core.load(path)
        cap = a.capture
        rows, extra = a.source["transitions"], f" ios={a.ios_completed}"
    else:
        cap = parsers.parse(path)
        rows, extra = sum(c.height for c in cap.chunks()), ""
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{cap.meta['samples']} {rows} {wall:.3f} {cpu:.3f} {rss:.2f}{extra}")


def run_child(path: Path, analyse: bool) -> tuple[int, int, float, float, float]:
    out = subprocess.run([sys.executable, __file__, "--child", str(path)] + (["--analyse"] if analyse else []),
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1]), float(out[2]), float(out[3]), float(out[4])


def run_tool(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS GiB) of one run of another tool. The peak comes from
    /usr/bin/time when present: a child forked from this process counts this process's
    pages in its own ru_maxrss until it execs."""
    timer = shutil.which("time") or "/usr/bin/time"
    peak_file = DATA / "run_tool.peak"
    wrapped = [timer, "-f", "%M", "-o", str(peak_file)] + argv if os.path.exists(timer) else argv
    t = time.perf_counter()
    proc = subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status:
        raise SystemExit(f"{argv[0]} failed (status {status})")
    peak_kib = int(peak_file.read_text().split()[-1]) if wrapped is not argv else usage.ru_maxrss
    return wall, usage.ru_utime + usage.ru_stime, peak_kib / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--analyse", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.analyse)
        return
    DATA.mkdir(exist_ok=True)
    path = DATA / f"bus-{args.samples}.sr"
    if not path.exists():
        t = time.perf_counter()
        build(path, args.samples)
        print(f"built {path} ({path.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - t:.1f} s")
    run_child(path, False)           # first run: page cache
    for analyse in (False, True):
        what = "parse + analysis" if analyse else "parse (reader only)"
        for _ in range(args.runs):
            n, rows, wall, cpu, rss = run_child(path, analyse)
            print(f"{what:20s} {n / 1e6:7.0f} M samples in {wall:5.2f} s wall ({cpu:5.2f} s CPU): "
                  f"{n / wall / 1e6:6.0f} M samples/s, {rows / wall / 1e6:5.1f} M transitions/s "
                  f"({rows} transitions), peak {rss:.2f} GiB")
    sigrok = shutil.which("sigrok-cli")
    if sigrok:
        # side by side, in turn: libsigrok's own read of the file (inflate, nothing kept)
        # against our reader alone and our whole analysis
        for _ in range(args.runs):
            ref, ref_cpu, ref_rss = run_tool([sigrok, "-i", str(path), "-O", "null"])
            n, _, wall, cpu, rss = run_child(path, False)
            _, _, a_wall, a_cpu, a_rss = run_child(path, True)
            print(f"sigrok-cli -i FILE -O null {ref:5.2f} s ({ref_cpu:.2f} CPU s, peak {ref_rss * 1024:.0f} MiB, "
                  f"{n / ref / 1e6:.0f} M samples/s) | ours: reader {wall:5.2f} s ({cpu:.2f} CPU s, peak "
                  f"{rss:.2f} GiB) = {wall / ref:.2f}x its time; analyze {a_wall:5.2f} s ({a_cpu:.2f} CPU s, "
                  f"peak {a_rss:.2f} GiB) = {a_wall / ref:.2f}x")
    else:
        print("sigrok-cli not installed: no ratio against the real tool")
    print(f"(cpus: {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
