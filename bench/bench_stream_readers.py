"""Benchmark: peak RSS of the streamed readers of pcapng, usbmon text and piped blktrace as
the input grows (issue 14: memory bounded by the batch size, not the file size).

    python bench/bench_stream_readers.py [--scales 1,4] [--read-only FILE]

For each format and scale (inputs under bench/data/, generated once: pcapng and text
converted from bench_usbmon.py's pcaps by tests/gen_usbmon.py `pcap_to_pcapng` and
`pcap_to_text`; the piped blktrace written by tests/gen_blktrace.py, `workload(700000 x
scale, seed=5)`, layout "pipe"), two whole processes: the reader alone (every chunk read and
dropped: `--read-only FILE`) and `scsitrace analyze FILE`; wall time, CPU and peak RSS of each.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
DATA = os.path.join(HERE, "data")

from scsitrace import heap  # noqa: E402

heap.keep_freed_memory()         # as the scsitrace command does: before any import starts a thread


def inputs(scale: int) -> dict[str, str]:
    pcap = os.path.join(DATA, "usbmon_170000.pcap" if scale == 1 else f"usbmon_170000_x{scale}.pcap")
    base = pcap[:-len(".pcap")]
    pipe = os.path.join(DATA, "pipe700000.blktrace-pipe.bin" if scale == 1 else
                        f"pipe700000x{scale}.blktrace-pipe.bin")
    return {"pcapng": base + ".pcapng", "text": base + ".usbmon.txt", "pipe": pipe, "_pcap": pcap}


def generate(scale: int) -> None:
    import gen_usbmon
    files = inputs(scale)
    if not os.path.exists(files["_pcap"]):
        raise SystemExit(f"{files['_pcap']} missing: run bench/bench_usbmon.py --scales {scale} first")
    for kind, convert in (("pcapng", gen_usbmon.pcap_to_pcapng), ("text", gen_usbmon.pcap_to_text)):
        if not os.path.exists(files[kind]):
            convert(files["_pcap"], files[kind] + ".tmp")
            os.replace(files[kind] + ".tmp", files[kind])
    if not os.path.exists(files["pipe"]):
        import gen_blktrace
        ev = gen_blktrace.workload(700000 * scale, seed=5)
        gen_blktrace.write(ev, files["pipe"] + ".tmp", layout="pipe")
        os.replace(files["pipe"] + ".tmp", files["pipe"])


def read_only(path: str) -> None:
    """Every chunk of the capture read and dropped (the reader alone)."""
    from scsitrace import parsers
    fmt = "blktrace" if path.endswith(".bin") else "usbmon"
    cap = parsers.parse(path, fmt, eager=False) if fmt == "blktrace" else parsers.parse(path, fmt)
    n = sum(len(c["t_ns"]) if isinstance(c, dict) else len(c) for c in cap.chunks())
    print(n, cap.records.read)


def whole_process(argv: list[str]) -> tuple[float, float, int]:
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed")
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,4")
    ap.add_argument("--read-only")
    args = ap.parse_args()
    if args.read_only:
        read_only(args.read_only)
        return
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    for scale in map(int, args.scales.split(",")):
        generate(scale)
        for kind, path in inputs(scale).items():
            if kind.startswith("_"):
                continue
            rw, rc, rr = whole_process([sys.executable, __file__, "--read-only", path])
            aw, ac, ar = whole_process([scsitrace, "analyze", path])
            print(f"{kind} x{scale} ({os.path.getsize(path) / 1e6:.0f} MB): reader alone {rw:.2f} s wall, {rc:.2f} s "
                  f"CPU, peak RSS {rr / 2**20:.0f} MiB; analyze {aw:.2f} s wall, {ac:.2f} s CPU, peak RSS "
                  f"{ar / 2**20:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
