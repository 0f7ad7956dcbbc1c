"""Benchmark: the block layer's streamed analysis (the btt machine and its tables) alone, on a
stream of any length made in chunks, to show its memory is flat in the trace's length.

    python bench/bench_block_stream.py [--ios 10000000] [--block 200000] [--analysis-only]

Makes the events with tests/gen_blktrace.py's workload, `--block` I/Os at a time (each block
shifted past the one before in time and sectors), as MACHINE_COLUMNS chunks, and runs
scsitrace.block.machine.run over them (the chunks made in the prefetch thread). Prints the
events, the machine's CPU seconds (its thread), events per CPU-second, and the peak RSS of the
process; with --generate-only the same stream is made and dropped (the baseline to subtract).
Measure the whole process with /usr/bin/time -v at 1x, 4x, 16x --ios: the peak stays flat.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from scsitrace import heap  # noqa: E402

heap.keep_freed_memory()

import numpy as np  # noqa: E402


def chunks(n_ios: int, block: int):
    import gen_blktrace as gen
    t0, s0 = 0, 0
    for k, lo in enumerate(range(0, n_ios, block)):
        ev = gen.workload(min(block, n_ios - lo), seed=5 + k)
        remap = ev["pdu_kind"] == gen.PDU_REMAP
        yield {"t_ns": ev["time"] + t0, "action": ev["action"].astype(np.uint32),
               "device": ev["device"].astype(np.uint32), "sector": np.where(ev["bytes"] > 0, ev["sector"] + s0, 0),
               "bytes": ev["bytes"], "pid": ev["pid"],
               "pdu_dev": np.where(remap, ev["pdu_a"], 0).astype(np.uint32),
               "pdu_sector": np.where(remap, ev["pdu_b"] + s0, 0)}
        t0 += int(ev["time"].max()) + 1_000_000
        s0 += block * 256 + 4096


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ios", type=int, default=10_000_000)
    ap.add_argument("--block", type=int, default=200_000)
    ap.add_argument("--generate-only", action="store_true")
    args = ap.parse_args()
    from scsitrace.block import machine
    n = 0
    cpu = 0.0

    def counted(stream):
        nonlocal n
        for c in stream:
            n += len(c["t_ns"])
            yield c

    t = time.perf_counter()
    if args.generate_only:
        for _ in counted(chunks(args.ios, args.block)):
            pass
        run = None
    else:
        c0 = time.thread_time()
        run = machine.run(counted(chunks(args.ios, args.block)))
        cpu = time.thread_time() - c0
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"events: {n:,}  wall {wall:.1f} s  peak RSS {peak:.2f} GB")
    if run is not None:
        print(f"machine (its thread): {cpu:.2f} CPU s, {n / max(cpu, 1e-9) / 1e6:.1f} M events per CPU-second")
        q2c = run["overall"].reshape(13, 1, 4)[12, 0]
        print(f"Q2C n {q2c[0]:,}  rows kept {len(run['rows']['q']):,} (every {run['rows_stride']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
