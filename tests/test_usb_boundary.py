"""The usb area's boundary with the compiled core (issue 26, item 5): every pass takes named
inputs (a table read by column name, or a record read by attribute) and hands back named
results, and a missing value reaches Python as a null, never as the passes' working marker
(i64::MIN). The markers are checked across the tree by tests/test_boundary.py."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import polars as pl

from scsitrace.usb.bot import bot_commands
from scsitrace.usb.transfers import transfers
from scsitrace.usb.urbs import URBS

ROOT = Path(__file__).resolve().parent.parent
I64_MIN = -(1 << 63)


def _cbw(tag: int, length: int) -> bytes:
    cdb = bytes([0x28, 0, 0, 0, 0, 8, 0, 0, 1, 0]) + bytes(6)         # READ(10), 1 block at LBA 8
    return b"USBC" + struct.pack("<IIBBB", tag, length, 0x80, 0, 10) + cdb


def _urbs(rows: list[dict]) -> pl.DataFrame:
    base = {"xfer": 3, "bus": 1, "dev": 4, "status": 0, "setup": None, "data": None, "data_len": 0}
    full = [{**base, **r, "pos": i} for i, r in enumerate(rows)]
    return pl.DataFrame({k: [r.get(k) for r in full] for k in URBS}, schema=URBS)


def test_unknown_lengths_and_times_cross_as_nulls():
    """A Bulk-Only command whose CSW never completes (the capture ended) and a URB whose
    length the input does not give: the transfers and the command carry nulls there, and no
    integer column holds the passes' working marker."""
    frame = _urbs([
        {"t_ns": 0, "urb_id": 1, "event": "S", "ep": 0x02, "length": 31, "data": _cbw(7, 512), "data_len": 31},
        {"t_ns": 10, "urb_id": 1, "event": "C", "ep": 0x02, "length": None},      # actual length not given
        {"t_ns": 20, "urb_id": 2, "event": "S", "ep": 0x81, "length": 512, "status": -115},
        {"t_ns": 30, "urb_id": 2, "event": "C", "ep": 0x81, "length": 512, "data": bytes(32), "data_len": 512},
        {"t_ns": 40, "urb_id": 3, "event": "S", "ep": 0x81, "length": 13, "status": -115},   # CSW read, no completion
    ])
    xf = transfers(frame)
    assert xf.cols["actual"].to_list() == [None, 512, None]
    assert xf.cols["complete_ns"].to_list() == [10, 30, None]
    assert xf.cols["status"].to_list() == [0, 0, None]
    assert xf.cols["req_len"].to_list() == [31, 512, 13]
    cmds, _, _ = bot_commands(xf)
    assert cmds.height == 1
    row = cmds.row(0, named=True)
    assert (row["cmd_s"], row["cmd_c"], row["data_s"], row["data_c"]) == (0, 10, 20, 30)
    assert row["sts_s"] is None and row["sts_c"] is None and row["csw_tag"] is None and row["residue"] is None
    assert row["data_in"] is True and row["reason"] == "no CSW (capture ended)" and row["usb_tag"] == 7
    for table in (xf.cols, cmds):
        for name, dtype in table.schema.items():
            if dtype.is_integer() and table[name].null_count() < table.height:
                assert table[name].min() > I64_MIN, name


def test_unknown_status_and_length_reach_the_transfers_as_nulls():
    """The machines read the URB table itself: a completion whose status and length the
    capture does not give (the pyshark route) gives a transfer with both null, and a setup
    packet shorter than 8 bytes is read zero-padded."""
    frame = _urbs([{"t_ns": 0, "urb_id": 1, "event": "S", "ep": 0x02, "length": None},
                   {"t_ns": 5, "urb_id": 1, "event": "C", "ep": 0x02, "length": 3, "status": None},
                   {"t_ns": 6, "urb_id": 2, "event": "S", "ep": 0x00, "xfer": 2, "length": 0,
                    "setup": bytes([0x21, 0xFF])},
                   {"t_ns": 7, "urb_id": 2, "event": "C", "ep": 0x00, "xfer": 2, "length": 0}])
    xf = transfers(frame)
    assert xf.cols["req_len"].to_list() == [None, 0]
    assert xf.cols["actual"].to_list() == [3, 0]
    assert xf.cols["status"].to_list() == [None, 0]
    shown = xf.frame(np.arange(2))
    assert shown["setup"].to_list() == [None, bytes([0x21, 0xFF])]
    assert shown["submit_error"].to_list() == [False, False]


def test_an_empty_table_crosses():
    """An empty URB table (string and binary columns whose buffers polars may leave
    unaligned or dangling) reaches the passes and gives empty transfers, not a panic."""
    xf = transfers(pl.DataFrame(schema=URBS))
    assert xf.cols.height == 0
    assert xf.frame(np.arange(0)).height == 0
