"""A QEMU LSI trace's steps and runs as the blocks come (parsers/qemu_lsi.py): `Stream` gives
`_qemu_steps`' runs batch by batch (a block of lines at a time): a batch's steps are numbered on
from the last one's (times going forward, the phase in force, the runs counted), and the rows of
a run that may still grow, or of one whose MESSAGE IN bytes are queued for a run not yet
complete, wait for the next batch. Memory follows the runs, not the lines. `CompiledStream` is
the same in one Rust stream (`native/src/text/qemu.rs` `QemuStream`); `Stream` is its reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import polars as pl

from ._qemu_steps import (DEVICE_COMMANDS, MSGOUT_FIXED_BYTES, PHASE_OF_COMPARE, PHASE_OF_EVENT, RUNS,
                          USB_COMMAND_EVENTS, USB_STATUS_EVENTS, Carry, _runs_of_columns, device_commands,
                          runs_frame, steps_frame)

DEVICE_EVENTS = (*USB_COMMAND_EVENTS, "scsi_req_parsed", "scsi_req_parsed_lba", *USB_STATUS_EVENTS)


@dataclass
class Stream:
    """`steps_frame` + `runs_frame` + `device_commands` of a trace fed in batches of decoded
    events in line order (`add`), equal to those of the whole trace (`finish`). `summed`:
    what to make of each part's final runs as they come (QEMU's stretches), its time columns
    `summed_times` moved to the trace's time zero at the end like the runs'."""
    summed: Callable[[pl.DataFrame], pl.DataFrame] | None = None
    summed_times: tuple[str, ...] = ()
    keep_runs: bool = True                  # False: the runs are counted and summed, not kept
    run_count: int = 0
    stray_dma_bytes: int = 0
    sums: list[pl.DataFrame] = field(default_factory=list)
    carry: Carry = field(default_factory=Carry)
    held: pl.DataFrame | None = None        # steps of runs that are not final yet
    runs: list[pl.DataFrame] = field(default_factory=list)
    device_rows: list[pl.DataFrame] = field(default_factory=list)  # from the first USB command on
    names: set = field(default_factory=set)
    t_min: int | None = None
    events: int = 0
    lsi_events: int = 0
    clamped: int = 0

    def add(self, ev: pl.DataFrame) -> None:
        if not ev.height:
            return
        self.events += ev.height
        self.names.update(ev["event"].unique().to_list())
        low = ev["t_abs_ns"].min()
        self.t_min = low if self.t_min is None else min(self.t_min, low)
        steps = steps_frame(ev, self.carry)
        self.lsi_events += int(steps["event"].str.starts_with("lsi_").sum())
        self.clamped += int(steps["clamped"].sum())
        self._keep_device_rows(steps)
        buf = steps if self.held is None else pl.concat([self.held, steps], how="vertical_relaxed")
        cut = final_rows(buf)
        if cut:
            self._emit(runs_frame(buf.head(cut), end_ns=buf["t_ns"][cut]))
        self.held = buf.slice(cut)

    def _emit(self, runs: pl.DataFrame) -> None:
        if runs.height:
            self.run_count += runs.height
            self.stray_dma_bytes += int(runs["stray_dma_bytes"].sum())
            if self.keep_runs:
                self.runs.append(runs)
            if self.summed is not None:
                self.sums.append(self.summed(runs))

    def _keep_device_rows(self, steps: pl.DataFrame) -> None:
        """The rows `device_commands` reads: a command parsed before the first USB command
        event has none to start it, so rows before that one are not kept."""
        rows = steps.filter(pl.col("event").is_in(DEVICE_EVENTS))
        if not self.device_rows:
            usb = rows["event"].is_in(USB_COMMAND_EVENTS)
            if not usb.any():
                return
            rows = rows.slice(int(usb.arg_true()[0]))
        self.device_rows.append(rows.select("t_ns", "event", "tag", "opcode", "lba", "length"))

    def summed_runs(self) -> pl.DataFrame | None:
        """What `summed` made of the runs, times from the earliest stamp (after `finish`)."""
        if self.summed is None:
            return None
        t0 = self.t_min or 0
        # one chunk: the bus layer reads its columns as numpy arrays
        whole = pl.concat(self.sums) if self.sums else self.summed(_no_runs())
        return whole.with_columns(pl.col(c) - t0 for c in self.summed_times)

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(the runs, none unless `keep_runs`; the device commands), times from the earliest stamp."""
        if self.held is not None and self.held.height:
            self._emit(runs_frame(self.held, end_ns=self.carry.t_max))
            self.held = None
        t0 = self.t_min or 0
        runs = pl.concat(self.runs, rechunk=False) if self.runs else _no_runs() if self.keep_runs else pl.DataFrame(
            schema=RUNS)
        runs = runs.with_columns(pl.col("start_ns") - t0, pl.col("end_ns") - t0)
        device = device_commands(pl.concat(self.device_rows)) if self.device_rows else pl.DataFrame(schema=DEVICE_COMMANDS)
        return runs, device.with_columns(pl.col("start_ns") - t0, pl.col("end_ns") - t0)


class NotCompiled(Exception):
    """The compiled stream met a value that is no byte, or a CDB past its longest: the trace
    is read again the Python way (`Stream`), which decides as it always did."""


@dataclass(frozen=True)
class Stretching:
    """How runs become stretches (parsers/qemu_lsi.py `stretches`): the lines of each phase,
    the ATN line, the lines of an ARBITRATION, the initiator's ID."""
    lines_of_phase: dict
    atn_line: int
    arbitration_lines: int
    initiator: int


@dataclass(frozen=True)
class StreamRules:
    """How the compiled stream codes events and sums runs per stretch (read by name:
    native/src/text/qemu.rs `StreamRules`), from this module's tables and a `Stretching`."""
    phase_events: list
    phase_of_event: list
    compare_event: str
    compares: list
    phase_of_compare: list
    fixed_events: list
    fixed_bytes: list
    usb_command_events: list
    device_events: list
    lines_of_phase: list
    atn_line: int
    arbitration_lines: int
    initiator: int
    msgout_prefix: str = "lsi_do_msgout_"
    lsi_prefix: str = "lsi_"


def stream_rules(stretching: Stretching | None) -> StreamRules:
    from scsitrace._native import text
    code = text.QEMU_PHASES.index
    s = stretching or Stretching({}, 0, 0, 0)
    return StreamRules(list(PHASE_OF_EVENT), [code(p) for p in PHASE_OF_EVENT.values()],
                       "lsi_execute_script_tc_compp", list(PHASE_OF_COMPARE),
                       [code(p) for p in PHASE_OF_COMPARE.values()], list(MSGOUT_FIXED_BYTES),
                       [v[0] for v in MSGOUT_FIXED_BYTES.values()], list(USB_COMMAND_EVENTS), list(DEVICE_EVENTS),
                       [s.lines_of_phase.get(p, 0) for p in text.QEMU_PHASES], s.atn_line, s.arbitration_lines,
                       s.initiator)


STREAM_COLUMNS = ("t_abs_ns", "event", "compare", "target", "lun", "tag", "ext_code", "ext_len", "len", "status",
                  "msg_byte", "opcode", "lba", "sectors")


@dataclass
class CompiledStream(Stream):
    """`Stream` with its steps and runs in one compiled pass (`QemuStream`, Rust): no step is
    held back, the compiled stream keeps the open run and the queued MESSAGE IN bytes; with
    `stretching` the runs are summed per stretch there too (`summed` is then what it
    computes) and a block whose lines are all records is scanned and summed in one call
    (`scan`). Raises NotCompiled where `runs_pass` would give None."""
    stretching: Stretching | None = None
    native: object = None

    def _native(self):
        if self.native is None:
            from scsitrace._native import text
            self.native = text.QemuStream(stream_rules(self.stretching), self.stretching is not None)
        return self.native

    def scan(self, view):
        """The scanner's result of a part (`QemuScan`): `fed` where the stream summed it."""
        from . import _qemu_scan
        buf = np.frombuffer(view, np.uint8)
        out = self._native().scan(buf, _qemu_scan.parts_of(buf))
        if self.native.failed:
            raise NotCompiled
        if out.fed:
            self.names.update(out.names)
            self._take_stretches()
        return out

    def _take_stretches(self) -> None:
        """The stretches the compiled stream summed since the last call, one frame a part."""
        part = self.native.stretches() if self.stretching is not None else None
        if part is not None:
            self.sums.append(pl.DataFrame(part))

    def add(self, ev: pl.DataFrame) -> None:
        if not ev.height:
            return
        native = self._native()
        names = set(ev["event"].unique().to_list())
        self.names |= names
        if names & set(DEVICE_EVENTS):
            self._keep_device_rows(_forward_times(ev, native.t_max))
        out = native.add(ev.select(*STREAM_COLUMNS, pl.col("atn").cast(pl.Int64).alias("atn_code")))
        if native.failed:
            raise NotCompiled
        if out is not None:
            self._emit(_runs_of_columns(out))
        self._take_stretches()

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        native = self._native()
        out = native.finish()
        if native.failed:
            raise NotCompiled
        if out is not None:
            self._emit(_runs_of_columns(out))
        self._take_stretches()
        self.t_min, self.events, self.lsi_events, self.clamped = (native.t_min, native.events, native.lsi_events,
                                                                  native.clamped)
        self.run_count, self.stray_dma_bytes = native.run_count, native.stray_dma_bytes
        return super().finish()


def _forward_times(ev: pl.DataFrame, t_max: int | None) -> pl.DataFrame:
    """The events with `t_ns` as `steps_frame` gives it after `t_max` (the rows
    `_keep_device_rows` reads)."""
    latest = pl.col("t_abs_ns").cum_max()
    if t_max is not None:
        latest = pl.max_horizontal(latest, pl.lit(t_max, pl.Int64))
    return ev.with_columns(latest.alias("t_ns"))


EMPTY_EVENTS = {"line_no": pl.Int64, "t_abs_ns": pl.Int64, "event": pl.Utf8, "detail": pl.Utf8}


def _no_runs() -> pl.DataFrame:
    return runs_frame(steps_frame(pl.DataFrame(schema=EMPTY_EVENTS)))


def final_rows(steps: pl.DataFrame) -> int:
    """How many of the first rows of `steps` (steps with their runs numbered, line order)
    belong to runs that are final: runs before the last one (which may go on), but not from
    the run of a MESSAGE IN byte queued (`lsi_add_msg_byte`) for a MESSAGE IN run that has
    not begun or is not final, nor after it (its run would lose the byte)."""
    run = steps["run"]
    if run.null_count() == steps.height:
        return 0
    r = run.fill_null(-1).to_numpy()
    change = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))   # each run's first row
    cut = int(change[-1])
    msgin = change[(steps["phase"].gather(change) == "MESSAGE IN").fill_null(False).to_numpy() & (r[change] >= 0)]
    queued = steps.select(((pl.col("event") == "lsi_add_msg_byte") & pl.col("msg_byte").is_not_null())
                          .arg_true()).to_series().to_numpy()
    owner = np.searchsorted(msgin, queued)       # the next MESSAGE IN run's first row, at or after
    owner_row = np.append(msgin, len(r))[owner]
    # the first row of each queued byte's run (before any phase: nothing before it is final)
    first_of_run = np.where(r[queued] < 0, 0, change[np.searchsorted(change, queued, side="right") - 1])
    while True:
        waiting = (queued < cut) & (owner_row >= cut)
        if not waiting.any():
            return cut
        cut = int(first_of_run[waiting].min())
