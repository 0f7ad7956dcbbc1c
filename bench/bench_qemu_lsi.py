"""Benchmark: the QEMU LSI trace parser (qemu_lsi) and the bus analysis on its output.

    python bench/bench_qemu_lsi.py [--commands 5000] [--sectors 8] [--repeat 3]

No real tool reads QEMU's LSI trace, so the references are the floors of any line reader on
the same file: `grep -c` (count lines matching the event shape) and `awk` splitting each line
into its fields. Generates (once) a trace of N READ(10) commands in the event shapes QEMU 7.2
prints (tests/test_qemu_lsi.py: qemu_trace_lines; each command disconnects and reselects,
about 45 lines) under bench/data/, then times, best of --repeat:

  parse:    lines -> events -> phase runs (parsers.parse; transitions are produced lazily)
  analyze:  parse + the bus state machine over the synthesized transitions (one REQ/ACK
            handshake per byte: 2 transitions per data byte, the dominant cost)

and prints lines/s, transitions/s and the ratios against grep and awk.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

from _timing import best  # noqa: E402
DATA = os.path.join(HERE, "data")


def generate(path: str, n: int, sectors: int) -> None:
    if os.path.exists(path):
        return
    from test_qemu_lsi import qemu_trace_lines
    os.makedirs(DATA, exist_ok=True)
    cmds = [(0x28, (i * 7919) % 1_000_000, sectors, i % 256, True) for i in range(n)]
    with open(path, "w") as fh:
        fh.write("\n".join(qemu_trace_lines(cmds)) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=5000)
    ap.add_argument("--sectors", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    path = os.path.join(DATA, f"qemu-lsi-{args.commands}x{args.sectors}.qemu-trace.txt")
    generate(path, args.commands, args.sectors)
    from scsitrace import core, parsers

    lines = sum(1 for _ in open(path))
    t_grep, _ = best(lambda: subprocess.run(["grep", "-c", "-E", "^[0-9]+@[0-9]+\\.[0-9]+:", path],
                                            capture_output=True, check=True), args.repeat)
    t_awk, _ = best(lambda: subprocess.run(["awk", "-F", "[@: ]", "{n += NF} END {print n}", path],
                                           capture_output=True, check=True), args.repeat)
    t_parse, cap = best(lambda: parsers.parse(path, "qemu_lsi"), args.repeat)

    def full():
        c = parsers.parse(path, "qemu_lsi")
        return core.analyze(c, core.Options(settle_ns=0))
    t_full, a = best(full, args.repeat)
    transitions = a.source.get("transitions") or 0
    assert a.ios_completed == args.commands, (a.ios_completed, args.commands)
    mb = os.path.getsize(path) / 1e6
    print(f"input: {path}: {lines} lines, {mb:.1f} MB, {args.commands} commands x {args.sectors} sectors")
    print(f"grep -c:          {t_grep:7.3f} s  {lines / t_grep / 1e6:6.2f} M lines/s")
    print(f"awk field split:  {t_awk:7.3f} s  {lines / t_awk / 1e6:6.2f} M lines/s")
    print(f"qemu_lsi parse:   {t_parse:7.3f} s  {lines / t_parse / 1e6:6.2f} M lines/s  "
          f"= {t_parse / t_grep:.1f} x grep, {t_parse / t_awk:.2f} x awk")
    print(f"parse + bus:      {t_full:7.3f} s  {transitions / t_full / 1e6:6.2f} M transitions/s "
          f"({transitions} transitions)  = {t_full / t_awk:.2f} x awk")
    return 0


if __name__ == "__main__":
    sys.exit(main())
