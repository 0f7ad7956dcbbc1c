"""URB events -> transfers: each submit paired with its completion by URB id (one compiled
pass, scsitrace._native.usb.pair_urbs, with the URBs in flight in a hash table), in time order."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .._native import usb as _usb
from ..schema import NULL, nullable
from .urbs import UrbColumns, binary_column

EV_S, EV_C, EV_E = ord("S"), ord("C"), ord("E")


@dataclass
class Transfers:
    """One row per URB, in time order (submit time, else completion time; then row):
    submit and completion paired by URB id (ids are reused after completion, so a submit
    pairs with the next event of its id when that is a completion). Completions whose
    submit is not in the capture are transfers of their own, without submit time.
    Times, lengths: NULL where unknown."""

    urbs: UrbColumns
    s_row: np.ndarray        # submit event row, -1 if none
    c_row: np.ndarray        # completion event row, -1 if none
    row: np.ndarray          # the row naming the transfer: submit, else completion
    data_row: np.ndarray     # the row whose data the transfer moved (IN: completion), -1 if none
    submit_ns: np.ndarray
    complete_ns: np.ndarray
    status: np.ndarray
    status_null: np.ndarray
    req_len: np.ndarray
    actual: np.ndarray
    dir_in: np.ndarray
    xfer: np.ndarray
    bus_dev: np.ndarray      # (bus << 8) | device address

    def frame(self, idx: np.ndarray) -> pl.DataFrame:
        """The transfers at positions `idx` as a frame (for the rare rows that need one)."""
        u, row = self.urbs, self.row[idx]
        c_row, data_row = self.c_row[idx], self.data_row[idx]
        submit, complete = self.submit_ns[idx], self.complete_ns[idx]
        present = (data_row >= 0) & (u.data_size[data_row] >= 0)
        return pl.DataFrame({
            "bus": u.bus[row], "dev": u.dev[row], "ep": u.ep[row], "xfer": u.xfer[row],
            "urb_id": u.urb_id[row],
            "setup": binary_column(u.setup[row], np.full(len(row), 8), u.has_setup[row]),
            "pos": u.pos[row], "i": row, "submit_ns": nullable(submit), "complete_ns": nullable(complete),
            "status": nullable(self.status[idx], self.status_null[idx]), "req_len": nullable(self.req_len[idx]),
            "actual": nullable(self.actual[idx]),
            "submit_error": (c_row >= 0) & (u.event[c_row] == EV_E),
            "data": binary_column(u.data_rows(data_row), u.data_size[data_row], present),
            "dir_in": self.dir_in[idx],
            "t0": np.where(submit != NULL, submit, complete),
        })


def transfers(u: UrbColumns) -> Transfers:
    s_row, c_row = pair_urbs(u.urb_id, u.event)
    cols, in_order = transfer_columns(s_row, c_row, u)
    if not in_order:
        # transfers come in row order: sort by time (submit, else completion), then row
        submit, complete = cols["submit_ns"], cols["complete_ns"]
        order = np.lexsort((cols["row"], np.where(submit != NULL, submit, complete)))
        s_row, c_row = s_row[order], c_row[order]
        cols, _ = transfer_columns(s_row, c_row, u)
    return Transfers(urbs=u, s_row=s_row, c_row=c_row, **cols)


def pair_urbs(urb_id: np.ndarray, event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Transfers as (submit row, completion row), -1 where absent, in row order.

    A submit pairs with the next event of its URB id when that is a completion (C or E);
    a completion not preceded (within its id) by a submit is a transfer on its own. So
    only submits still waiting for their completion need remembering: the compiled pass
    (scsitrace._native.usb.pair_urbs) holds those (the URBs in flight) in a hash table,
    not every id of the capture."""
    n = len(urb_id)
    # big arrays come from numpy (lazy, huge pages); one each (the pass borrows each apart)
    s_rows, c_rows = np.empty(n, np.int64), np.empty(n, np.int64)
    count = _usb.pair_urbs(np.ascontiguousarray(urb_id, np.uint64), np.ascontiguousarray(event, np.uint8),
                           s_rows, c_rows)
    return s_rows[:count], c_rows[:count]


def transfer_columns(s_row, c_row, urbs: UrbColumns) -> tuple[dict, bool]:
    """Per transfer: its columns by Transfers' names (naming row, data row, submit and
    completion times, status and status unknown, requested and actual length, direction IN,
    transfer type, (bus << 8) | device address), and whether the transfers are in time order
    of their submit, else completion. IN transfers move the completion's data, OUT transfers
    the submit's (a lone completion: its own)."""
    return _usb.transfer_columns(np.ascontiguousarray(s_row, np.int64), np.ascontiguousarray(c_row, np.int64), urbs)
