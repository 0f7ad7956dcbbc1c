"""Dispatch from a parsed `Capture` to its layer's analysis (parsers -> core -> reports)."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from . import completeness
from .model import Analysis, Capture

# layer -> module under scsitrace with `analyze(capture, options) -> Analysis`
LAYERS = {
    "bus": "bus",
    "usb": "usb",
    "scsilog": "scsilog",
    "block": "block",
}


@dataclass
class Options:
    """Analysis knobs shared by the CLI, the tests and the reports."""

    settle_ns: int = 400             # bus settle delay: shorter line states are skew
    data_polarity: str = "auto"      # auto | high | low (DB lines as captured / inverted)
    io_size: int | None = None       # bytes per I/O, for bandwidth without REQ/ACK
    layer_options: dict = field(default_factory=dict)  # e.g. device/pid/window for block


def analyze(capture: Capture, options: Options | None = None) -> Analysis:
    options = options or Options()
    mod = import_module(f"{__package__}.{LAYERS[capture.layer]}")
    analysis = mod.analyze(capture, options)
    analysis.notes = list(analysis.notes) + completeness.unusual_notes(analysis)
    return analysis
