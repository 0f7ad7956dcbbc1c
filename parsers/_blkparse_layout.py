"""The layout of a blkparse text written with a custom format (`blkparse -f`/`-F`), found
from its first event lines, as far as the standard fields can be recognised.

blkparse's default line is `%D %2c %8s %5T.%9t %5p %2a %3d ` then the action's details
(parsers/blkparse.py EVENT). A custom format keeps some of these fields in some order; each
line is read as whitespace-separated tokens around the action and its RWBS (`Q  RS`, an
action letter followed by an RWBS word), which every useful format keeps:

- before them: `MAJ,MIN` is the device (%D), `S.NNNNNNNNN` the time (%T.%t), `[name]` a
  process name (%C), and bare integers the CPU, sequence number and pid in blkparse's order
  (%c %s %p; fewer of them are the last ones: one integer is the pid), or, when a header
  comment names the columns (`#Maj,Mn CPU SeqNo Seconds PID Evt Typ ...`), what it names;
- after them: the details as blkparse writes them (`S + N [name]`, ...), or `S N` (%S %n).

The layout gives a regular expression with EVENT's named groups; a field the format lacks
takes a default (device 0,0, CPU 0, sequence 0, pid 0) and a note says so. A time is
required: without one there is nothing to analyse.
"""
from __future__ import annotations

import re

ACTIONS = ("Q", "M", "F", "G", "S", "R", "D", "C", "P", "U", "T", "I", "X", "B", "A", "UT", "ZP", "ZU", "m")
RWBS = re.compile(r"^F?(?:D|ZRA|Z[ARFOC]|W|R|N)[FASM]*$")
HEADER_NAMES = {"cpu": "cpu", "seqno": "seq", "seq": "seq", "sequence": "seq", "pid": "pid"}
DEFAULTS = {"major": "0", "minor": "0", "cpu": "0", "seq": "0", "pid": "0"}
TAIL = r"\s+(?P<act>[A-Za-z]{1,2})\s+(?P<rwbs>[A-Z]+)(?:\s+(?P<rest>.*?))?\s*$"


def _kind(token: str) -> str:
    if re.fullmatch(r"\d+,\d+", token):
        return "dev"
    if re.fullmatch(r"\d+\.\d{9}", token):
        return "time"
    if re.fullmatch(r"\d+", token):
        return "int"
    if token.startswith("[") and token.endswith("]"):
        return "comm"
    return "other"


def shape(line: str) -> tuple[str, ...] | None:
    """The kinds of the tokens before the action and its RWBS, or None (no action found)."""
    tokens = line.split()
    for a in range(len(tokens) - 1):
        if tokens[a] in ACTIONS and RWBS.match(tokens[a + 1]):
            return tuple(_kind(t) for t in tokens[:a])
    return None


def header_ints(header: str | None) -> list[str] | None:
    """The integer fields a header comment names, in order (None without a usable header)."""
    if not header:
        return None
    names = [HEADER_NAMES[w.lower()] for w in header.lstrip("#").split() if w.lower() in HEADER_NAMES]
    return names or None


def infer(lines: list[str], header: str | None = None) -> tuple[str, list[str]] | None:
    """(regex, fields it lacks) for the custom layout every one of these event lines has, or
    None when they do not share one holding a time."""
    shapes = {shape(line) for line in lines}
    if len(shapes) != 1 or None in shapes:
        return None
    kinds = shapes.pop()
    if kinds.count("time") != 1 or kinds.count("dev") > 1:
        return None
    n_ints = kinds.count("int")
    names = header_ints(header)
    if names is None or len(names) != n_ints:
        names = ["cpu", "seq", "pid"][3 - min(n_ints, 3):] if n_ints <= 3 else None
        if names is None:
            return None
    parts, ints = [], iter(names)
    for k in kinds:
        parts.append({"dev": r"(?P<major>\d+),(?P<minor>\d+)", "time": r"(?P<sec>\d+)\.(?P<nsec>\d{9})",
                      "comm": r"\[[^\]]*\]", "other": r"\S+"}.get(k) or rf"(?P<{next(ints)}>\d+)")
    have = set(names) | ({"major", "minor"} if "dev" in kinds else set())
    missing = [f for f in DEFAULTS if f not in have]
    return r"^\s*" + r"\s+".join(parts) + TAIL, missing
