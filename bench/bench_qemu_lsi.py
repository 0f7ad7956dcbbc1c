"""Benchmark: QEMU's LSI 53C895A trace (qemu_lsi) analysed whole process at 1x, 4x and 16x:
`scsitrace analyze FILE --json OUT` (the trace's lines -> bus steps -> phase runs -> the
synthesized REQ/ACK handshakes summed per stretch -> the bus state machine), its throughput,
wall time and peak RSS beside the floors
of any line reader on the same file (`grep -c` of the event shape, `wc -l`; no real tool reads
QEMU's LSI trace), each run in turn, with the ratios.

    python bench/bench_qemu_lsi.py [--commands 5000] [--sectors 8] [--sizes 1,4,16,96]

The traces (under bench/data/, written once, BATCH commands at a time): N READ(10) commands
of `--sectors` sectors in the event shapes QEMU 7.2 prints (tests/test_qemu_lsi.py
qemu_trace_lines; each command disconnects and reselects, 37 lines); 1x = 5000 commands,
12 MB; 96x = 1.17 GB. The handshakes (one per data byte) are never made one by one on this
path (summed per stretch in the compiled stream, native/src/text/qemu.rs `QemuStream`), so
the sector count does not set the cost.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

from bench_scsilog import text_scale_header, text_scale_row  # noqa: E402
DATA = os.path.join(HERE, "data")
BATCH = 20000   # commands generated at a time


def generate(path: str, n: int, sectors: int) -> None:
    if os.path.exists(path):
        return
    from test_qemu_lsi import qemu_trace_lines
    os.makedirs(DATA, exist_ok=True)
    t0 = 1_795_000_000_000_000
    with open(path + ".tmp", "w") as fh:
        for first in range(0, n, BATCH):      # the same lines as one call, in bounded memory
            cmds = [(0x28, (i * 7919) % 1_000_000, sectors, i % 256, True) for i in range(first, min(n, first + BATCH))]
            lines = qemu_trace_lines(cmds, t0)
            fh.write("\n".join(lines) + "\n")
            sec, frac = lines[-1].split("@", 1)[1].split(":", 1)[0].split(".")
            t0 = int(sec) * 1_000_000 + int(frac)     # the next line steps on from the last one's stamp
    os.replace(path + ".tmp", path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=5000)
    ap.add_argument("--sectors", type=int, default=8)
    ap.add_argument("--sizes", default="1,4,16,96")
    args = ap.parse_args()
    scsitrace = os.path.join(os.path.dirname(sys.executable), "scsitrace")
    print(text_scale_header("commands"))
    for k in (int(x) for x in args.sizes.split(",")):
        n = args.commands * k
        path = os.path.join(DATA, f"qemu-lsi-{n}x{args.sectors}.qemu-trace.txt")
        generate(path, n, args.sectors)
        print(text_scale_row(k, n, path, [scsitrace, "analyze", path, "--format", "qemu_lsi", "--json", os.devnull],
                             ["grep", "-c", "-E", "^[0-9]+@[0-9]+\\.[0-9]+:", path]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
