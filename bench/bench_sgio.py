"""Benchmark: the strace SG_IO parser (sgio) and the kernel-log layer on its command table.

    python bench/bench_sgio.py [--commands 50000] [--repeat 3]

No real tool reads strace's SG_IO lines, so the references are the floors of any line
reader on the same file: `grep -c` (count the SG_IO lines) and `awk` splitting each line into
its comma-separated fields. Generates (once, under bench/data/) a `strace -f -tt -T -y` log of
N commands from 4 processes in the shapes strace 6.1 prints (tests/gen_sgio.py: 32 KiB
READ(10)s, calls that overlap another process's split into unfinished/resumed halves), then
times, best of --repeat: parse (lines -> command table) and parse + analyze (SRT tables,
per-device figures, segments), and prints commands/s, the ratios against grep and awk, and
the peak RSS.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

from _timing import best  # noqa: E402
DATA = os.path.join(HERE, "data")


def generate(path: str, n: int) -> None:
    if os.path.exists(path):
        return
    from gen_sgio import command, strace_text
    os.makedirs(DATA, exist_ok=True)
    cmds = []
    for i in range(n):
        pid = 200 + i % 4
        lba = (i * 64) % 100_000
        cdb = bytes([0x28, 0, *lba.to_bytes(4, "big"), 0, 0, 64, 0])
        cmds.append(command(cdb, pid=pid, path=f"/dev/sg{pid % 4}", direction="in", dxfer_len=32768,
                            duration_ms=4, start_us=(i // 4) * 5000 + (i % 4) * 1000, syscall_us=3000))
    with open(path, "w") as fh:
        fh.write(strace_text(cmds, ts="tt", T=True, y=True, f="bracket"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=50000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from scsitrace import heap
    heap.keep_freed_memory()
    path = os.path.join(DATA, f"sgio-{args.commands}.strace")
    generate(path, args.commands)
    from scsitrace import core, parsers

    size = os.path.getsize(path)
    t_grep, _ = best(lambda: subprocess.run(["grep", "-c", "SG_IO", path], capture_output=True), args.repeat)
    t_awk, _ = best(lambda: subprocess.run(["awk", "-F", ", ", "{n += NF} END {print n}", path],
                                           capture_output=True), args.repeat)
    t_parse, cap = best(lambda: parsers.parse(path, "sgio"), args.repeat)
    t_all, a = best(lambda: core.analyze(parsers.parse(path, "sgio")), args.repeat)
    n = a.ios.height
    assert n == args.commands, (n, args.commands)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} commands, {size / 1e6:.1f} MB: grep -c {t_grep:.2f} s, awk {t_awk:.2f} s")
    print(f"parse           {t_parse:.2f} s = {n / t_parse / 1e3:.0f} k commands/s; "
          f"{t_parse / t_grep:.1f} x grep, {t_parse / t_awk:.2f} x awk")
    print(f"parse + analyze {t_all:.2f} s = {n / t_all / 1e3:.0f} k commands/s; "
          f"{t_all / t_grep:.1f} x grep, {t_all / t_awk:.2f} x awk")
    print(f"peak RSS {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
