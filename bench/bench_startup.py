"""Benchmark: the first analysis after install, and later ones, of a small trace of every
format, whole process, against the reference tools on the same inputs.

    python bench/bench_startup.py [--repeat 5]

"first": the checkout's own bytecode caches (__pycache__ under scsitrace/, parsers/,
reports/) are deleted first, so that run compiles our sources: the worst case, an install
that did not byte-compile them (`run.sh` does, with compileall). "later": the median of N
runs after that (PYTHONDONTWRITEBYTECODE is cleared for every run, so the first one leaves
its caches as a user's would). "floor": `python -c "import numpy, polars"` run in turn with
each later run (what any polars tool pays before its first line; this machine's speed
drifts by a third within minutes, the pairs keep the comparison fair). Reference: `blkparse -d` + `btt` on the blktrace input,
`tshark -q -z scsi,srt,0` on the pcap (each a whole process too). Prints wall time and
peak RSS (each process's own, from wait4).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
DATA = os.path.join(HERE, "data", "startup")
FIX = os.path.join(ROOT, "fixtures")
SCSITRACE = os.path.join(os.path.dirname(sys.executable), "scsitrace")


def inputs() -> dict[str, str]:
    """One small trace per format (fixtures, or generated once under bench/data/startup)."""
    import gen_usbmon
    os.makedirs(DATA, exist_ok=True)
    pcap, text = os.path.join(DATA, "small.pcap"), os.path.join(DATA, "small.usbmon.txt")
    if not os.path.exists(pcap):
        events = gen_usbmon.traffic(seed=1)
        gen_usbmon.write_pcap(pcap, events)
        gen_usbmon.write_text(text, events)
    case = os.path.join(FIX, "captured", "usb_seqwrite32k_logged")
    return {"ancot": os.path.join(FIX, "examples", "table3-slice.ancot"),
            "vcd": os.path.join(FIX, "bus", "random4k-vcd-l1", "trace.vcd"),
            "blktrace": os.path.join(case, "usb_seqwrite32k_logged.blktrace.0"),
            "blkparse text": os.path.join(case, "ref.blkparse.txt"),
            "usbmon pcap": pcap, "usbmon text": text,
            "kernel log": os.path.join(case, "dmesg-scsi.txt"),
            "sg log": os.path.join(FIX, "captured", "sg", "lsi_sg_tools", "readcap_vvv.out.txt")}


def run(cmd: list[str], env=None, cwd=None) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of one whole process; its output discarded."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def forget_bytecode() -> None:
    for top in ("scsitrace", "parsers", "reports"):
        for dirpath, dirnames, _ in os.walk(os.path.join(ROOT, top)):
            if "__pycache__" in dirnames:
                shutil.rmtree(os.path.join(dirpath, "__pycache__"))


def reference(fmt: str, path: str, tmp: str) -> tuple[float, float] | None:
    if fmt == "blktrace" and shutil.which("btt"):
        dump = os.path.join(tmp, "dump.bin")
        base = path.rsplit(".blktrace.", 1)[0]
        w1, m1 = run(["blkparse", "-q", "-i", os.path.basename(base), "-d", dump, "-O"], cwd=os.path.dirname(path))
        w2, m2 = run(["btt", "-i", dump], cwd=tmp)
        return w1 + w2, max(m1, m2)
    if fmt == "usbmon pcap" and shutil.which("tshark"):
        return run(["tshark", "-q", "-z", "scsi,srt,0", "-r", path])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'input':<14} {'size':>9} {'first':>8} {'later':>8} {'floor':>8} {'peak RSS':>9}   reference (whole process)")
    floor_cmd = [sys.executable, "-c", "import numpy, polars"]
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, path in inputs().items():
            forget_bytecode()
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            cmd = [SCSITRACE, "analyze", path]
            first, _ = run(cmd, env=env)
            later, floor = [], []
            for _ in range(args.repeat):
                later.append(run(cmd, env=env))
                floor.append(run(floor_cmd, env={**env, "OPENBLAS_NUM_THREADS": "1"})[0])   # as the CLI sets it
            wall, rss = sorted(w for w, _ in later)[len(later) // 2], max(m for _, m in later)
            base = sorted(floor)[len(floor) // 2]
            ref = reference(fmt, path, tmp)
            ref_text = f"{ref[0]:.3f} s, {ref[1]:.0f} MiB" if ref else "-"
            print(f"{fmt:<14} {os.path.getsize(path) / 1024:>7.0f} K {first:>7.2f}s {wall:>7.3f}s {base:>7.3f}s "
                  f"{rss:>6.0f} MiB   {ref_text}")


if __name__ == "__main__":
    main()
