"""From a request to its analysis: `run(request)` parses the trace and hands the `Capture` to
its layer's analysis (`LAYERS`), with the knobs of `Options` (parsers -> layers -> core).

The request (scsitrace.request) holds the option values a user typed (`--window 0.5:1`,
`--device 8,0`, `--pid dd,42`), already checked; they are turned here, once, into the typed
fields of `Options` that the layers read (some need the parsed trace: a block device)."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from . import completeness
from .errors import UsageError  # noqa: F401 (callers catch core.UsageError)
from .inputcheck import require_records
from .model import Analysis, Capture
from .request import (DEFAULT_SETTLE_NS, DEFAULTS, AnalysisRequest, parse_block_device,  # noqa: F401 (re-exported)
                      parse_pids, parse_window)

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

    settle_ns: int = DEFAULT_SETTLE_NS   # bus settle delay: shorter line states are skew
    data_polarity: str = DEFAULTS.data_polarity   # auto | high | low (DB lines as captured / inverted)
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
    # the figures over time (scsitrace/series.py) that the HTML plots draw: a streamed layer
    # emits every I/O's row for them, which costs time; True where a view draws them
    series: bool = True
    # the per-I/O rows and busy runs a layer keeps for the views that read them (the I/O table and
    # exports, segments, bandwidth views, the API); False when the run's outputs read none
    # (`analyze` to the terminal or --json): the block layer then keeps none (less time, memory)
    rows: bool = True
    btt_compat: bool = False         # block: btt's pairing where requests in flight share sectors
    stall_factor: float = DEFAULTS.stall_factor   # the stalls table: slower than this x the median


def analyze(capture: Capture, options: Options | None = None) -> Analysis:
    options = options or Options()
    analysis = layer_of(capture).analyze(capture, options)
    analysis.notes = list(analysis.notes) + completeness.unusual_notes(analysis)
    analysis.filters = dict(options.given) or {k: getattr(options, k) for k in ("target", "lun")
                                               if getattr(options, k) is not None}
    return analysis


def layer_of(capture: Capture):
    """The package analysing the capture's layer."""
    return import_module(f"{__package__}.{LAYERS[capture.layer]}")


def load(path: str, fmt: str = DEFAULTS.format, *, strict: bool = not DEFAULTS.lenient,
         settle_ns: int | None = DEFAULTS.settle_ns, data_polarity: str = DEFAULTS.data_polarity,
         io_size: int | None = DEFAULTS.io_size, window: str | None = DEFAULTS.window,
         device: str | None = DEFAULTS.device, pid: str | None = DEFAULTS.pid, target: int | None = DEFAULTS.target,
         lun: int | None = DEFAULTS.lun,
         tap=None, ios_sink=None, series: bool = False, **parser_options) -> Analysis:
    """`run` of the request these keywords make (the filters as a user types them;
    `parser_options` are the format's: mapping, active_low, route)."""
    req = AnalysisRequest(trace=path, format=fmt, lenient=not strict, settle_ns=settle_ns,
                          data_polarity=data_polarity, io_size=io_size, window=window, device=device, pid=pid,
                          target=target, lun=lun, **parser_options)
    return run(req, tap=tap, ios_sink=ios_sink, series=series)


def run(req: AnalysisRequest, tap=None, ios_sink=None, series: bool = False, rows: bool = True) -> Analysis:
    """Parse and analyse the request's trace -> Analysis. `tap(capture)`, if given, runs
    before the analysis (attribution uses it to keep the transitions it re-reads).
    `ios_sink`, `rows`: see Options. `series`: build the figures over time (the HTML plots).
    A progress bar shows on a terminal."""
    from . import parsers
    from .progress import progress_for
    given = {k: v for k, v in (("window", req.window), ("device", req.device), ("pid", req.pid),
                               ("target", req.target), ("lun", req.lun)) if v is not None}
    options = Options(data_polarity=req.data_polarity, io_size=req.io_size, window=parse_window(req.window),
                      pids=parse_pids(req.pid), target=req.target, lun=req.lun, ios_sink=ios_sink, given=given,
                      series=series, rows=rows, btt_compat=req.btt_compat, stall_factor=req.stall_factor)
    with progress_for(req.trace) as progress:
        capture = parsers.parse(req.trace, req.format, strict=req.strict, progress=progress,
                                **req.parser_options())
        options.device = parse_device(capture.layer, req.device)
        layer = layer_of(capture)
        if hasattr(layer, "select"):    # filters that cut the capture itself, before a tap reads it
            layer.select(capture, options)
        if tap is not None:
            tap(capture)
        options.settle_ns = req.settle_ns if req.settle_ns is not None else \
            capture.meta.get("settle_ns", DEFAULT_SETTLE_NS)
        return require_records(analyze(capture, options), lenient=req.lenient)


def parse_device(layer: str, device) -> int | str | None:
    """--device as the layer names devices: block MAJOR,MINOR -> dev_t; others as given."""
    if device is None or layer != "block":
        return device
    return parse_block_device(device)
