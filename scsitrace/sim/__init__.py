"""Simulator of one SCSI string with ground truth (`scsitrace simulate`, docs/simulator.md).

`simulate(workload, path, ...)` plays the event model (`model.Sim`) into a trace file
(ancot-text levels 1-3, or VCD), streamed block by block, and returns the ground truth:
the segments and I/Os an analyzer must find in that trace.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from scsitrace.parsers import ancot
from scsitrace import outputs

from .encode import Recorder
from .model import Sim, Workload
from .params import Params
from .truth import ios_frame, segments_frame
from .vcd_writer import VcdWriter

LEVEL_SIGNALS = {
    1: ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O"],
    2: ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"],
    3: ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"],
}

__all__ = ["Workload", "Params", "Result", "simulate"]


@dataclass
class Result:
    path: str
    level: int
    end_ns: int
    segments: pl.DataFrame     # ground truth, what the analyzer can know at this level
    ios: pl.DataFrame
    ios_completed: int
    data_bytes: int            # bytes moved in DATA phases (REQ/ACK handshakes)
    transitions: int           # records written


def simulate(wl: Workload, path: str | Path, *, level: int = 1, fmt: str = "ancot",
             params: Params | None = None, truth_dir: str | Path | None = None, progress=None) -> Result:
    """Simulate `wl` and write its trace to `path`; `progress(bus_time_ns, ios_issued)` is
    called now and then during the run (a long --duration takes seconds)."""
    params = params or Params()
    path = str(path)
    signals = LEVEL_SIGNALS[level]
    data = ["DB"] if level >= 3 else []
    meta = {"source": "scsitrace simulate", "workload": _describe(wl, params, level)}
    with outputs.writing(path) as fh:
        if fmt == "vcd":
            sink = VcdWriter(fh, signals=signals, data=data, meta=meta)
        else:
            sink = ancot.Writer(fh, signals=signals, data=data, tick_ns=params.bus.tick_ns,
                                initiator=params.hba.scsi_id, meta=meta)
        rec = Recorder(level, params.bus.byte_ns, params.bus.handshake_offsets(), sink,
                       end_ns=wl.duration_ns)
        sim = Sim(wl, params, rec)
        sim.on_progress = progress
        end_ns = sim.run()
        rec.finish(end_ns)
    segments = segments_frame(rec, end_ns, level, params.bus)
    full = segments_frame(rec, end_ns, 3, params.bus)       # with IDs and bytes, for the I/O table
    ios = ios_frame(sim.ios, end_ns, params.disk.sector_bytes, full)
    completed = int(ios["complete"].sum())
    data_bytes = int(full.filter(pl.col("phase").str.starts_with("DATA"))["bytes"].sum() or 0)
    if truth_dir is not None:
        out = Path(truth_dir)
        out.mkdir(parents=True, exist_ok=True)
        outputs.write_frame(out / "segments.parquet", segments, parquet=True)
        outputs.write_frame(out / "ios.parquet", ios, parquet=True)
    return Result(path, level, end_ns, segments, ios, completed, data_bytes, rec.written)


def _describe(wl: Workload, p: Params, level: int) -> str:
    span = f"duration={wl.duration_ns}ns" if wl.duration_ns is not None else f"count={wl.count}"
    return (f"disks={wl.disks} op={wl.op} pattern={wl.pattern} size={wl.size} inflight={wl.inflight} "
            f"{span} bfr={p.disk.bfr:.4f} ber={p.disk.ber:.4f} readahead={'on' if p.disk.readahead else 'off'} "
            f"host={p.host.mode} byte_ns={p.bus.byte_ns} alloc_pauses={'on' if p.hba.alloc_pauses else 'off'} "
            f"level={level} seed={wl.seed}")
