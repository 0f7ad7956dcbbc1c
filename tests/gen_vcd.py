"""Write VCD files from a `transitions` frame, in the styles the VCD reader must understand.

Styles (what each one exercises in parsers/vcd.py):
- "scsimon": PiSCSI scsimon's exact header, identifier codes and names (BSY SEL CD IO MSG
  REQ ACK ATN RST, 8-bit `data` vector whose code is `#`, `phase` string var written as
  `s<word> =`), `$dumpvars` before the first timestamp, and a `#time` line for idle samples
  where nothing changes (scsimon writes one per sample).
- "la_bits": logic-analyzer export: every line a wire with an active-low name (`/SCSI_BSY`,
  `BSY_N`, `nSEL`, `ATN#`, `RST_L`...), values written at the electrical (inverted) level,
  DB as eight wires `DB0_N`..`DB7_N` (or `/SCSI_D0`..), parity `DBP#`, two- and three-character
  identifier codes, sigrok-style changes on the same line as their timestamp.
- "vector": nested scopes, plain names with a `DATA [0:7]` or `DB [7:0]` reg vector written
  in shortest form (`b101`, `bx`), tabs between value and code, a `real` var with `r`
  changes, a `$comment` and a `$dumpoff`/`$dumpon` pair and a `$dumpall` inside the data.

`t_ns` must be a whole number of time units when the unit is longer than 1 ns.
Writing is vectorized (one polars expression per wire), so the benchmark can make
millions of changes.
"""
from __future__ import annotations

from fractions import Fraction

import polars as pl

from scsitrace import schema

UNIT_NS = {"s": Fraction(10**9), "ms": Fraction(10**6), "us": Fraction(10**3), "ns": Fraction(1),
           "ps": Fraction(1, 10**3), "fs": Fraction(1, 10**6)}
SCSIMON_CODES = {"BSY": ")", "SEL": "-", "C/D": "*", "I/O": "(", "MSG": "&", "REQ": "^",
                 "ACK": "%", "ATN": "+", "RST": "$", "DB": "#"}
SCSIMON_NAMES = {"BSY": "BSY", "SEL": "SEL", "C/D": "CD", "I/O": "IO", "MSG": "MSG", "REQ": "REQ",
                 "ACK": "ACK", "ATN": "ATN", "RST": "RST", "DB": "data"}
SCSIMON_ORDER = ("BSY", "SEL", "C/D", "I/O", "MSG", "REQ", "ACK", "ATN", "RST")
LA_NAMES = {"BSY": "/SCSI_BSY", "SEL": "nSEL", "ATN": "ATN#", "RST": "RST_L", "MSG": "MSG_N",
            "C/D": "/C/D", "I/O": "I/O#", "REQ": "REQ_n", "ACK": "/ACK", "DBP": "DBP#"}
LA_BIT_NAMES = ("DB{}_N", "/SCSI_D{}", "nDB{}")


def tick_of(timescale: str) -> Fraction:
    mult, unit = timescale.split()
    return int(mult) * UNIT_NS[unit]


def code(i: int, min_len: int = 1) -> str:
    """The i-th identifier code made of printable ASCII 33..126, at least min_len long."""
    i += sum(94 ** k for k in range(1, min_len))
    out = ""
    while True:
        out = chr(33 + i % 94) + out
        i = i // 94 - 1
        if i < 0:
            return out


# ---------------------------------------------------------------- per-wire values

def _wires(signals: list[str], data: list[str], style: str, rev: bool) -> list[dict]:
    """name/code/width/value-expression of each wire, in declaration order."""
    wires = []
    low = style == "la_bits"
    order = SCSIMON_ORDER if style == "scsimon" else schema.SIGNALS
    for n, sig in enumerate(s for s in order if s in signals):
        bit = (pl.col("lines").cast(pl.Int32) // (1 << schema.SIGNAL_BIT[sig])) % 2
        if low:
            bit = 1 - bit
        name = {"scsimon": SCSIMON_NAMES, "la_bits": LA_NAMES}.get(style, {}).get(sig, sig)
        wcode = SCSIMON_CODES[sig] if style == "scsimon" else code(n, 2 if low else 1)
        wires.append({"name": name, "code": wcode, "width": 1, "value": bit.cast(pl.Utf8)})
    if "DB" in data:
        wires.extend(_db_wires(style, rev, len(wires)))
    if "DBP" in data:
        p = pl.col("dbp").cast(pl.Int32)
        p = (1 - p) if low else p
        wires.append({"name": LA_NAMES["DBP"] if low else "DBP", "code": code(40, 2 if low else 1),
                      "width": 1, "value": p.cast(pl.Utf8).fill_null("x")})
    return wires


def _db_wires(style: str, rev: bool, n: int) -> list[dict]:
    db = pl.col("db").cast(pl.Int32)
    if style == "la_bits":
        out = []
        for i in range(8):
            bit = (1 - (db // (1 << i)) % 2).cast(pl.Utf8).fill_null("x")
            out.append({"name": LA_BIT_NAMES[i % 3].format(i), "code": code(20 + i * 97, 2),
                        "width": 1, "value": bit})
        return out
    bits = [((db // (1 << i)) % 2).cast(pl.Utf8) for i in range(8)]
    order = bits if rev else bits[::-1]          # leftmost character is the msb as declared
    value = pl.concat_str(order)
    if style == "vector":                        # shortest form: leading zeros dropped
        value = value.str.strip_chars_start("0").replace("", "0")
    value = pl.lit("b") + value.fill_null("x" if style == "vector" else "xxxxxxxx")
    name = {"scsimon": "data", "vector": "DATA" if rev else "DB"}[style]
    wcode = SCSIMON_CODES["DB"] if style == "scsimon" else code(n + 30)
    return [{"name": name, "code": wcode, "width": 8, "value": value, "vector": True}]


def _change(w: dict, sep: str) -> pl.Expr:
    if w.get("vector"):
        return w["value"] + pl.lit(sep + w["code"])
    return w["value"] + pl.lit(w["code"])


# ---------------------------------------------------------------- header

def _header(wires: list[dict], style: str, timescale: str, rev: bool) -> str:
    if style == "scsimon":
        head = ["$date", "22-11-2026 10-00-00", "$end", "$version",
                "   VCD generator tool version info text.", "$end", "$comment",
                "   Tool build date:Sun Nov 22 10:00:00 2026", "$end",
                f"$timescale {timescale} $end", "$scope module logic $end"]
        head += [f"$var wire {w['width']} {w['code']} {w['name']} $end" for w in wires]
        head += ["$var string 1 = phase $end", "$upscope $end", "$enddefinitions $end"]
    elif style == "la_bits":
        head = ["$version sigrok-like test writer $end", f"$timescale {timescale} $end",
                "$scope module probes $end"]
        head += [f"$var wire 1 {w['code']} {w['name']} $end" for w in wires]
        head += ["$upscope $end", "$enddefinitions $end"]
    else:
        head = ["$timescale", f"  {timescale.replace(' ', '')}", "$end",
                "$scope module top $end", "$scope module scsi $end"]
        for w in wires:
            rng = (" [0:7]" if rev else " [7:0]") if w["width"] == 8 else ""
            head.append(f"$var {'reg' if w['width'] == 8 else 'wire'} {w['width']} {w['code']} "
                        f"{w['name']}{rng} $end")
        head += ["$upscope $end", "$var real 64 rr temperature $end", "$upscope $end",
                 "$enddefinitions $end"]
    return "\n".join(head) + "\n"


# ---------------------------------------------------------------- body

def body_lines(transitions: pl.DataFrame, wires: list[dict], style: str, timescale: str) -> pl.Series:
    """One string per sample: its timestamp and the changes of the wires that changed."""
    tick = tick_of(timescale)
    time = (pl.col("t_ns") * tick.denominator) // tick.numerator
    values = transitions.select(time.alias("time"), *[w["value"].alias(f"w{i}") for i, w in enumerate(wires)])
    sep = "\t" if style == "vector" else " "
    changes = []
    for i, w in enumerate(wires):
        col = pl.col(f"w{i}")
        changed = col.ne_missing(col.shift(1)) | (pl.int_range(pl.len()) == 0)
        changes.append(pl.when(changed).then(_change({**w, "value": col}, sep)))
    joiner = " " if style == "la_bits" else "\n"
    if style == "scsimon":   # the phase string: written whenever MSG C/D I/O change
        phase = (pl.col("lines").cast(pl.Int32) // 16 % 8).cast(pl.Utf8)
        phase_changed = phase.ne_missing(phase.shift(1)) | (pl.int_range(pl.len()) == 0)
        changes.append(pl.when(phase_changed).then(pl.lit("sPHASE") + phase + pl.lit(" =")))
        values = values.with_columns(transitions["lines"])
    stamp = pl.lit("#") + pl.col("time").cast(pl.Utf8)
    text = values.select(pl.concat_str([stamp, *changes], separator=joiner, ignore_nulls=True).alias("l"))["l"]
    return text


def write(path, transitions: pl.DataFrame, *, signals: list[str], data: list[str] = (),
          style: str = "scsimon", timescale: str = "1 ns", rev: bool = False,
          idle_every: int = 0, extras: bool = True) -> None:
    """Write `transitions` as a VCD file. `idle_every` > 0 adds a timestamp with no change
    after every n-th sample (as scsimon does for each idle sample). `extras=False` leaves
    out the vector style's mid-file $comment/$dumpoff/$dumpon/$dumpall block."""
    wires = _wires(list(signals), list(data), style, rev)
    lines = body_lines(transitions, wires, style, timescale).to_list()
    if not lines:
        lines = []
    tick = tick_of(timescale)
    times = ((transitions["t_ns"] * tick.denominator) // tick.numerator).to_list()
    for n, line in enumerate(lines):
        first_stamp, _, rest = line.partition("\n" if style != "la_bits" else " ")
        if n == 0 and style == "scsimon":   # initial values before the first timestamp
            lines[n] = "$dumpvars\n" + rest + "\n$end\n" + first_stamp
        elif n == 0 and style == "vector":
            lines[n] = first_stamp + "\n$dumpvars\n" + rest + "\n$end"
        elif n == len(lines) // 2 and style == "vector" and n > 0 and extras:
            lines[n] = (first_stamp + "\n$comment a note\nspanning lines $end\n" + rest + "\n"
                        + "r21.5 rr\n$dumpoff\n" + "\n".join(_xs(wires)) + "\n$end\n"
                        + "$dumpon\n" + "\n".join(_current(transitions, wires, n)) + "\n$end\n"
                        + "$dumpall\n" + "\n".join(_current(transitions, wires, n)) + "\n$end")
        if n > 1 and style != "vector":
            break
    if idle_every:
        for n in range(0, len(lines) - 1, idle_every):
            if times[n + 1] - times[n] > 1:
                lines[n] += f"\n#{(times[n] + times[n + 1]) // 2}"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_header(wires, style, timescale, rev))
        if lines:
            fh.write("\n".join(lines) + "\n")


def _xs(wires: list[dict]) -> list[str]:
    return [("bx " + w["code"]) if w.get("vector") else ("x" + w["code"]) for w in wires]


def _current(transitions: pl.DataFrame, wires: list[dict], n: int) -> list[str]:
    row = transitions.slice(n, 1)
    return [row.select(_change(w, " ").alias("c"))["c"][0] for w in wires]


# ---------------------------------------------------------------- hostile input

HOSTILE = (
    # (bad line, reason the reader must give; in lenient mode the line is skipped)
    ("#12x", "bad timestamp"),                          # not an integer
    ("#", "bad timestamp"),                             # no digits at all
    ("#1234567890123456789", "bad timestamp"),          # more than 18 digits
    ("#1", "time goes backwards"),                      # earlier than the time before it
    ("1?", "undeclared identifier code ?"),             # code never declared by a $var
    ("b10201 #", "bad binary vector value"),            # digit 2 in a binary vector
    ("b1010", "value without an identifier code"),      # vector value, code missing
    ("hello", "not a timestamp or a value change"),     # a word
    ("\u00e9t\u00e9", "not a timestamp or a value change"),  # non-ASCII text
    ("$enddefinitions", "not a timestamp or a value change"),  # a header keyword in the data
)


def write_hostile(path, transitions: pl.DataFrame) -> list[int]:
    """A scsimon-style file of `transitions` with one HOSTILE line after each sample line,
    in order, as long as there are samples. Returns the line numbers of the bad lines.

    What the reader must do: strict mode raises BadInput naming the first bad line with its
    reason; lenient mode skips each bad line (counted in records.skipped, the first five
    listed) and gives exactly the transitions of the clean file.
    """
    signals = list(schema.SIGNALS)
    write(path, transitions, signals=signals, data=["DB"], style="scsimon")
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    out, bad_lines, hostile = [], [], list(HOSTILE)
    body = lines.index("$end", lines.index("$dumpvars")) + 1
    for n, line in enumerate(lines):
        out.append(line)
        if n > body and line.startswith("#") and hostile:
            out.append(hostile.pop(0)[0])
            bad_lines.append(len(out))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")
    return bad_lines
