"""Simulate one SCSI string (host, Jaguar host adapter, Wren IV disks) and write its bus trace.

The defaults are the RAID-I Table 3 set-up: 4 disks, 32 KiB sequential reads, one command in
flight per disk, BFR 1/2, readahead on, no-copy host, level 1 (control lines only).
Every default and every choice is documented in docs/simulator.md.
"""
from __future__ import annotations

import sys
from dataclasses import replace

from scsitrace.errors import UsageError
from scsitrace import outputs
from scsitrace.inert import csv_safe

from scsitrace import request
from scsitrace.sim.params import UNITS, parse_ratio, parse_size  # noqa: F401 (UNITS: its old home)


EXAMPLES = """examples:
  scsitrace simulate --duration 2 -o table3.ancot
  scsitrace simulate --workload list
  scsitrace simulate --count 200 --disks 2 --level 3 --format vcd -o two.vcd --truth truth/
"""


def add_arguments(p) -> None:
    p.add_argument("-o", "--output", metavar="TRACE", help="trace file to write (not with --sweep)")
    p.add_argument("--workload", metavar="NAME",
                   help="start from a named experiment of the report (--workload list shows them); "
                   "the other options override it")
    p.add_argument("--disks", type=int, help="targets on the string, 1-7 (default 4)")
    p.add_argument("--op", choices=("read", "write"), help="read (default) or write")
    p.add_argument("--pattern", choices=("seq", "random"), help="sequential (default) or random LBAs")
    p.add_argument("--size", metavar="BYTES|32K", help="request size, a multiple of 512 up to 128K (default 32K)")
    p.add_argument("--processes", type=int,
                   help="host processes per disk, 1-4 (default 1); the Jaguar queues their commands")
    p.add_argument("--inflight", type=int, help="tagged commands in flight per disk, 1-4 (default 1)")
    span = p.add_mutually_exclusive_group()
    span.add_argument("--duration", type=float, metavar="SECONDS", help="bus time to simulate")
    span.add_argument("--count", type=int, metavar="N", help="I/Os to issue and complete")
    p.add_argument("--bfr", default="1/2", metavar="RATIO",
                   help="Buffer Full Ratio: 1/2, 0.5, a mode page value 0-255 (n/255), or bytes of the "
                   "32K buffer (512B, 16K); default 1/2")
    p.add_argument("--ber", default="1/2", metavar="RATIO", help="Buffer Empty Ratio, same forms (default 1/2)")
    p.add_argument("--readahead", choices=("on", "off"), default="on", help="the disks' readahead (default on)")
    p.add_argument("--host", choices=("no-copy", "user-level"),
                   help="host software: no-copy (default, Table 3) or user-level (the host also copies the data, Sec 4.7)")
    p.add_argument("--level", type=int, choices=(1, 2, 3), default=1,
                   help="1 control lines, 2 + REQ/ACK, 3 + data bus (default 1)")
    p.add_argument("--format", choices=("ancot", "vcd"), default="ancot", help="trace format to write (default ancot)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the workload and the disks (default 0)")
    p.add_argument("--truth", metavar="DIR", help="write the ground truth (segments.parquet, ios.parquet)")
    what_if = p.add_argument_group("what-if (change one mechanism)")
    what_if.add_argument("--bus-rate", type=float, metavar="MB/S",
                         help="synchronous transfer rate (default 4: 250 ns per byte, Sec 4.1.1)")
    what_if.add_argument("--no-alloc-pauses", action="store_true",
                         help="no host adapter pause at 8 KB buffer allocations (Sec 4.6)")
    what_if.add_argument("--sweep", metavar="PARAM=v1,v2,...",
                         help="simulate and analyse once per value, one row each (--sweep list shows PARAMs)")
    what_if.add_argument("--csv", metavar="FILE", help="with --sweep: write the rows as CSV")
    what_if.add_argument("--parquet", metavar="FILE", help="with --sweep: write the rows as Parquet")
    faults = p.add_argument_group("faults (fixtures)")
    faults.add_argument("--reset-at", type=float, metavar="SECONDS",
                        help="assert RST in the first data transfer after this time")
    faults.add_argument("--glitch-at", type=float, metavar="SECONDS",
                        help="a 100 ns BSY glitch in the first status pause after this time")


def build(args):
    """Command line -> (Workload, Params), checked."""
    from scsitrace.sim import Params, Workload
    from scsitrace.sim.workloads import NAMED
    named = None
    if args.workload is not None:
        if args.workload not in NAMED:
            raise UsageError(f"--workload: unknown {args.workload!r}; one of {', '.join(NAMED)}")
        named = NAMED[args.workload]
    elif args.duration is None and args.count is None:
        raise UsageError("one of --duration, --count or --workload is required")
    pick = lambda given, attr, default: given if given is not None else (  # noqa: E731
        getattr(named, attr) if named is not None else default)
    disks, inflight = pick(args.disks, "disks", 4), args.inflight if args.inflight is not None else 1
    processes = pick(args.processes, "processes", 1)
    size = parse_size(args.size) if args.size is not None else pick(None, "size", 32 * 1024)
    duration = args.duration
    if duration is None and args.count is None:
        duration = named.duration_s
    params = Params()
    tick = params.bus.tick_ns
    request.seconds("duration", args.duration, positive=True)
    request.integer("count", args.count, 1)
    request.integer("seed", args.seed, 0)
    request.seconds("reset_at", args.reset_at)
    request.seconds("glitch_at", args.glitch_at)
    disk = replace(params.disk, bfr=parse_ratio(args.bfr, "--bfr", params.disk.buffer_bytes),
                   ber=parse_ratio(args.ber, "--ber", params.disk.buffer_bytes),
                   readahead=args.readahead == "on")
    bus = params.bus
    if args.bus_rate is not None:
        if not 0 < args.bus_rate <= 10:
            raise UsageError("--bus-rate must be in (0, 10] MB/s (at most 100 ns per byte on the 50 ns grid)")
        byte_ns = max(2 * tick, round(1000 / args.bus_rate / tick) * tick)
        bus = replace(bus, byte_ns=byte_ns)
    hba = replace(params.hba, alloc_pauses=not args.no_alloc_pauses)
    host = replace(params.host, mode=pick(args.host, "host", "no-copy"))
    params = Params(bus=bus, disk=disk, hba=hba, host=host)
    to_ns = lambda s: None if s is None else int(round(s * 1e9 / tick)) * tick  # noqa: E731
    wl = Workload(disks=disks, op=pick(args.op, "op", "read"), pattern=pick(args.pattern, "pattern", "seq"),
                  size=size, inflight=inflight, processes=processes,
                  duration_ns=to_ns(duration), count=args.count, seed=args.seed,
                  reset_at_ns=to_ns(args.reset_at), glitch_at_ns=to_ns(args.glitch_at))
    check(wl)
    return wl, params


def check(wl) -> None:
    """The limits of the model, as usage errors."""
    if not 1 <= wl.disks <= 7:
        raise UsageError(f"--disks must be 1-7 (the host adapter is ID 7), got {wl.disks}")
    if not 1 <= wl.inflight <= 4:
        raise UsageError(f"--inflight must be 1-4, got {wl.inflight}")
    if not 1 <= wl.processes <= 4:
        raise UsageError(f"--processes must be 1-4, got {wl.processes}")
    if wl.size <= 0 or wl.size % 512 or wl.size > 128 * 1024:
        raise UsageError(f"--size must be a multiple of 512 bytes up to 128K (READ(6)/WRITE(6)), got {wl.size}")


def run(args) -> int:
    if args.workload == "list":
        return _list_workloads()
    if args.sweep is not None:
        return _run_sweep(args)
    if args.output is None:
        raise UsageError("-o/--output TRACE is required (except with --sweep)")
    if args.csv or args.parquet:
        raise UsageError("--csv and --parquet go with --sweep")
    from scsitrace.progress import progress_of
    from scsitrace.sim import simulate
    wl, params = build(args)
    with _progress(wl, progress_of) as update:
        res = simulate(wl, args.output, level=args.level, fmt=args.format, params=params, truth_dir=args.truth,
                       progress=update)
    print(f"wrote {args.output}: level {res.level}, {res.transitions} records, "
          f"{res.end_ns / 1e9:.6f} s of bus time, {res.ios_completed} I/Os completed"
          + (f", ground truth in {args.truth}" if args.truth else ""), file=sys.stderr)
    return 0


def _progress(wl, progress_of):
    """On a terminal, a bar of bus time simulated (--duration) or I/Os issued (--count)."""
    from contextlib import contextmanager

    @contextmanager
    def bar():
        if wl.duration_ns is not None:
            with progress_of("simulating", wl.duration_ns / 1e9, "s of bus time") as update:
                yield None if update is None else (lambda t_ns, issued: update(t_ns / 1e9))
        else:
            with progress_of("simulating", wl.count, "I/Os") as update:
                yield None if update is None else (lambda t_ns, issued: update(issued))
    return bar()


def _list_workloads() -> int:
    from scsitrace.sim.workloads import NAMED
    for w in NAMED.values():
        figs = "; ".join(f"{f.metric} {f.value:g}" for f in w.figures) or "no figure in the text"
        print(f"{w.name:<28} {w.what}\n{'':<28} paper: {figs}")
    return 0


def _run_sweep(args) -> int:
    from scsitrace.sim import sweep as sw
    if args.sweep == "list":
        for name, (what, _, _) in sw.PARAMS.items():
            print(f"{name:<16} {what}")
        return 0
    if args.output is not None or args.truth is not None:
        raise UsageError("--sweep writes no trace: use --csv/--parquet for its rows, not -o/--truth")
    name, _, values = sw.parse_spec(args.sweep)     # usage errors before the first run
    if args.workload is None and args.duration is None and args.count is None:
        args.workload = "table3"
    wl, params = build(args)
    for value in values:
        check(sw.PARAMS[name][2](wl, params, value)[0])
    header = ["value", "ios_completed", "bandwidth_mib_s", "iops"] + [sw.column(c) for c in sw.CATEGORIES]
    print(f"{name} sweep, workload {args.workload or 'table3 set-up'} (level {args.level}, raid1990 profile)")
    print(" ".join(f"{h[:12]:>12}" for h in header))

    def show(r):
        print(" ".join(f"{str(r[h])[:12]:>12}" for h in header), flush=True)
    rows = sw.sweep(wl, params, args.sweep, level=args.level, progress=show)
    if args.csv or args.parquet:
        import polars as pl
        df = pl.DataFrame(rows)
        if args.csv:
            outputs.write_frame(args.csv, csv_safe(df), parquet=False)
        if args.parquet:
            outputs.write_frame(args.parquet, df, parquet=True)
    return 0
