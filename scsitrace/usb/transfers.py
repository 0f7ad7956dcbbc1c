"""URB events -> transfers: each submit paired with its completion by URB id (one compiled
pass, scsitrace._native.usb.transfers, with the URBs in flight in a hash table), in time order."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .._native import usb as _usb
from .urbs import DATA_PREFIX


@dataclass
class Transfers:
    """One row per URB, in time order (submit time, else completion time; then row):
    submit and completion paired by URB id (ids are reused after completion, so a submit
    pairs with the next event of its id when that is a completion). Completions whose
    submit is not in the capture are transfers of their own, without submit time.
    `cols`: the compiled pass's columns (native/src/usb/machine.rs `transfers`): `s_row`,
    `c_row` (event rows, null if none), `row` (the row naming the transfer: submit, else
    completion), `data_row` (the row whose data it moved, IN: the completion; null if none),
    `submit_ns`, `complete_ns`, `status`, `req_len`, `actual` (null where unknown), `dir_in`,
    `xfer`, `bus_dev` ((bus << 8) | device address)."""

    urbs: pl.DataFrame
    cols: pl.DataFrame

    def _ints(self, name: str) -> np.ndarray:
        return self.cols[name].to_numpy()

    row = property(lambda self: self._ints("row"))
    xfer = property(lambda self: self._ints("xfer"))
    bus_dev = property(lambda self: self._ints("bus_dev"))
    dir_in = property(lambda self: self._ints("dir_in").astype(np.bool_))

    def status_errors(self, ok: tuple[int, ...]) -> np.ndarray:
        """Transfers whose status is known and not one of `ok`."""
        return self.cols["status"].is_not_null().to_numpy() & ~self.cols["status"].is_in(list(ok)).fill_null(False).to_numpy()

    def frame(self, idx: np.ndarray) -> pl.DataFrame:
        """The transfers at positions `idx` as a frame (for the rare rows that need one)."""
        t = self.cols[idx]
        row = t["row"]
        named = self.urbs.select("bus", "dev", "ep", "xfer", "urb_id", "setup", "pos")[row.to_numpy()]
        return named.with_columns(
            row.alias("i"), t["submit_ns"], t["complete_ns"], t["status"].cast(pl.Int32), t["req_len"], t["actual"],
            (self.urbs["event"].gather(t["c_row"]) == "E").fill_null(False).alias("submit_error"),
            self.urbs["data"].gather(t["data_row"]).bin.slice(0, DATA_PREFIX).alias("data"),
            t["dir_in"].cast(pl.Boolean),
            t["submit_ns"].fill_null(t["complete_ns"]).alias("t0"),
        )


def transfers(u: pl.DataFrame) -> Transfers:
    """The transfers of the URB table `u`, in one compiled pass (scsitrace._native.usb.transfers):
    a submit pairs with the next event of its URB id when that is a completion (C or E); a
    completion not preceded (within its id) by a submit is a transfer on its own. So only
    submits still waiting for their completion are remembered (the URBs in flight, in a
    hash table), not every id of the capture. IN transfers move the completion's data, OUT
    transfers the submit's (a lone completion: its own)."""
    return Transfers(urbs=u, cols=pl.DataFrame(_usb.transfers(u)))
