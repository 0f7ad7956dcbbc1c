"""Benchmark: the kernel-log layer streaming an ftrace log (scsi_dispatch_cmd_start/done) at
1x, 4x and 16x, whole process: `scsitrace analyze FILE --json OUT`, its throughput, wall time
and peak RSS beside a plain pass over the same file (`grep -c scsi_dispatch_cmd_`, `wc -l`;
no real tool analyses these logs), each run in turn, with the ratios. Memory should stay flat
as the log grows, once the per-command rows kept for the reports reach KEEP_IOS (1 Mi rows,
about 0.4 GB; the `keep64k` column keeps 64 Ki rows instead).

    python bench/bench_scsilog.py [--log ftrace|dmesg] [--commands 200000] [--sizes 1,4,16] [--reference]

`--reference` also times the regex reader the Rust scan replaced (the same process with the
scan declining every block, so every line goes through parsers/scsilog.py's Python path).

The logs (tests/gen_scsilog.py bulk_ftrace: 8 devices x 32 tags, about 620 bytes per
command; 1x = 200 000 commands, about 124 MB; 16x about 2 GB; `--log dmesg`: bulk_dmesg, the
same commands as dmesg prints the kernel's SCSI logging, Send/CDB/Done/CDB lines, about 350
bytes per command, `grep -c CDB:`) are written once under bench/data/.
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


def run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in GB) of one whole process."""
    t = time.perf_counter()
    # output into a pipe, read: GNU grep stops at the first match when it writes to /dev/null
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) not in (0, 1):      # grep -c exits 1 on no match
        raise SystemExit(f"{argv[0]} failed: {proc.stderr.read().decode()[-500:]}")
    return wall, usage.ru_maxrss / 1e6


def text_scale_header(count: str) -> str:
    """The header of the text benches' rows (`text_scale_row`); `count`: what n counts."""
    return (f"{'size':>5} {'MB':>6} {count:>9} | {'scsitrace s':>11} {'MB/s':>5} {'peak GB':>7} | "
            f"{'grep -c s':>9} {'wc -l s':>7} | {'x grep':>6} {'x wc':>5}")


def text_scale_row(k: int, n: int, path: str, analyze: list[str], grep: list[str]) -> str:
    """One scale of a text bench: our `analyze` against `grep` (the argv) and `wc -l` on
    `path`, each a whole process run side by side."""
    size = os.path.getsize(path)
    wall, rss = run(analyze)
    grep_s, _ = run(grep)
    wc, _ = run(["wc", "-l", path])
    return (f"{k:>4}x {size / 1e6:6.0f} {n:>9} | {wall:11.2f} {size / 1e6 / wall:5.0f} {rss:7.2f} | "
            f"{grep_s:9.2f} {wc:7.2f} | {wall / grep_s:6.1f} {wall / wc:5.1f}")


REFERENCE = ("import sys, scsitrace.parsers.scsilog as s\n"
             "class Declines:\n    KINDS = None\n    def ftrace_block(self, buf, parts=None): return None\n"
             "s._native_text = lambda: Declines()\n"
             "from scsitrace.cli import main; sys.exit(main(sys.argv[1:]))")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=200_000)
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--reference", action="store_true", help="also time the regex reader (Python path)")
    ap.add_argument("--log", choices=("ftrace", "dmesg"), default="ftrace")
    args = ap.parse_args()
    from gen_scsilog import bulk_dmesg, bulk_ftrace
    write, suffix, word = {"ftrace": (bulk_ftrace, "ftrace.txt", "scsi_dispatch_cmd_"),
                           "dmesg": (bulk_dmesg, "dmesg", "CDB:")}[args.log]
    os.makedirs(DATA, exist_ok=True)
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    print(f"{'size':>5} {'GB':>6} {'commands':>10} | {'scsitrace s':>11} {'MB/s':>6} {'peak GB':>7} | "
          f"{'keep64k GB':>10} | {'grep -c s':>9} {'wc -l s':>7} | {'x grep':>6} {'x wc':>5}"
          + (f" | {'regex s':>7} {'MB/s':>5} {'peak GB':>7}" if args.reference else ""))
    for k in (int(x) for x in args.sizes.split(",")):
        n = args.commands * k
        path = os.path.join(DATA, f"scsilog_{n}.{suffix}")
        if not os.path.exists(path):
            write(path + ".tmp", n)
            os.replace(path + ".tmp", path)
        size = os.path.getsize(path)
        wall, rss = run([scsitrace, "analyze", path, "--json", os.devnull])
        # the same with 64 Ki rows kept for the reports instead of KEEP_IOS (1 Mi): what the
        # streaming itself holds, once the kept rows stop growing
        _, rss_small = run([sys.executable, "-c", "import sys, scsitrace.model as m; m.KEEP_IOS = 1 << 16; "
                            "from scsitrace.cli import main; sys.exit(main(sys.argv[1:]))",
                            "analyze", path, "--json", os.devnull])
        grep, _ = run(["grep", "-c", word, path])
        wc, _ = run(["wc", "-l", path])
        ref = ""
        if args.reference:
            ref_wall, ref_rss = run([sys.executable, "-c", REFERENCE, "analyze", path, "--json", os.devnull])
            ref = f" | {ref_wall:7.2f} {size / 1e6 / ref_wall:5.0f} {ref_rss:7.2f}"
        print(f"{k:>4}x {size / 1e9:6.2f} {n:>10} | {wall:11.2f} {size / 1e6 / wall:6.0f} {rss:7.2f} | "
              f"{rss_small:10.2f} | {grep:9.2f} {wc:7.2f} | {wall / grep:6.1f} {wall / wc:5.1f}{ref}", flush=True)


if __name__ == "__main__":
    main()
