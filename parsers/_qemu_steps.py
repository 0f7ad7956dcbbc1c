"""The steps and phase runs of a QEMU LSI trace (parsers/qemu_lsi.py): each decoded event with
the bus phase in force and the phase run it belongs to (`steps_frame`), each run with its
target, ATN, status and the bytes moved in it (`runs_frame`), the USB device models' commands
(`device_commands`).

`parsers/_qemu_stream.py` gives the same runs batch by batch, as the blocks of lines come.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ._qemu_fields import decode_fields as _decode_fields

PHASE_OF_EVENT = {
    "lsi_execute_script_io_selected": "SELECTION",
    "lsi_reselect": "RESELECTION",
    "lsi_execute_script_io_disconnect": "BUS FREE",
    "lsi_do_msgout": "MESSAGE OUT",
    "lsi_do_command": "COMMAND",
    "lsi_do_msgin": "MESSAGE IN",
    "lsi_do_status": "STATUS",
}
# QEMU's phase names in the SCRIPTS compare trace (hw/scsi/lsi53c895a.c, scsi_phases[])
PHASE_OF_COMPARE = {
    "DOUT": "DATA OUT", "DIN": "DATA IN", "CMD": "COMMAND", "STATUS": "STATUS",
    "RSVOUT": "RESERVED", "RSVIN": "RESERVED", "MSGOUT": "MESSAGE OUT", "MSGIN": "MESSAGE IN",
}
# MESSAGE OUT bytes a decoded msgout event stands for (SCSI-2 message codes)
MSGOUT_FIXED_BYTES = {
    "lsi_do_msgout_noop": [0x08], "lsi_do_msgout_abort": [0x06],
    "lsi_do_msgout_disconnect": [0x04], "lsi_do_msgout_clearqueue": [0x0E],
    "lsi_do_msgout_busdevicereset": [0x0C],
}


@dataclass
class Carry:
    """What the steps of the batches before say about the next: the latest stamp, the phase in
    force, the runs numbered."""
    t_max: int | None = None
    phase: str | None = None
    runs: int = 0


def steps_frame(ev: pl.DataFrame, carry: Carry | None = None) -> pl.DataFrame:
    """One row per event with the bus phase in force and the phase run it belongs to.

    Times go forward only: QEMU's threads stamp their lines independently, so a line may
    carry a stamp a microsecond before the one above it; it is taken to happen at the
    later time (counted in `clamped`). Times count from the earliest stamp; with `carry`
    (a batch after others: `Stream`) they stay absolute and go on from the batches before,
    as do the phase and the run numbers (`carry` is moved on to this batch's end).
    """
    if "bad_field" not in ev.columns:
        ev = _decode_fields(ev)
    phase_here = pl.coalesce(
        pl.col("event").replace_strict(PHASE_OF_EVENT, default=None),
        pl.when(pl.col("event") == "lsi_execute_script_tc_compp")
        .then(pl.col("compare").replace_strict(PHASE_OF_COMPARE, default=None)),
    )
    c = carry or Carry()
    t0 = 0 if carry is not None else ev["t_abs_ns"].min() if ev.height else 0
    latest = pl.col("t_abs_ns").cum_max()
    if c.t_max is not None:
        latest = pl.max_horizontal(latest, pl.lit(c.t_max, pl.Int64))
    phase = pl.col("phase_here").forward_fill()
    ev = ev.with_columns(
        phase_here.alias("phase_here"),
        latest.alias("t_abs_ns"),
        (pl.col("t_abs_ns") < latest).alias("clamped"),
    ).with_columns(
        (pl.col("t_abs_ns") - t0).alias("t_ns"),
        (phase if c.phase is None else phase.fill_null(pl.lit(c.phase))).alias("phase"),
    )
    before = pl.col("phase").shift(1) if c.phase is None else pl.col("phase").shift(1, fill_value=pl.lit(c.phase))
    changed = (pl.col("phase") != before).fill_null(pl.col("phase").is_not_null())
    steps = ev.with_columns((changed.cast(pl.Int64).cum_sum() + c.runs).alias("run")).with_columns(
        pl.when(pl.col("phase").is_null()).then(None).otherwise(pl.col("run")).alias("run"))
    if carry is not None and steps.height:
        carry.t_max = steps["t_abs_ns"][-1]
        carry.phase = steps["phase"][-1]
        carry.runs = steps["run"].max() if carry.phase is not None else carry.runs
    return steps


def runs_frame(steps: pl.DataFrame, end_ns: int | None = None) -> pl.DataFrame:
    """One row per phase run: start/end, target, ATN, and the bytes moved in it. The last run
    ends at `end_ns` (where the next begins: `Stream`), else at the last step. In one compiled
    pass (`runs_pass`) unless a value in it is no byte; then as it always was (`runs_of`)."""
    end = end_ns if end_ns is not None else steps["t_ns"].max() if steps.height else 0
    runs = runs_pass(steps, end) if steps.height else None
    return runs if runs is not None else runs_of(steps, end)


RUNS = {"run": pl.Int64, "phase": pl.Utf8, "start_ns": pl.Int64, "target": pl.Int64, "atn": pl.Boolean,
        "dma_bytes": pl.Int64, "status": pl.Int64, "end_ns": pl.Int64, "info_bytes": pl.List(pl.UInt8),
        "data_bytes": pl.Int64, "stray_dma_bytes": pl.Int64, "handshakes": pl.Int64}


def runs_pass(steps: pl.DataFrame, end_ns: int) -> pl.DataFrame | None:
    """`runs_of` in one pass in Rust (`native/src/text/qemu.rs:qemu_runs`); None where a value
    is no byte (the Python rebuild decides)."""
    from scsitrace._native import text
    names = text.QEMU_RUN_EVENTS
    codes = {name: i for i, name in enumerate(names) if not name.endswith(("_other", "_fixed"))}
    event = pl.col("event")
    ev = (pl.when(event.is_in(list(MSGOUT_FIXED_BYTES))).then(pl.lit(names.index("lsi_do_msgout_fixed")))
          .when(event.is_in(list(codes))).then(event.replace_strict(codes, default=None, return_dtype=pl.Int64))
          .when(event.str.starts_with("lsi_do_msgout_")).then(pl.lit(names.index("lsi_do_msgout_other"))))
    phases = text.QEMU_PHASES
    coded = steps.select(
        "run", "t_ns", "target", "len", "status", "lun", "tag", "ext_code", "ext_len", "opcode", "lba", "sectors",
        "msg_byte", ev.cast(pl.Int64).alias("ev"),
        event.replace_strict({k: v[0] for k, v in MSGOUT_FIXED_BYTES.items()}, default=None,
                             return_dtype=pl.Int64).alias("fixed"),
        pl.col("phase").replace_strict({p: i for i, p in enumerate(phases)}, default=None,
                                       return_dtype=pl.Int64).alias("phase_code"),
        pl.col("atn").cast(pl.Int64).alias("atn_code"),
    ).cast({"run": pl.Int64, "target": pl.Int64, "len": pl.Int64, "status": pl.Int64, "lun": pl.Int64,
            "tag": pl.Int64, "ext_code": pl.Int64, "ext_len": pl.Int64, "opcode": pl.Int64, "lba": pl.Int64,
            "sectors": pl.Int64, "msg_byte": pl.Int64})
    out = text.qemu_runs(coded, int(end_ns))
    return None if out is None else _runs_of_columns(out)


def _runs_of_columns(out) -> pl.DataFrame:
    """The runs frame (RUNS) of `qemu_runs`' columns."""
    from scsitrace._native import text
    runs = pl.DataFrame(out)
    return runs.with_columns(pl.Series(text.QEMU_PHASES, dtype=pl.Utf8).gather(runs["phase_code"]).alias("phase")).select(
        list(RUNS)).cast(RUNS)


def runs_of(steps: pl.DataFrame, end: int) -> pl.DataFrame:
    """`runs_frame` in polars and Python: the reference of `runs_pass`."""
    runs = steps.filter(pl.col("run").is_not_null()).group_by("run", maintain_order=True).agg(
        pl.col("phase").first(),
        pl.col("t_ns").first().alias("start_ns"),
        pl.col("target").filter(pl.col("event").is_in(["lsi_execute_script_io_selected", "lsi_reselect"])).first(),
        pl.col("atn").filter(pl.col("event") == "lsi_execute_script_io_selected").any().alias("atn"),
        pl.col("len").filter(pl.col("event") == "lsi_do_dma").sum().alias("dma_bytes"),
        pl.col("status").filter(pl.col("event") == "lsi_do_status").first().alias("status"),
    )
    runs = runs.with_columns(pl.col("start_ns").shift(-1).fill_null(end).alias("end_ns"))
    info = pl.concat([_bytes_frame(_msgout_bytes(steps)), _bytes_frame(_command_bytes(steps)),
                      _msgin_bytes(steps, runs)])
    data_phase = pl.col("phase").is_in(["DATA IN", "DATA OUT"])
    return runs.join(info, on="run", how="left", maintain_order="left").with_columns(
        pl.when((pl.col("phase") == "STATUS") & pl.col("status").is_not_null())
        .then(pl.concat_list(pl.col("status").cast(pl.UInt8)))
        .otherwise(pl.col("info_bytes")).alias("info_bytes"),
        pl.when(data_phase).then(pl.col("dma_bytes")).otherwise(0).alias("data_bytes"),
        pl.when(~data_phase).then(pl.col("dma_bytes")).otherwise(0).alias("stray_dma_bytes"),
    ).with_columns(
        (pl.col("data_bytes") + pl.col("info_bytes").list.len().fill_null(0)).alias("handshakes"))


INFO_SCHEMA = {"run": pl.Int64, "info_bytes": pl.List(pl.UInt8)}


def _bytes_frame(by_run: dict[int, list[int]]) -> pl.DataFrame:
    """run -> bytes, built in one go (a Series per run would cost a Python call each)."""
    import pyarrow as pa
    flat = [b for v in by_run.values() for b in v]
    lengths = [len(v) for v in by_run.values()]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    arr = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, pa.uint8()))
    return pl.DataFrame({"run": pl.Series(list(by_run), dtype=pl.Int64),
                         "info_bytes": pl.Series(pl.from_arrow(arr)).cast(pl.List(pl.UInt8))})


def _msgout_bytes(steps: pl.DataFrame) -> dict[int, list[int]]:
    """MESSAGE OUT bytes per run, rebuilt from the decoded msgout events (per command)."""
    rows = steps.filter(pl.col("event").str.starts_with("lsi_do_msgout_") & (pl.col("phase") == "MESSAGE OUT"))
    out: dict[int, list[int]] = {}
    for r in rows.select("run", "event", "lun", "tag", "ext_code", "ext_len").iter_rows():
        run, event, lun, tag, ext_code, ext_len = r
        if event == "lsi_do_msgout_select":
            msg = [0x80 | (lun or 0) & 0x07]
        elif event == "lsi_do_msgout_simplequeue":
            msg = [0x20, (tag or 0) & 0xFF]
        elif event == "lsi_do_msgout_extended" and ext_code is not None:
            n = ext_len or 1
            msg = [0x01, n, ext_code] + [0] * (n - 1)  # the extended message's arguments are not traced
        else:
            msg = MSGOUT_FIXED_BYTES.get(event, [])
        out.setdefault(run, []).extend(msg)
    return out


def _command_bytes(steps: pl.DataFrame) -> dict[int, list[int]]:
    """The CDB of each COMMAND run, rebuilt from opcode, LBA and sector count (per command)."""
    cmd = steps.filter(pl.col("phase") == "COMMAND").group_by("run", maintain_order=True).agg(
        pl.col("len").filter(pl.col("event") == "lsi_do_command").first(),
        pl.col("opcode").drop_nulls().first(),
        pl.col("lba").drop_nulls().first(),
        pl.col("sectors").drop_nulls().first(),
        pl.col("length").drop_nulls().first(),
    ).filter(pl.col("opcode").is_not_null())
    return {r[0]: build_cdb(*r[1:]) for r in cmd.iter_rows()}


def build_cdb(length: int | None, opcode: int, lba: int | None, sectors: int | None,
              xfer_bytes: int | None) -> list[int]:
    """A CDB with the fields the trace gives (opcode, LBA, transfer length); others zero.

    >>> build_cdb(10, 0x28, 4096, 64, 32768)
    [40, 0, 0, 0, 16, 0, 0, 0, 64, 0]
    """
    n = length or {0: 6, 1: 10, 2: 10, 4: 16, 5: 12}.get(opcode >> 5, 6)
    cdb = [0] * n
    cdb[0] = opcode
    blocks = sectors if sectors is not None else None
    if lba is not None and n == 6:
        cdb[1:4] = list(((lba & 0x1FFFFF)).to_bytes(3, "big"))
        if blocks is not None:
            cdb[4] = blocks & 0xFF
    elif lba is not None and n == 10:
        cdb[2:6] = list((lba & 0xFFFFFFFF).to_bytes(4, "big"))
        if blocks is not None:
            cdb[7:9] = list((blocks & 0xFFFF).to_bytes(2, "big"))
    elif lba is not None and n == 12:
        cdb[2:6] = list((lba & 0xFFFFFFFF).to_bytes(4, "big"))
        if blocks is not None:
            cdb[6:10] = list((blocks & 0xFFFFFFFF).to_bytes(4, "big"))
    elif lba is not None and n == 16:
        cdb[2:10] = list((lba & (1 << 64) - 1).to_bytes(8, "big"))
        if blocks is not None:
            cdb[10:14] = list((blocks & 0xFFFFFFFF).to_bytes(4, "big"))
    return cdb


def _msgin_bytes(steps: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """MESSAGE IN bytes: the chip queues them (lsi_add_msg_byte) before the phase begins, so
    each queued byte belongs to the next MESSAGE IN run at or after it."""
    queued = steps.with_row_index("row").filter(
        (pl.col("event") == "lsi_add_msg_byte") & pl.col("msg_byte").is_not_null())
    if not queued.height:
        return pl.DataFrame(schema=INFO_SCHEMA)
    first_row = steps.with_row_index("row").filter(pl.col("run").is_not_null()).group_by("run").agg(
        pl.col("row").min())
    msgin = runs.filter(pl.col("phase") == "MESSAGE IN").select("run").join(first_row, on="run").sort("row")
    owned = queued.select("row", "msg_byte").sort("row").join_asof(
        msgin.rename({"row": "run_row"}), left_on="row", right_on="run_row", strategy="forward")
    grouped = owned.filter(pl.col("run").is_not_null()).group_by("run", maintain_order=True).agg(
        pl.col("msg_byte").cast(pl.UInt8).alias("info_bytes"))
    return grouped.select(pl.col("run").cast(pl.Int64), "info_bytes")


USB_COMMAND_EVENTS = ("usb_msd_cmd_submit", "usb_uas_command")
USB_STATUS_EVENTS = ("usb_msd_send_status", "usb_uas_sense")
DEVICE_COMMANDS = {"tag": pl.Int64, "opcode": pl.Int64, "lba": pl.Int64, "blocks": pl.Int64, "bytes": pl.Int64,
                   "start_ns": pl.Int64, "end_ns": pl.Int64}


def device_commands(steps: pl.DataFrame, block_bytes: int = 512) -> pl.DataFrame:
    """Commands as QEMU's USB mass-storage device models handled them: from the command
    (Bulk-Only CBW, UAS command IU) to the status sent back (CSW, UAS sense IU).

    Anchored on `scsi_req_parsed` (opcode, transfer length); the LBA is the next
    `scsi_req_parsed_lba` of the same tag, the start the USB command event just before it,
    the end the first status event of the same tag after it. Empty for LSI traces (their
    commands are the bus I/Os).
    """
    rows = steps.with_row_index("row").select("row", "t_ns", "event", "tag", "opcode", "lba", "length")
    usb = rows.filter(pl.col("event").is_in(USB_COMMAND_EVENTS))
    if not usb.height:
        return pl.DataFrame(schema=DEVICE_COMMANDS)
    parsed = rows.filter(pl.col("event") == "scsi_req_parsed").select("row", "tag", "opcode", "length")
    lba = rows.filter(pl.col("event") == "scsi_req_parsed_lba").select(pl.col("row").alias("lba_row"), "tag", "lba")
    status = rows.filter(pl.col("event").is_in(USB_STATUS_EVENTS)).select(
        pl.col("row").alias("status_row"), "tag", pl.col("t_ns").alias("end_ns"))
    cmds = parsed.sort("row").join_asof(
        usb.select(pl.col("row").alias("usb_row"), pl.col("t_ns").alias("start_ns")).sort("usb_row"),
        left_on="row", right_on="usb_row", strategy="backward")
    cmds = cmds.join_asof(lba.sort("lba_row"), left_on="row", right_on="lba_row", by="tag", strategy="forward",
                          check_sortedness=False)
    cmds = cmds.join_asof(status.sort("status_row"), left_on="row", right_on="status_row", by="tag",
                          strategy="forward", check_sortedness=False)
    return cmds.filter(pl.col("start_ns").is_not_null()).select(
        "tag", "opcode", "lba", (pl.col("length") // block_bytes).alias("blocks"), pl.col("length").alias("bytes"),
        "start_ns", "end_ns")
