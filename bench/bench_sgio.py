"""Benchmark: strace SG_IO logs in the kernel-log layer at 1x, 4x and 16x, whole process:
`scsitrace analyze FILE --json OUT`, its throughput, wall time and peak RSS beside the floors
of any line reader on the same file (`grep -c SG_IO`, `wc -l`; no real tool reads strace's
SG_IO lines), each run in turn, with the ratios.

    python bench/bench_sgio.py [--commands 50000] [--sizes 1,4,16] [--reference]

`--reference` also times the regex cut the Rust one replaced (the same process with the Rust
cut declining every block: parsers/_strace_lines.py `split`'s patterns read every line).

The logs (under bench/data/, written once): `strace -f -tt -T -y` of N commands from 4
processes in the shapes strace 6.1 prints (tests/gen_sgio.py: 32 KiB READ(10)s, calls that
overlap another process's split into unfinished/resumed halves), about 585 bytes a command
(1x = 50 000 commands, 29 MB).
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

from bench_scsilog import run, text_scale_header, text_scale_row  # noqa: E402
DATA = os.path.join(HERE, "data")
REFERENCE = ("import sys, scsitrace.parsers._strace_lines as s\n"
             "s.split_block = lambda *a, **k: None\n"
             "from scsitrace.cli import main; sys.exit(main(sys.argv[1:]))")


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
    with open(path + ".tmp", "w") as fh:
        fh.write(strace_text(cmds, ts="tt", T=True, y=True, f="bracket"))
    os.replace(path + ".tmp", path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=50000)
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--reference", action="store_true", help="also time the regex cut (Python path)")
    args = ap.parse_args()
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    print(text_scale_header("commands") + (f" | {'regex s':>7} {'MB/s':>5} {'peak GB':>7}" if args.reference else ""))
    for k in (int(x) for x in args.sizes.split(",")):
        n = args.commands * k
        path = os.path.join(DATA, f"sgio-{n}.strace")
        generate(path, n)
        row = text_scale_row(k, n, path, [scsitrace, "analyze", path, "--json", os.devnull], ["grep", "-c", "SG_IO", path])
        if args.reference:
            ref_wall, ref_rss = run([sys.executable, "-c", REFERENCE, "analyze", path, "--json", os.devnull])
            row += f" | {ref_wall:7.2f} {os.path.getsize(path) / 1e6 / ref_wall:5.0f} {ref_rss:7.2f}"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
