"""What a user asks of one trace, checked once: `AnalysisRequest`.

Three front ends build it: the CLI from its arguments (`commands.analyze.request_of`), batch
from a manifest entry or a baseline's stored options (`from_options`), the Python API from
its keywords. Below them nothing sees an argparse namespace; `core.run(request)` analyses.
The defaults live here (the dataclass fields), once; the CLI's flags and the API's keywords
take theirs from `DEFAULTS`.

A bad value raises `OptionError`, which names the option the way its front end spells it:
`--io-size` on the command line, `io_size` in the API and a manifest (`renamed`). Values
that can only be checked against the trace (a block `--device` needs a block trace) are
checked by `core` with the same error.

The request is the user's words, validated; `core.Options` is what a layer reads, derived
from it once the trace is parsed (the window in ns, the device as the layer numbers it).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

from .command_sets import COMMAND_SETS
from .errors import UsageError

DEFAULT_SETTLE_NS = 400      # bus settle delay when neither the user nor the format gives one
DATA_POLARITIES = ("auto", "high", "low")
ROUTES = ("native", "pyshark")
# category profiles by layer (the first is the layer's default); a profile no layer has is
# refused before the trace is read, one of another layer by the summary once the layer is known
PROFILES = {"bus": ("raid1990", "scsi"), "block": ("btt",), "usb": ("usb",), "scsilog": ("scsilog",)}
INT64_MAX = (1 << 63) - 1

# the per-trace option names of a manifest entry, batch's command line and a baseline's
# stored options (`map` is a list of NAME=SIGNAL texts there, `mapping` a dict in the API)
OPTION_KEYS = ("format", "lenient", "settle_ns", "data_polarity", "map", "active_low", "io_size",
               "profile", "target", "device", "pid", "window", "route", "lun", "command_set", "btt_compat",
               "stall_factor")
# what a baseline remembers, so that `regress` analyses the new trace the same way
STORED_OPTIONS = ("format", "lenient", "settle_ns", "data_polarity", "map", "active_low", "io_size",
                  "profile", "target")
# ... and the filters it remembers when they are set
STORED_IF_SET = ("device", "pid", "window", "route", "lun", "command_set")

# option name -> its command-line flag, where the two differ beyond '_' -> '-'
_FLAGS = {"mapping": "--map", "format": "--format"}


class OptionError(UsageError):
    """A bad option value. `option` is the request field; the message names it as a flag
    (the CLI's), unless `renamed` says otherwise."""

    def __init__(self, option: str, problem: str, spelled: str | None = None):
        self.option, self.problem = option, problem
        self.spelled = spelled or flag(option)
        super().__init__(f"{self.spelled} {problem}")

    def renamed(self, spelled: str) -> "OptionError":
        """The same error, naming the option as `spelled` (a keyword, a manifest key)."""
        return OptionError(self.option, self.problem, spelled)


def flag(option: str) -> str:
    return _FLAGS.get(option, "--" + option.replace("_", "-"))


@dataclass(frozen=True)
class AnalysisRequest:
    """One trace and how to analyse it. Every field is checked when the request is made."""

    trace: str
    format: str = "auto"                  # a parser name (scsitrace.parsers.formats()) or auto
    lenient: bool = False                 # skip bad records, count them, go on
    profile: str | None = None            # category profile (None: the layer's default)
    target: int | None = None             # bus, kernel logs: only this SCSI target
    lun: int | None = None                # bus, usb, kernel logs: only this logical unit
    io_size: int | None = None            # bytes per I/O, for bandwidth without REQ/ACK
    window: str | tuple | None = None     # "START:END" seconds from the trace start
    device: str | None = None             # block MAJ,MIN; usb BUS:ADDR[:LUN]; kernel logs H:C:I:L
    pid: str | None = None                # block, sg logs: "42,dd" pids or process names
    settle_ns: int | None = None          # bus: None = DEFAULT_SETTLE_NS or the format's own
    data_polarity: str = "auto"           # auto | high | low
    mapping: dict | None = None           # capture signal for each bus line name
    active_low: tuple = ()                # capture signals (or 'all') that are active-low
    route: str | None = None              # usbmon pcap: native | pyshark
    command_set: str | None = None        # bus: the vendor opcode names of a device family (command_sets.py)
    btt_compat: bool = False              # block: btt's pairing where requests in flight share sectors
    stall_factor: float = 5.0             # the stalls table: I/Os slower than this x their kind's median

    def __post_init__(self):
        for f in fields(self):
            check = _CHECKS.get(f.name)
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))

    @property
    def strict(self) -> bool:
        return not self.lenient

    def parser_options(self) -> dict:
        """The format-specific options, as `parsers.parse(**options)` takes them."""
        out = {}
        if self.mapping:
            out["mapping"] = dict(self.mapping)
        if self.active_low:
            out["active_low"] = list(self.active_low)
        if self.route is not None:
            out["route"] = self.route
        if self.command_set is not None:
            out["command_set"] = self.command_set
        return out

    def options(self) -> dict:
        """The request in the manifest's and baseline's words (OPTION_KEYS)."""
        out = {k: getattr(self, k) for k in OPTION_KEYS if k != "map"}
        out["map"] = [f"{name}={signal}" for name, signal in (self.mapping or {}).items()]
        out["active_low"] = list(self.active_low)
        return out

    def stored_options(self) -> dict:
        """What a baseline remembers of the request."""
        every = self.options()
        out = {k: every[k] for k in STORED_OPTIONS}
        out.update({k: every[k] for k in STORED_IF_SET if every[k] is not None})
        if self.btt_compat:
            out["btt_compat"] = True
        return out

    def with_trace(self, trace: str) -> "AnalysisRequest":
        return replace(self, trace=trace)

    @classmethod
    def from_options(cls, trace: str, options: dict | None) -> "AnalysisRequest":
        """From a manifest entry's, batch's or a baseline's options (OPTION_KEYS; others are
        ignored). Errors name the option as the manifest does (`io_size`, `map`)."""
        values = {k: v for k, v in (options or {}).items() if k in OPTION_KEYS}
        if "map" in values:
            try:
                values["mapping"] = split_maps(values.pop("map"))
            except OptionError as exc:
                raise exc.renamed("map") from None
        try:
            return cls(trace=trace, **values)
        except OptionError as exc:
            raise exc.renamed(exc.option) from None


# ------------------------------------------------------------------ the checks, one per field

def _text(name, value):
    if not isinstance(value, str):
        raise OptionError(name, f"must be a string, got {_shown(value)}")
    return value


def _profile(name, value):
    if value is None:
        return None
    known = [p for profiles in PROFILES.values() for p in profiles]
    if _text(name, value) not in known:
        raise OptionError(name, f"{value!r} is not a profile (known: {', '.join(known)})")
    return value


def _format(name, value):
    value = _text(name, value)
    if value == "auto":
        return value
    from . import parsers
    if value not in parsers.formats():
        raise OptionError(name, f"{value!r} is not a format (known: auto, {', '.join(parsers.formats())})")
    return value


def _choice(*allowed, optional=False):
    def check(name, value):
        if value is None and optional:
            return None
        if not isinstance(value, str) or value not in allowed:
            raise OptionError(name, f"must be one of {', '.join(allowed)}, got {_shown(value)}")
        return value
    return check


def _bool(name, value):
    if not isinstance(value, bool):
        raise OptionError(name, f"must be true or false, got {_shown(value)}")
    return value


def integer(name: str, value, minimum: int = 0, optional: bool = True):
    """An integer >= minimum that fits in 64 bits (not a bool, not a float)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionError(name, f"must be an integer, got {_shown(value)}")
    value = int(value)
    if value < minimum:
        what = "positive" if minimum == 1 else f"at least {minimum}"
        raise OptionError(name, f"must be {what}, got {value}")
    if value > INT64_MAX:
        raise OptionError(name, f"is too large, got {value}")
    return value


def _int_at_least(minimum):
    return lambda name, value: integer(name, value, minimum)


def _window(name, value):
    if value is None:
        return None
    if not isinstance(value, (str, tuple, list)):
        raise OptionError(name, f"expects START:END in seconds, got {_shown(value)}")
    parse_window(value, name)
    return tuple(value) if isinstance(value, list) else value


def _pid(name, value):
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(integer(name, value))
    value = _text(name, value)
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise OptionError(name, f"expects PID[,PID|NAME...], got {value!r}")
    for item in items:
        if item.isdigit() and int(item) > INT64_MAX:      # a number: a pid, which fits in 64 bits
            raise OptionError(name, f"{item}: no pid is that large")
    return value


def _mapping(name, value):
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                               for k, v in value.items()):
        raise OptionError(name, f"must map bus line names to signal names, got {_shown(value)}")
    return dict(value) or None


def _active_low(name, value):
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise OptionError(name, f"must be a list of signal names (or 'all'), got {_shown(value)}")
    return tuple(value)


def positive_number(name: str, value):
    """A finite number > 0 (a factor, a rate)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise OptionError(name, f"must be a positive number, got {_shown(value)}")
    return value


_CHECKS = {
    "trace": _text,
    "format": _format,
    "lenient": _bool,
    "profile": _profile,
    "target": _int_at_least(0),
    "lun": _int_at_least(0),
    "io_size": _int_at_least(1),
    "window": _window,
    "device": lambda name, value: None if value is None else _text(name, value),
    "pid": _pid,
    "settle_ns": _int_at_least(0),
    "data_polarity": _choice(*DATA_POLARITIES),
    "mapping": _mapping,
    "active_low": _active_low,
    "route": _choice(*ROUTES, optional=True),
    "command_set": _choice(*sorted(COMMAND_SETS), optional=True),
    "btt_compat": _bool,
    "stall_factor": lambda name, value: float(positive_number(name, value if value is not None else "none")),
}


DEFAULTS = AnalysisRequest(trace="")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ------------------------------------------------------------------ option texts -> typed values

def split_maps(items) -> dict | None:
    """['REQ=D3', ...] (the --map texts) -> {'REQ': 'D3', ...}."""
    if items is None:
        return None
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, (list, tuple)):
        raise OptionError("mapping", f"expects a list of NAME=SIGNAL, got {_shown(items)}")
    out = {}
    for item in items:
        name, sep, signal = item.partition("=") if isinstance(item, str) else ("", "", "")
        if not sep or not name or not signal:
            raise OptionError("mapping", f"expects NAME=SIGNAL, got {_shown(item)}")
        out[name] = signal
    return out or None


def parse_window(window, name: str = "window") -> tuple[int | None, int | None] | None:
    """'START:END' in seconds from the trace start (either side may be empty) -> ns."""
    if window is None:
        return None
    if isinstance(window, (tuple, list)):
        if len(window) != 2:
            raise OptionError(name, f"expects (START, END) in seconds, got {_shown(window)}")
        lo, hi = window
    else:
        lo, sep, hi = str(window).partition(":")
        if not sep:
            raise OptionError(name, f"expects START:END in seconds, got {window!r}")
    lo_ns, hi_ns = _seconds_ns(name, window, lo), _seconds_ns(name, window, hi)
    if lo_ns is not None and hi_ns is not None and hi_ns < lo_ns:
        raise OptionError(name, f"{window if isinstance(window, str) else _shown(window)}: END is before START")
    return lo_ns, hi_ns


def _seconds_ns(name: str, window, side) -> int | None:
    if side is None or (isinstance(side, str) and not side.strip()):
        return None
    try:
        seconds = float(side)
    except (TypeError, ValueError):
        raise OptionError(name, f"expects START:END in seconds, got {_shown(window)}") from None
    if isinstance(side, bool) or not math.isfinite(seconds) or abs(seconds) > 1e9:
        raise OptionError(name, f"expects START:END in seconds, got {_shown(window)}")
    return int(round(seconds * 1e9))


def parse_block_device(device) -> int | None:
    """'8,0' (or '8:0') -> dev_t as blktrace records it (major << 20 | minor)."""
    if device is None:
        return None
    text = str(device).replace(":", ",").replace(" ", "")
    major, sep, minor = text.partition(",")
    if not sep or not major.isdigit() or not minor.isdigit() or int(major) >= 1 << 12 or int(minor) >= 1 << 20:
        raise OptionError("device", f"expects MAJOR,MINOR (e.g. 8,0), got {device!r}")
    return (int(major) << 20) | int(minor)


def parse_pids(pid) -> tuple[str, ...] | None:
    """'42,dd' -> ('42', 'dd'): pids and process names (resolved against the trace's names)."""
    if pid is None:
        return None
    return tuple(item.strip() for item in str(pid).split(","))


# ------------------------------------------------------------------ options of a run, not of a trace

def check_width(width, name: str = "width"):
    """Terminal tables' width in columns."""
    return integer(name, width, 1)


MAX_SECONDS = INT64_MAX / 1e9      # a time in seconds that still fits int64 nanoseconds


def seconds(name: str, value, positive: bool = False):
    """A time in seconds: a finite number >= 0 (> 0 if `positive`) whose ns fit in int64."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0) or value > MAX_SECONDS:
        what = "positive" if positive else "non-negative"
        raise OptionError(name, f"must be a {what} number of seconds, got {_shown(value)}")
    return value


def check_run(jobs, timeout, scheduler=None) -> None:
    """batch, baseline, regress: --jobs, --timeout."""
    integer("jobs", jobs, 0)
    if timeout is not None:
        seconds("timeout", timeout, positive=True)
        if jobs == 0 and not scheduler:
            raise UsageError("--timeout needs worker processes (--jobs 1 or more)")
