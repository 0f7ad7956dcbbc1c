"""Benchmark: sg3_utils programs' verbose output (-vv, sg_dd verbose=3) in the kernel-log layer
at 1x, 4x and 16x, whole process: `scsitrace analyze FILE --json OUT`, its throughput, wall
time and peak RSS beside the floors of any line reader on the same file (`grep -c` of the CDB
lines, `wc -l`; nothing else analyses these logs), each run in turn, with the ratios.

    python bench/bench_sg3.py [--commands 400000] [--sizes 1,4,16]

The logs (under bench/data/, written once) are built from the committed captures of sg3_utils
in the QEMU guest (fixtures/captured/sg/lsi_sg_tools, as tests/gen_hostile.py builds its sg3
case): sg_dd's verbose=3 output (`Read(10) [..]` + `duration=N ms` per read) with N reads at
moving LBAs, and every 1000 reads the other programs' -vv output (sg_inq, sg_readcap -vvv, a
failed INQUIRY with its sense data) in turn; 1x = 400 000 reads, about 24 MB.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_scsilog import text_scale_header, text_scale_row  # noqa: E402
DATA = os.path.join(HERE, "data")
CASE = Path(HERE).parent / "fixtures" / "captured" / "sg" / "lsi_sg_tools"
OTHERS = ("inq.out.txt", "readcap_vvv.out.txt", "inq_badpage.out.txt")


def generate(path: str, n: int) -> None:
    if os.path.exists(path):
        return
    os.makedirs(DATA, exist_ok=True)
    head = (CASE / "dd_4k.out.txt").read_text().split("Read(10)")[0]
    others = [(CASE / name).read_text() for name in OTHERS]
    with open(path + ".tmp", "w") as fh:
        fh.write(head)
        for i in range(n):
            lba = (i * 8) % (1 << 32)
            fh.write(f"Read(10) [28 00 {' '.join(f'{b:02x}' for b in lba.to_bytes(4, 'big'))} 00 00 08 00]\n"
                     f"      duration={(i * 7) % 13} ms\n")
            if i % 1000 == 999:
                fh.write(others[(i // 1000) % len(others)])
    os.replace(path + ".tmp", path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=400000)
    ap.add_argument("--sizes", default="1,4,16")
    args = ap.parse_args()
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    print(text_scale_header("reads"))
    for k in (int(x) for x in args.sizes.split(",")):
        n = args.commands * k
        path = os.path.join(DATA, f"sg3-{n}.sg3.txt")
        generate(path, n)
        print(text_scale_row(k, n, path, [scsitrace, "analyze", path, "--format", "sgio", "--json", os.devnull],
                             ["grep", "-c", "-E", r"cdb: \[|^[A-Z][A-Za-z ]*\([0-9]+\) \[", path]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
