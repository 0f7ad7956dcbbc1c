"""Benchmark: peak RSS of the streamed readers of pcapng, usbmon text and piped blktrace as
the input grows (issue 14: memory bounded by the batch size, not the file size).

    python bench/bench_stream_readers.py [--scales 1,4] [--read-only FILE]
    python bench/bench_stream_readers.py --text-scales 1,4,16 [--pairs 3]
    python bench/bench_stream_readers.py --blkparse-scales 1,4,16 [--pairs 3]

For each format and scale (inputs under bench/data/, generated once: pcapng and text
converted from bench_usbmon.py's pcaps by tests/gen_usbmon.py `pcap_to_pcapng` and
`pcap_to_text`; the piped blktrace written by tests/gen_blktrace.py, `workload(700000 x
scale, seed=5)`, layout "pipe"), two whole processes: the reader alone (every chunk read and
dropped: `--read-only FILE`) and `scsitrace analyze FILE`; wall time, CPU and peak RSS of each.

`--text-scales`: usbmon text at the speed of the disk (issue 29): a 1u text of 170 000
Bulk-Only commands (tests/gen_usbmon.py `bulk_traffic`, data stages' first 64 bytes, 32
shown: about 80 MB) and copies of it 4x, 16x (each copy's times moved past the previous
one's, wrapping at 4096 s as the kernel's do), under bench/data/. Per scale, whole processes
run in interleaved pairs: `scsitrace analyze FILE` against `wc -l FILE` and against
`grep -c ' S ' FILE` (no analysing peer: tshark does not read usbmon text); the median
wall time of each, MB/s, the ratios and peak RSS.

`--blkparse-scales`: blkparse's default text of a synthetic per-CPU blktrace
(../shared/gen/gen_blktrace.py, 300 000 I/Os x scale, 5 events each: about 110 MB at 1x)
written by `blkparse -i`, measured the same way (yardsticks `wc -l` and `grep -c ' C '`).
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
    # output into a pipe, read: GNU grep stops at the first match when it writes to /dev/null
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed")
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


TEXT_WRAP_US = 4096 * 1_000_000


def text_input(scale: int) -> str:
    """The usbmon text of `scale` copies of the base traffic (written once)."""
    path = os.path.join(DATA, f"usbmon_text_170000_x{scale}.usbmon.txt")
    if os.path.exists(path):
        return path
    import polars as pl
    import gen_usbmon
    os.makedirs(DATA, exist_ok=True)
    events = gen_usbmon.bulk_traffic(170000, seed=1, data_cap=64)
    span = events[-1].t_us - events[0].t_us + 1000
    base = pl.DataFrame({"line": [gen_usbmon.text_line(e) for e in events]}).select(
        pl.col("line").str.splitn(" ", 3).struct.rename_fields(["tag", "ts", "rest"])).unnest("line")
    with open(path + ".tmp", "w") as fh:
        for copy in range(scale):
            ts = (base["ts"].cast(pl.Int64) + copy * span) % TEXT_WRAP_US
            lines = base.select(pl.concat_str(pl.col("tag"), pl.lit(ts.cast(pl.Utf8)), pl.col("rest"), separator=" "))
            fh.write("\n".join(lines.to_series().to_list()) + "\n")
    os.replace(path + ".tmp", path)
    return path


def paired(a: list[str], b: list[str], pairs: int) -> tuple[list, list]:
    """Whole-process (wall, CPU, peak RSS) of `a` and `b`, run in turn: a b a b ..."""
    ra, rb = [], []
    for _ in range(pairs):
        ra.append(whole_process(a))
        rb.append(whole_process(b))
    return ra, rb


def median(values) -> float:
    v = sorted(values)
    return v[len(v) // 2]


def blkparse_input(scale: int) -> str:
    """blkparse's text of a synthetic blktrace of 300 000 x `scale` I/Os (written once)."""
    path = os.path.join(DATA, f"blkparse_300000_x{scale}.blkparse.txt")
    if os.path.exists(path):
        return path
    gen = os.path.join(HERE, "..", "..", "shared", "gen", "gen_blktrace.py")
    prefix = os.path.join(DATA, f"bp_x{scale}", "sda")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    subprocess.run([sys.executable, gen, "--ios", str(300000 * scale), "--prefix", prefix], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["blkparse", "-i", prefix, "-o", path + ".tmp"], check=True, stdout=subprocess.DEVNULL)
    os.replace(path + ".tmp", path)
    return path


def text_speed(scales: list[int], pairs: int, kind: str = "usbmon") -> None:
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    if kind == "usbmon":
        print("usbmon text: tshark does not read usbmon text (only pcap/pcapng): the yardsticks are wc -l and grep -c")
    else:
        print("blkparse text: no tool analyses blkparse's text (btt reads its binary dump): the yardsticks are "
              "wc -l and grep -c")
    for scale in scales:
        path = text_input(scale) if kind == "usbmon" else blkparse_input(scale)
        mb = os.path.getsize(path) / 1e6
        ours = [scsitrace, "analyze", path]
        word = " S " if kind == "usbmon" else " C "
        for name, ref in (("wc -l", ["wc", "-l", path]), ("grep -c", ["grep", "-c", word, path])):
            ra, rb = paired(ours, ref, pairs)
            wa, wb = median(r[0] for r in ra), median(r[0] for r in rb)
            print(f"{kind} text x{scale} ({mb:.0f} MB): analyze {wa:.2f} s = {mb / wa:.0f} MB/s, peak RSS "
                  f"{median(r[2] for r in ra) / 2**20:.0f} MiB; {name} {wb:.2f} s = {mb / wb:.0f} MB/s; "
                  f"ratio {median(x[0] / y[0] for x, y in zip(ra, rb)):.1f}x (median of {pairs} pairs)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,4")
    ap.add_argument("--read-only")
    ap.add_argument("--text-scales", help="usbmon text speed against wc/grep at these scales (e.g. 1,4,16)")
    ap.add_argument("--blkparse-scales", help="blkparse text speed against wc/grep at these scales")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    if args.read_only:
        read_only(args.read_only)
        return
    if args.text_scales or args.blkparse_scales:
        for kind, scales in (("usbmon", args.text_scales), ("blkparse", args.blkparse_scales)):
            if scales:
                text_speed([int(s) for s in scales.split(",")], args.pairs, kind)
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
