"""From a trace to its analysis: `load` parses a file and hands the `Capture` to its layer's
analysis (`LAYERS`), with the knobs of `Options` (parsers -> core -> reports).

The option values a user types (`--window 0.5:1`, `--device 8,0`, `--pid dd,42`) are parsed
here, once, into the typed fields of `Options`; the analyses only read those."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from . import completeness
from .errors import UsageError
from .inputcheck import require_records
from .model import Analysis, Capture

# layer -> package under scsitrace with `analyze(capture, options) -> Analysis` (imported
# when a trace of that layer is analysed: a bus trace does not pay for the block layer)
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
    window: tuple[int | None, int | None] | None = None   # every layer: ns from the trace start (parse_window)
    device: int | str | None = None  # block: dev_t, major << 20 | minor; scsilog: a device name (parse_device)
    pids: tuple[str, ...] | None = None   # block, sg logs: pids or process names (parse_pids)
    target: int | None = None        # bus (in the summary: "Other targets"), kernel logs: SCSI target ID
    lun: int | None = None           # bus, usb, kernel logs: logical unit
    given: dict = field(default_factory=dict)   # the filters as typed, for the reports to state
    # streaming layers hand each batch of finished per-I/O rows (their `ios` columns) to
    # ios_sink(frame, capture) when the user asked for them (--ios), and keep only KEEP_IOS
    ios_sink: object = None
    btt_compat: bool = False         # block: btt's pairing where requests in flight share sectors


def analyze(capture: Capture, options: Options | None = None) -> Analysis:
    options = options or Options()
    analysis = layer_of(capture).analyze(capture, options)
    analysis.notes = list(analysis.notes) + completeness.unusual_notes(analysis)
    return analysis


def layer_of(capture: Capture):
    """The package analysing the capture's layer."""
    return import_module(f"{__package__}.{LAYERS[capture.layer]}")


def load(path: str, fmt: str = "auto", *, strict: bool = True, settle_ns: int | None = None,
         data_polarity: str = "auto", io_size: int | None = None, window: str | None = None,
         device: str | None = None, pid: str | None = None, target: int | None = None, lun: int | None = None,
         tap=None, ios_sink=None, btt_compat: bool = False, **parser_options) -> Analysis:
    """Parse and analyse one trace -> Analysis. The filters are the texts a user types
    (see `Options`); `parser_options` go to the format's parser (mapping, active_low, route).
    `tap(capture)`, if given, runs before the analysis (attribution uses it to keep the
    transitions it re-reads). `ios_sink`: see Options. A progress bar shows on a terminal."""
    from . import parsers
    from .progress import progress_for
    options = Options(data_polarity=data_polarity, io_size=io_size, window=parse_window(window),
                      pids=parse_pids(pid), target=target, lun=lun, ios_sink=ios_sink, btt_compat=btt_compat,
                      given={k: v for k, v in (("window", window), ("device", device), ("pid", pid),
                                               ("target", target), ("lun", lun)) if v is not None})
    with progress_for(path) as progress:
        capture = parsers.parse(path, fmt, strict=strict, progress=progress, **parser_options)
        options.device = parse_device(capture.layer, device)
        layer = layer_of(capture)
        if hasattr(layer, "select"):    # filters that cut the capture itself, before a tap reads it
            layer.select(capture, options)
        if tap is not None:
            tap(capture)
        options.settle_ns = settle_ns if settle_ns is not None else capture.meta.get("settle_ns", 400)
        analysis = require_records(analyze(capture, options), lenient=not strict)
        analysis.filters = dict(options.given)
        return analysis


def parse_window(window) -> tuple[int | None, int | None] | None:
    """'START:END' in seconds from the trace start (either side may be empty) -> ns."""
    if window is None:
        return None
    if isinstance(window, (tuple, list)):
        lo, hi = window
    else:
        lo, sep, hi = str(window).partition(":")
        if not sep:
            raise UsageError(f"--window expects START:END in seconds, got {window!r}")
    try:
        lo_ns = None if lo in ("", None) else int(round(float(lo) * 1e9))
        hi_ns = None if hi in ("", None) else int(round(float(hi) * 1e9))
    except ValueError:
        raise UsageError(f"--window expects START:END in seconds, got {window!r}") from None
    if lo_ns is not None and hi_ns is not None and hi_ns < lo_ns:
        raise UsageError(f"--window {window}: END is before START")
    return lo_ns, hi_ns


def parse_device(layer: str, device) -> int | str | None:
    """--device as the layer names devices: block MAJOR,MINOR -> dev_t; others as given."""
    if device is None or layer != "block":
        return device
    return parse_block_device(device)


def parse_block_device(device) -> int | None:
    """'8,0' (or '8:0') -> dev_t as blktrace records it (major << 20 | minor)."""
    if device is None:
        return None
    text = str(device).replace(":", ",").replace(" ", "")
    major, sep, minor = text.partition(",")
    if not sep or not major.isdigit() or not minor.isdigit():
        raise UsageError(f"--device expects MAJOR,MINOR (e.g. 8,0), got {device!r}")
    return (int(major) << 20) | int(minor)


def parse_pids(pid) -> tuple[str, ...] | None:
    """'42,dd' -> ('42', 'dd'): pids and process names (resolved against the trace's names)."""
    if pid is None:
        return None
    return tuple(item.strip() for item in str(pid).split(","))
