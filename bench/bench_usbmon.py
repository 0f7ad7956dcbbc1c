"""Benchmark: scsitrace's native usbmon pcap route against `tshark -z scsi,srt,0` and pyshark.

    python bench/bench_usbmon.py [--commands 170000] [--repeat 3] [--pyshark-packets 3000]
                                 [--scales 1,4,16] [--scales-only] [--no-tshark] [--data DIR]

Generates (once) a usbmon pcap (link type 220) of Bulk-Only READ(10)/WRITE(10) traffic
with tests/gen_usbmon.py under bench/data/ (6 URB events per command, so 170 000 commands
are 1.02 M packets; data stages capture their first 64 bytes), then times:

  ours:     native parse + USB analysis + the summary (SRT table included), best of N;
            the first run is also shown on its own ("cold": modules loaded)
  tshark:   `tshark -q -z scsi,srt,0 -r FILE` (one run)
  pyshark:  pyshark.FileCapture (default options) iterating every packet and reading the
            usb fields our pyshark route reads, on the first P packets, extrapolated
            linearly to the whole file

and prints packets/s and the ratios. Then, for each scale of `--scales` (the base file
repeated that many times, each copy's times shifted past the previous one: 4x is 4 M packets,
16x 16 M), ours (`scsitrace analyze FILE`) and `tshark -q -z scsi,srt,0` each run as a whole
process, one after the other: wall time, peak RSS of each, and the ratio; then how our peak
RSS grows from the smallest scale to the largest (flat: the streamed Bulk-Only path holds
what is in flight and at most KEEP_IOS kept rows and segments, not the capture). It also checks that our per-opcode calls and min/max/avg
equal tshark's (to its 6 printed decimals) on this input. Wall-clock ratios depend on the
machine's load; CPU-time ratios (ours: process CPU; tshark and pyshark: children's CPU
too) are the steadier figure on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
DATA = os.path.join(HERE, "data")

from scsitrace import heap  # noqa: E402

heap.keep_freed_memory()         # as the scsitrace command does: before any import starts a thread


def generate(path: str, n_commands: int) -> None:
    import gen_usbmon
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t = time.perf_counter()
    gen_usbmon.write_pcap_bulk(path, gen_usbmon.bulk_traffic(n_commands, seed=7, data_cap=64))
    print(f"generated {path} in {time.perf_counter() - t:.1f} s", file=sys.stderr)


def replicate(src: str, dst: str, times: int) -> None:
    """`dst`: the records of the pcap `src` `times` over, copy k's times (pcap record and
    usbmon header) shifted by k x the source's span in whole seconds (built in numpy)."""
    import numpy as np
    from scsitrace.parsers import _pcap_scan
    if os.path.exists(dst):
        return
    t = time.perf_counter()
    raw = np.fromfile(src, np.uint8)
    body = raw[24:]
    offsets, _ = _pcap_scan.walk_chain(body, 0, 16, 8, False)
    sec = body[offsets[:, None] + np.arange(4)].copy().view("<u4").reshape(-1).astype(np.int64)
    span = int(sec.max() - sec.min()) + 1
    with open(dst + ".tmp", "wb") as fh:
        fh.write(raw[:24].tobytes())
        for k in range(times):
            copy = body.copy()
            for at in (0, 16 + 16):               # pcap record ts_sec; usbmon ts_sec (low 32 bits)
                v = (sec + k * span).astype("<u4").view(np.uint8).reshape(-1, 4)
                for b in range(4):
                    copy[offsets + at + b] = v[:, b]
            copy.tofile(fh)
    os.replace(dst + ".tmp", dst)
    print(f"generated {dst} ({times} x {len(offsets)} packets) in {time.perf_counter() - t:.1f} s", file=sys.stderr)


# Runs a command and prints its wall time, CPU time and peak RSS. A child's ru_maxrss starts
# from its parent's RSS when it is spawned (Linux counts the parent's pages until exec), so
# the command is started from this small process, not from the benchmark (which holds
# hundreds of MB after the in-process runs and the replication).
LAUNCHER = """
import os, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - t
if os.waitstatus_to_exitcode(status) != 0:
    sys.exit(sys.argv[1] + " failed: " + proc.stderr.read().decode()[-500:])
print(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)
"""


def whole_process(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS bytes) of one run of `argv`, its output discarded."""
    run = subprocess.run([sys.executable, "-c", LAUNCHER, *argv], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(run.stderr.strip()[-500:])
    wall, cpu, rss = run.stdout.split()
    return float(wall), float(cpu), int(rss)


def scaled(path: str, scales: list[int], tshark: bool = True) -> None:
    """Peak RSS and wall time per scale of the base file, ours and tshark side by side."""
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    peaks = []
    for k in scales:
        big = path if k == 1 else path.replace(".pcap", f"_x{k}.pcap")
        replicate(path, big, k)
        w, c, rss = whole_process([scsitrace, "analyze", big])
        peaks.append((k, rss))
        line = (f"x{k} ({os.path.getsize(big) / 1e9:.2f} GB): ours {w:.2f} s wall, {c:.2f} s CPU, "
                f"peak RSS {rss / 1e9:.2f} GB")
        if tshark and shutil.which("tshark"):
            tw, tc, trss = whole_process(["tshark", "-q", "-z", "scsi,srt,0", "-r", big])
            line += (f"; tshark -q -z scsi,srt,0 {tw:.2f} s wall, {tc:.2f} s CPU, peak RSS {trss / 1e9:.2f} GB; "
                     f"ratio {tw / w:.1f}x wall, {tc / c:.1f}x CPU")
        print(line, flush=True)
    if len(peaks) > 1:
        (k0, r0), (k1, r1) = peaks[0], peaks[-1]
        print(f"ours' peak RSS x{k1} / x{k0}: {r1 / r0:.2f} ({r0 / 2**20:.0f} -> {r1 / 2**20:.0f} MiB for "
              f"{k1 / k0:g} x the input)", flush=True)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ours(path: str):
    """(wall s, CPU s, parse wall s, packets, summary)."""
    from scsitrace import core, parsers
    from scsitrace.reports import summary
    t, c = time.perf_counter(), time.process_time()
    cap = parsers.parse(path, "usbmon")
    t_parse = time.perf_counter() - t
    s = summary.summary(core.analyze(cap))
    return time.perf_counter() - t, time.process_time() - c, t_parse, cap.records.read, s


def tshark_srt(path: str):
    t, c = time.perf_counter(), children_cpu()
    out = subprocess.run(["tshark", "-q", "-z", "scsi,srt,0", "-r", path], capture_output=True, text=True,
                         check=True).stdout
    elapsed, cpu = time.perf_counter() - t, children_cpu() - c
    rows = {int(m[1]): (int(m[2]), m[3], m[4], m[5]) for m in re.finditer(
        r"^\s*(\d+)\s+.+?\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s*$", out, re.M)}
    return elapsed, cpu, rows


def pyshark_subset(path: str, packets: int):
    import pyshark
    sub = os.path.join(os.path.dirname(path), f"usbmon_first{packets}.pcap")
    subprocess.run(["editcap", "-r", path, sub, f"1-{packets}"], check=True, capture_output=True)
    t, c = time.perf_counter(), time.process_time() + children_cpu()
    cap = pyshark.FileCapture(sub, keep_packets=False)
    n = 0
    for pkt in cap:
        u = pkt.usb
        _ = (u.urb_id, u.urb_type, u.endpoint_address, u.urb_status, u.urb_len, u.data_len)
        n += 1
    cap.close()
    time.sleep(0.5)   # let the tshark child exit so its CPU time is counted
    return time.perf_counter() - t, time.process_time() + children_cpu() - c, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=170_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pyshark-packets", type=int, default=3000)
    ap.add_argument("--scales", default="1,4,16", help="sizes (x the base file) for peak RSS and tshark")
    ap.add_argument("--scales-only", action="store_true", help="only the per-scale runs")
    ap.add_argument("--no-tshark", action="store_true", help="per-scale runs without tshark")
    ap.add_argument("--data", default=DATA, help="where the generated pcaps are (made there when missing)")
    args = ap.parse_args()
    path = os.path.join(args.data, f"usbmon_{args.commands}.pcap")
    generate(path, args.commands)
    if args.scales_only:
        scaled(path, [int(k) for k in args.scales.split(",") if k], not args.no_tshark)
        return 0
    runs = [ours(path) for _ in range(args.repeat)]
    cold = runs[0]
    warm = runs[1:] or runs
    total, cpu, t_parse, packets, s = min(warm, key=lambda r: r[0])
    cpu = min(r[1] for r in warm)
    print(f"input: {path}: {packets} packets, {os.path.getsize(path) / 1e6:.1f} MB, "
          f"{s['commands']['total']} commands; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"ours, first run (cold: modules loaded): {cold[0]:.3f} s wall, {cold[1]:.3f} s CPU")
    print(f"ours (native parse + analysis, warm, best of {len(warm)}): {total:.3f} s wall, {cpu:.3f} s CPU "
          f"(parse {t_parse:.3f} s) = {packets / total / 1e3:.0f} k packets/s")
    if shutil.which("tshark") is None:
        print("tshark not installed: no comparison")
        return 0
    t_tshark, cpu_tshark, calls = tshark_srt(path)   # calls: opcode -> (calls, min, max, avg)
    print(f"tshark -q -z scsi,srt,0: {t_tshark:.2f} s wall, {cpu_tshark:.2f} s CPU "
          f"= {packets / t_tshark / 1e3:.0f} k packets/s")
    ours_rows = {r["opcode"]: (r["calls"], f"{r['min_ns'] / 1e9:.6f}", f"{r['max_ns'] / 1e9:.6f}",
                               f"{r['avg_ns'] / 1e9:.6f}") for r in s["srt"]}
    print(f"per-opcode calls, min, max, avg equal to tshark's (6 decimals): {ours_rows == calls} "
          f"(ours {ours_rows}, tshark {calls})")
    print(f"ratio vs tshark srt: {t_tshark / total:.1f}x wall, {cpu_tshark / cpu:.1f}x CPU (target >= 20x)")
    t_py, cpu_py, n_py = pyshark_subset(path, args.pyshark_packets)
    rate = n_py / t_py
    extrapolated, extrapolated_cpu = packets / rate, cpu_py * packets / n_py
    print(f"pyshark (default, {n_py} packets): {t_py:.2f} s wall, {cpu_py:.2f} s CPU = {rate:.0f} packets/s; "
          f"whole file extrapolated: {extrapolated:.0f} s wall, {extrapolated_cpu:.0f} s CPU")
    print(f"ratio vs pyshark: {extrapolated / total:.0f}x wall, {extrapolated_cpu / cpu:.0f}x CPU "
          "(target >= 1000x)")
    scaled(path, [int(k) for k in args.scales.split(",") if k])
    return 0


if __name__ == "__main__":
    sys.exit(main())
