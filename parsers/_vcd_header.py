"""The header of a value change dump (IEEE 1364 section 18): its declarations up to
`$enddefinitions $end` (or the first value change), read token by token: the timescale, the
variables with their codes, widths and ranges, `$date`/`$version`, and where the value changes
start. Small, so read in Python; parsers/vcd.py streams what follows."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from scsitrace.errors import BadInput, TruncatedInput
from . import _lines
from ._probes import Var

_TIME_UNITS_NS = {"s": Fraction(10**9), "ms": Fraction(10**6), "us": Fraction(10**3),
                  "ns": Fraction(1), "ps": Fraction(1, 10**3), "fs": Fraction(1, 10**6)}
_TIMESCALE_RE = re.compile(r"^(1|10|100)(s|ms|us|ns|ps|fs)$")
_RANGE_RE = re.compile(r"^\[(\d+)(?::(\d+))?\]$")
_ATTACHED_RANGE_RE = re.compile(r"^(.+?)\[(\d+)(?::(\d+))?\]$")
DATA_KEYWORDS = ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff")
_DATA_START_RE = re.compile(r"^(#\d|[01xXzZ]\S|[bB][01xXzZ]+$|[rRsS]\S)")



@dataclass
class Header:
    tick: Fraction = Fraction(1)            # nanoseconds per time unit
    timescale: str | None = None
    vars: list[Var] = field(default_factory=list)
    info: dict = field(default_factory=dict)   # $date, $version text
    data_offset: int = 0                    # byte offset of the first line after the header
    data_line: int = 1                      # its line number
    rest: str = ""                          # data tokens on the header's last line
    rest_line: int = 0
    enddefinitions: bool = False            # the header ended with `$enddefinitions $end`


class _HeaderReader:
    """Declarations up to `$enddefinitions $end` (or the first value change)."""

    def __init__(self, path: str):
        self.path = path
        self.h = Header()
        self.scopes: list[str] = []
        self.cmd: str | None = None
        self.args: list[str] = []
        self.cmd_line = 0

    def read(self) -> Header:
        offset = line_no = 0
        with open(self.path, "rb") as fh:
            for raw in _lines.bounded_lines(fh, self.path):
                line_no += 1
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadInput(self.path, "header is not UTF-8 text", line=line_no) from None
                offset += len(raw)
                toks = text.split()
                for i, tok in enumerate(toks):
                    rest = self._token(tok, i, toks, line_no)
                    if rest is not None:
                        self.h.rest, self.h.rest_line = " ".join(rest), line_no
                        self.h.data_offset, self.h.data_line = offset, line_no + 1
                        return self.h
        if self.cmd is not None:
            raise TruncatedInput(self.path, f"file ends inside {self.cmd} (no $end)", line=self.cmd_line)
        self.h.data_offset, self.h.data_line = offset, line_no + 1
        return self.h

    def _token(self, tok: str, i: int, toks: list[str], line_no: int) -> list[str] | None:
        """Consume one header token; returns the data tokens when the header ends here."""
        if self.cmd is None:
            if tok in DATA_KEYWORDS or (self.h.vars and _DATA_START_RE.match(tok)):
                return toks[i:]
            if not tok.startswith("$") or tok == "$end":
                raise BadInput(self.path, "expected a $keyword declaration", line=line_no, text=tok)
            self.cmd, self.args, self.cmd_line = tok, [], line_no
            return None
        if tok != "$end":
            self.args.append(tok)
            return None
        cmd, args, self.cmd = self.cmd, self.args, None
        if cmd == "$enddefinitions":
            self.h.enddefinitions = True
            return toks[i + 1:]
        self._declaration(cmd, args)
        return None

    def _declaration(self, cmd: str, args: list[str]) -> None:
        line = self.cmd_line
        if cmd == "$timescale":
            text = "".join(args)
            m = _TIMESCALE_RE.match(text)
            if not m:
                raise BadInput(self.path, "bad $timescale (expected 1, 10 or 100 and one of "
                               "s ms us ns ps fs)", line=line, text=" ".join(args))
            self.h.tick = int(m.group(1)) * _TIME_UNITS_NS[m.group(2)]
            self.h.timescale = f"{m.group(1)} {m.group(2)}"
        elif cmd == "$scope":
            self.scopes.append(args[-1] if args else "")
        elif cmd == "$upscope":
            if self.scopes:
                self.scopes.pop()
        elif cmd == "$var":
            self.h.vars.append(self._var(args, line))
        elif cmd in ("$date", "$version"):
            self.h.info[cmd[1:]] = " ".join(args)

    def _var(self, args: list[str], line: int) -> Var:
        if len(args) < 4:
            raise BadInput(self.path, "bad $var (expected: type width code name [range] $end)",
                           line=line, text=" ".join(args))
        kind, width, code, ref = args[0], args[1], args[2], args[3:]
        if not width.isdigit() or int(width) == 0:
            raise BadInput(self.path, f"bad $var width {width!r}", line=line, text=" ".join(args))
        msb = lsb = None
        m = _RANGE_RE.match(ref[-1])
        if m and len(ref) > 1:
            ref = ref[:-1]
        else:
            m = _ATTACHED_RANGE_RE.match(ref[-1])
            if m:
                ref = ref[:-1] + [m.group(1)]
                m = _RANGE_RE.match(f"[{m.group(2)}" + (f":{m.group(3)}]" if m.group(3) else "]"))
        if m:
            msb = int(m.group(1))
            lsb = int(m.group(2)) if m.group(2) is not None else msb
        name = " ".join(ref)
        written = name + (f"[{msb}:{lsb}]" if msb is not None and msb != lsb
                          else f"[{msb}]" if msb is not None else "")
        return Var(kind, int(width), code, ".".join(self.scopes + [written]), name, msb, lsb, line)
