"""Checks shared by every layer's filters (--window, --device, --target, --lun, --pid): a
filter that selects nothing, or a window outside the trace, is a usage error that says what
the trace has (exit 2), never a table of zeros."""
from __future__ import annotations

from .errors import UsageError


def check_window(window, first_ns: int | None, last_ns: int | None) -> None:
    """--window (ns from the trace start) must overlap [first_ns, last_ns]."""
    if window is None:
        return
    lo, hi = window
    if first_ns is None:
        raise UsageError("--window: the trace has no records to select from")
    if (lo is not None and lo > last_ns) or (hi is not None and hi < first_ns):
        raise UsageError(f"--window {_secs(lo)}:{_secs(hi)} lies outside the trace, which runs from "
                         f"{_secs(first_ns)} to {_secs(last_ns)} s")


def check_found(flag: str, value, existing) -> None:
    """`flag value` selected nothing: say which values the trace has."""
    have = sorted({str(v) for v in existing if v is not None}, key=_natural)
    listed = ", ".join(have[:20]) + (f" (and {len(have) - 20} more)" if len(have) > 20 else "")
    raise UsageError(f"{flag} {value}: not in the trace (it has: {listed or 'none'})")


def refuse(flag: str, layer: str, why: str) -> None:
    raise UsageError(f"{flag} does not apply to {layer} traces: {why}")


def _secs(ns) -> str:
    return "" if ns is None else f"{ns / 1e9:g}"


def _natural(text: str):
    return [int(p) if p.isdigit() else p for p in text.replace(",", ":").split(":")]
