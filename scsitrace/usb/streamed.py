"""The Bulk-Only commands of a capture read as a stream (`Capture.chunks`): one machine
(scsitrace._native.usb.BotStream) pairs the URBs and groups the bulk transfers into
commands batch by batch, carrying what is in flight across batch edges, so the capture's
URB columns and transfers are never held whole: memory is one row per command.

The machine covers Bulk-Only captures in time order without bulk URB errors (control
requests are read for the Mass Storage Reset and CLEAR HALT anomalies); anything else (UAS
devices, bulk traffic before a device's first CBW, failed bulk URBs, --window) and
captures without chunks are analysed whole (scsitrace/usb/analysis.py), with the same
results: the machine is the whole-capture passes' rules, fed in pieces.
"""
from __future__ import annotations

import numpy as np

from .._native import usb as _usb
from ..schema import NULL
from ..streams import prefetched

TIMES = ("cmd_s", "cmd_c", "sts_s", "sts_c", "data_s", "data_c", "ctl_t")


def streamed_commands(capture, options) -> dict | None:
    """The machine's commands (bot.bot_commands' `streamed`; times from the capture's first
    event), `no_submit` and `no_complete` (unpaired URBs), `elapsed`; None when the capture
    is to be analysed whole."""
    if capture.chunks is None or not capture.meta.get("streamable") or \
            (options is not None and options.window is not None):
        return None
    machine = _usb.BotStream()
    for u in prefetched(capture.chunks()):
        if not machine.feed(u.t_ns, u.urb_id, u.event, u.xfer, u.ep, u.bus, u.dev, u.status, u.length,
                            u.has_setup, u.setup.reshape(-1), u.data_buf, u.data_at, u.data_size, u.data_head, u.pos):
            return None
    found = machine.finish()
    if found is None:
        return None
    origin = found["t_min"] or 0
    for name in TIMES:
        t = found[name]
        t[t != NULL] -= origin
    found["elapsed"] = (found["t_max"] or 0) - origin
    capture.meta["origin_ns"] = origin
    return found
