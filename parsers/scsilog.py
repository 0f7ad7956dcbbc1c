"""SCSI kernel logs: ftrace `scsi:scsi_dispatch_cmd_{start,done,error,timeout}` events (the
`trace` file or `trace-cmd report`), and dmesg lines of the kernel's SCSI logging
(`scsi_logging_level`: "Send:", "Done:"/"FAILED", each followed by its "CDB:" line; the
"Sense Key :" line of a command that ended with sense data, a `sense` event; the error
handler's "Done: ADD_TO_MLQUEUE"/"NEEDS_RETRY" lines; `scsi scan:` lines, counted in a note).
LUNs are 64-bit (`0:0:0:1084113024`, zfcp).

Hands over one `events` frame (schema `scsitrace.scsilog.EVENTS`): one row per event with
its device (host:channel:id:lun), tag, time, CDB bytes and outcome. Other lines (block
events, ordinary kernel messages, comments) are read and ignored; a line that looks like
a SCSI event but does not parse is bad input (strict) or skipped and counted (lenient).
"""
from __future__ import annotations

import re

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput
from scsitrace.model import Capture, LazyFrames, RecordCount
from scsitrace.scsilog.events import EVENTS
from scsitrace.streams import started
from . import _counters, _lines

ID = "scsilog"
# Blocks of this many bytes: a dmesg block's cut lines and events hold about 15x its size at
# once (16 MiB: 0.45 GiB peak where 32 MiB gave 0.73, at 0.94x the CPU; ftrace 1.02x)
BLOCK_BYTES = 16 << 20
SUFFIXES = (".ftrace.txt", ".ftrace", ".dmesg", "dmesg.txt", ".trace")

FTRACE = (r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S{4,5}\s+)?"
          r"(?P<ts>\d+\.\d+):\s+scsi_dispatch_cmd_(?P<kind>start|done|error|timeout):\s+"
          r"host_no=(?P<host>\d+) channel=(?P<channel>\d+) id=(?P<id>\d+) lun=(?P<lun>\d+) "
          r"(?:.*? driver_tag=(?P<tag>-?\d+))?.*?cmnd=\((?P<cname>[A-Z0-9_]+).*?raw=(?P<raw>[0-9a-f ]+)\)"
          r"(?: rtn=(?P<rtn>-?\d+))?(?: result=\((?P<result>[^)]*)\))?\s*$")
FTRACE_HINT = "scsi_dispatch_cmd_"
# a syslog or journal line's head before the kernel's own line ("Nov 28 00:37:43 host kernel: ",
# "2026-11-28T00:37:43.123456+00:00 host kernel: "): /var/log/messages, kern.log, journalctl -k
SYSLOG = (r"(?:(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?"
          r"(?:[+-]\d\d:?\d\d|Z)?) \S+ kernel: )?")
STAMP = r"^(?:<\d+>)?" + SYSLOG + r"\["
DMESG = (STAMP + r"\s*(?P<ts>\d+\.\d+)\] (?:sd|sr|st|scsi|ses|sg|osst|ch) (?P<host>\d+):(?P<channel>\d+):"
         r"(?P<id>\d+):(?P<lun>\d+): (?:\[\w+\] )?\s*(?:tag#(?P<tag>\d+) )?"
         r"(?P<kind>Send:|Done:|FAILED|CDB:|timing out command|Sense Key\s*:)(?P<rest>.*)$")
DMESG_HINT = r"(?:Send:|Done:|FAILED|CDB:|timing out command|Sense Key\s*:)"
DMESG_LINE = STAMP + r"\s*\d+\.\d+\] "
# a line of the kernel's SCSI logging (any level): what tells a kernel log from other text
LOGGING = (r"(?:^|\s)(?:sd|sr|st|scsi|ses|sg|osst|ch) \d+:\d+:\d+:\d+: (?:\[\w+\] )?\s*(?:tag#\d+ )?"
           r"(?:Send:|Done:|FAILED|CDB:|timing out command|Sense Key\s*:|Add\. Sense:|scsi scan: )")
SCAN = DMESG_LINE + r"(?:scsi \d+:\d+:\d+:\d+|scsi target\d+:\d+:\d+): scsi scan: "


def sniff(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    if "scsi_dispatch_cmd_" in text:
        return True
    if text.startswith("# tracer:"):
        return True
    lines = [ln for ln in text.splitlines()[:50] if ln]
    if not lines:
        return False
    # a kernel log: most lines stamped (a damaged line or two among them is the reader's to
    # report, not a reason to refuse the file), one of them a SCSI device's
    stamped = [ln for ln in lines if re.match(DMESG_LINE, ln)]
    if len(stamped) * 5 >= len(lines) * 4 and any(
            re.search(r" (?:sd|scsi) \d+:\d+:\d+:\d+: ", ln) for ln in lines):
        return True
    # a log pasted or mailed (long lines wrapped, other text between): its SCSI logging lines
    # (unstamped ones too: the parser says why it cannot time them)
    return sum(bool(re.search(LOGGING, ln)) for ln in lines) >= 2


def parse(path, *, strict: bool = True, progress=None, chunk_bytes: int = BLOCK_BYTES, **_opts) -> Capture:
    """A streaming capture: `chunks()` yields the `events` of each block of lines as it is
    read (a dmesg event waits for the line after it, its CDB, across block edges); the
    first block is read here (a bad line in it is raised here), the rest as the analysis
    consumes them. `frames["events"]` reads the whole log (tests, `convert`)."""
    path = str(path)
    cap = Capture(layer="scsilog", path=path, format=ID, records=RecordCount(),
                  meta={"origin_ns": 0, "log": "none", "position_unit": "line"})
    stream = _Events(path, strict, chunk_bytes)
    first = stream.run(cap, progress)
    chunks = started(first, lambda: _Events(path, strict, chunk_bytes).run(
        Capture(layer="scsilog", path=path, format=ID, records=RecordCount(), meta=dict(cap.meta)), None))
    cap.chunks = chunks
    cap.frames = LazyFrames({"events": lambda: _concat(chunks())})
    return cap


def _concat(parts) -> pl.DataFrame:
    parts = list(parts)
    ev = pl.concat(parts) if parts else pl.DataFrame(schema=EVENTS)
    schema.validate(ev, EVENTS, "events")
    return ev


class _Events:
    """The events of one pass over the log, block by block; what spans a block edge is
    carried: the last dmesg line of each (device, tag), whose CDB line may follow."""

    def __init__(self, path: str, strict: bool, chunk_bytes: int):
        self.path, self.strict, self.chunk_bytes = path, strict, chunk_bytes
        self.origin = None
        self.carry = None       # dmesg rows of the previous blocks still needed (see _dmesg)
        self.events = self.ftrace = self.scan = self.unstamped = 0
        self.first_unstamped = None

    def run(self, cap: Capture, progress):
        counters = {}
        line_no = 1
        for buf, _ in _lines.iter_byte_blocks(self.path, block_bytes=self.chunk_bytes, progress=progress,
                                              count_lines=False, views=True, strict=self.strict):
            n, ev = _scan_block(buf, line_no, self, cap.records, counters)
            line_no += n
            ev = self._out(ev, cap)
            if ev.height:
                yield ev
        ev = self._out(_dmesg_events(None, self, final=True), cap) if self.carry is not None else None
        if ev is not None and ev.height:
            yield ev
        cap.meta["log"] = "ftrace" if self.events and self.events == self.ftrace else (
            "dmesg" if self.events else "none")
        if self.unstamped and not self.events:
            raise BadInput(self.path, f"kernel SCSI logging without timestamps ({self.unstamped} lines; dmesg -t, "
                           "journalctl -o cat): commands cannot be timed or put in order; capture with dmesg's "
                           "[seconds] stamps (printk.time=1)", line=self.first_unstamped[0], text=self.first_unstamped[1])
        cap.notes[:] = _counters.ftrace_notes(counters) + _scan_notes(self.scan) + (
            [f"{self.unstamped} SCSI logging lines without a timestamp: not read"] if self.unstamped else [])
        cap.meta["scan_lines"] = self.scan

    def _out(self, ev: pl.DataFrame, cap: Capture) -> pl.DataFrame:
        """Events with times from the log's first SCSI event: the earliest of the first block
        that has any (kernel logs are in time order)."""
        self.events += ev.height
        self.ftrace += int((ev["source"] == "ftrace").sum())
        if self.origin is None and ev.height:
            self.origin = int(ev["t_ns"].min()) if self.first_t is None else min(self.first_t, int(ev["t_ns"].min()))
            cap.meta["origin_ns"] = self.origin
        held = self.carry.filter(~pl.col("_emitted")) if self.carry is not None else None
        cap.held_from = int(held["t_ns"].min()) - (self.origin or 0) if held is not None and held.height else None
        return ev.with_columns(pl.col("t_ns") - (self.origin or 0))

    first_t = None      # the earliest dmesg event line of the block being decoded (held or not)


def _unstamped(lines: pl.DataFrame, st: "_Events") -> None:
    """Count the kernel's SCSI logging lines that carry no [seconds] stamp (the first kept)."""
    t = pl.col("t")
    maybe = lines.filter(~t.str.starts_with("[") & ~t.str.contains(FTRACE_HINT, literal=True))   # cheap tests first
    bare = maybe.filter(t.str.contains(LOGGING) & ~t.str.contains(DMESG_LINE))
    if bare.height:
        st.unstamped += bare.height
        if st.first_unstamped is None:
            st.first_unstamped = (int(bare["line_no"][0]), bare["t"][0])


def _scan_notes(scan: int) -> list[str]:
    return [f"{scan} \"scsi scan:\" lines (the midlayer scanning for devices and LUNs: INQUIRY, REPORT LUNS): "
            "read, not commands (a scan's commands are commands of the log when it logs them as such)"] if scan else []


def _seconds_ns(col: str) -> pl.Expr:
    return _lines.seconds_ns(pl.col(col))


def _scan_block(buf: bytes, line_no: int, st: _Events, records: RecordCount, counters: dict):
    """(lines, events) of one block of whole lines: the ftrace events of the kernel's own shape
    decoded in Rust (`native/src/text/scsilog.rs`, every core), the other lines that any rule
    here looks at decided by `_decode_block` exactly as before (a block that is not UTF-8
    goes there whole: its error, or its lines replaced, lenient)."""
    found = _native_text().ftrace_block(np.frombuffer(buf, dtype=np.uint8))
    if found is None:
        block = _lines._block_frame(bytes(buf), st.path, line_no, st.strict)
        return block.height, _decode_block(block, st, records, counters)
    rest = pl.DataFrame({"line_no": found.fb_idx + line_no,
                         "text": _lines.string_array(found.fb_text, found.fb_end)})
    records.read += found.lines - rest.height
    return found.lines, _decode_block(rest, st, records, counters, _decoded(found, line_no),
                                         _dmesg_decoded(found, line_no))


def _native_text():
    from scsitrace._native import text
    return text


def _decoded(found, line_no: int) -> pl.DataFrame | None:
    """The events Rust decoded, as `_ftrace` gives them."""
    if not len(found.idx):
        return None
    names = pl.Series(found.names, dtype=pl.Utf8)
    fields = pl.DataFrame(found.fields)
    return pl.DataFrame({
        "t_ns": found.t_ns,
        "kind": pl.Series(_native_text().KINDS, dtype=pl.Utf8).gather(found.kind),
        "device": pl.Series(found.devices, dtype=pl.Utf8).gather(found.device),
        "tag": fields["tag"],
        "cdb": _lines.binary_array(found.cdb, found.cdb_end),
        "host_byte": names.gather(fields["host_code"]),
        "status": names.gather(fields["status_code"]),
        "rtn": fields["rtn"],
        "source": pl.repeat("ftrace", len(found.idx), eager=True),
        "pos": found.idx + line_no,
    }).cast(EVENTS)


def _dmesg_decoded(found, line_no: int) -> pl.DataFrame | None:
    """The dmesg lines Rust cut, as `_dmesg` gives them."""
    if not len(found.d_idx):
        return None
    return pl.DataFrame({
        "line_no": found.d_idx + line_no,
        "t_ns": found.d_t_ns,
        "kind": pl.Series(found.d_kinds, dtype=pl.Utf8).gather(found.d_kind),
        "device": pl.Series(found.devices, dtype=pl.Utf8).gather(found.d_device),
        "tag": _lines.strings(found.d_tag),
        "cdb_hex": _lines.strings(found.d_cdb_hex),
        "rest": _lines.strings(found.d_rest),
        "_emitted": pl.repeat(False, len(found.d_idx), eager=True),
        "_host": _lines.strings(found.d_host_byte),
        "_word": _lines.strings(found.d_word),
        "_timeout": found.d_timeout,
    })


def _decode_block(block: pl.DataFrame, st: _Events, records: RecordCount, counters: dict,
                  decoded: pl.DataFrame | None = None, dmesg: pl.DataFrame | None = None) -> pl.DataFrame:
    """The events of a block's lines (`decoded`: its ftrace events already decoded; `dmesg`:
    its dmesg lines already cut into `_dmesg`'s fields)."""
    path, strict = st.path, st.strict
    t = pl.col("text").str.strip_chars_end("\r\n")
    lines = block.with_columns(t.alias("t"))
    records.read += lines.height
    _counters.ftrace_counters(lines, counters)
    _bad(lines.filter(_lines.bad_bytes(pl.col("t"))), "NUL byte or bytes that are not UTF-8 in a log line",
         path, strict, records)
    lines = lines.filter(~_lines.bad_bytes(pl.col("t")))
    st.scan += int(lines["t"].str.contains(SCAN).sum())
    _unstamped(lines, st)
    ft = lines.filter(pl.col("t").str.contains(FTRACE_HINT, literal=True))
    dm = lines.filter(~pl.col("t").str.contains(FTRACE_HINT, literal=True)
                      & pl.col("t").str.contains(STAMP) & pl.col("t").str.contains(DMESG_HINT)
                      & pl.col("t").str.contains(r" \d+:\d+:\d+:\d+: "))
    out = [f for f in (decoded, _ftrace(ft, path, strict, records) if ft.height else None) if f is not None]
    if len(out) == 2:
        out = [pl.concat(out).sort("pos")]
    cut = [g for g in (dmesg, _dmesg(dm, path, strict, records) if dm.height else None) if g is not None]
    if len(cut) == 2:
        cut = [pl.concat(cut).sort("line_no")]
    if cut or st.carry is not None:
        out.append(_dmesg_events(cut[0] if cut else None, st))
    return pl.concat(out) if out else pl.DataFrame(schema=EVENTS)


def _bad(bad: pl.DataFrame, reason, path: str, strict: bool, records: RecordCount) -> None:
    """Bad lines (`reason`: text, or the name of a column holding each line's reason)."""
    if not bad.height:
        return
    why = bad[reason] if reason in bad.columns else pl.Series([reason] * bad.height)
    first = bad.row(0, named=True)
    if strict:
        raise BadInput(path, why[0], line=first["line_no"], text=first["t"])
    records.read -= bad.height
    records.skip(bad.height, [f"{path}:{n}: {w}" for n, w in zip(bad["line_no"].head(5), why.head(5))])


def _out_of_range(g: pl.DataFrame, extra: list[tuple[pl.Expr, str]], malformed: str) -> pl.DataFrame:
    """`reason` per line: `malformed` where the pattern did not match, else the first field out
    of its range (null: none), so that strict mode names the first bad line of the file."""
    checks = [(pl.col("ts").is_null(), malformed),
              (pl.col("t_ns").is_null(), "timestamp is not SECONDS.FRACTION within int64 nanoseconds"),
              (pl.any_horizontal(_lines.checked_int(pl.col(c), *_lines.U32).is_null() for c in ("host", "channel", "id")),
               "host, channel or id outside 0..2^32-1"),
              (_lines.checked_int(pl.col("lun"), 0, 2**63 - 1).is_null(), "LUN out of range"),
              (pl.col("tag").is_not_null() & _lines.checked_int(pl.col("tag"), *_lines.I32).is_null(),
               "tag outside the 32-bit range"), *extra]
    reason = pl.lit(None, pl.Utf8)
    for cond, why in reversed(checks):
        reason = pl.when(cond).then(pl.lit(why)).otherwise(reason)
    return g.with_columns(_seconds_ns("ts").alias("t_ns")).with_columns(reason.alias("reason"))


def _extracted(lines: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """line_no, t and the named groups of `pattern` in each line: the lines cut in one part
    per thread, matched in parallel (one regex over a column runs on one core)."""
    expr = pl.col("t").str.extract_groups(pattern).alias("g")
    parts = max(1, min(pl.thread_pool_size(), lines.height // PER_THREAD))
    if parts == 1:
        return lines.select("line_no", "t", expr).unnest("g")
    size = -(-lines.height // parts)
    return pl.concat(pl.collect_all([lines.slice(k * size, size).lazy().select("line_no", "t", expr)
                                     for k in range(parts)])).unnest("g")


PER_THREAD = 20_000     # lines worth a thread of their own


def _ftrace(ft: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> pl.DataFrame:
    g = _extracted(ft, FTRACE)
    raw = pl.col("raw").str.replace_all(" ", "")
    g = _out_of_range(g, [
        ((raw.str.len_bytes() % 2 == 1) | (raw.str.len_bytes() == 0), "raw= CDB bytes: an odd number of hex digits")],
        malformed="malformed scsi_dispatch_cmd event")
    _bad(g.filter(pl.col("reason").is_not_null()), "reason", path, strict, records)
    g = g.filter(pl.col("reason").is_null())
    result = pl.col("result")
    return g.select(
        "t_ns",
        pl.col("kind"),
        pl.format("{}:{}:{}:{}", "host", "channel", "id", "lun").alias("device"),
        pl.col("tag").cast(pl.Int64, strict=False).alias("tag"),
        pl.col("raw").str.replace_all(" ", "").str.decode("hex").alias("cdb"),
        pl.when(result.is_not_null()).then(result.str.extract(r"host=(\w+)")).alias("host_byte"),
        pl.when(result.is_not_null()).then(result.str.extract(r"status=SAM_STAT_(\w+)")
                                           .str.replace_all("_", " ")).alias("status"),
        pl.col("rtn").cast(pl.Int64, strict=False).alias("rtn"),
        pl.lit("ftrace").alias("source"),
        pl.col("line_no").alias("pos"),
    ).cast(EVENTS)


def _dmesg(dm: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> pl.DataFrame:
    """Send/Done/FAILED/timing-out and CDB lines of a block, parsed and checked."""
    g = dm.select("line_no", "t", pl.col("t").str.extract_groups(DMESG).alias("g")).unnest("g")
    is_cdb = pl.col("kind") == "CDB:"
    # "CDB: Read(10) 28 00 ..." (older kernels: "CDB: Read(10): 28 00 ..."): at least 6 bytes,
    # nothing after them
    cdb_hex = pl.col("rest").str.extract(r"((?:\s[0-9a-f]{2})+)\s*$").str.replace_all(" ", "")
    g = _out_of_range(g.with_columns(cdb_hex.alias("cdb_hex")), [
        (is_cdb & (pl.col("cdb_hex").str.len_bytes().fill_null(0) < 12), "garbled CDB (expected 6 or more hex bytes)")],
        malformed="malformed SCSI logging line")
    _bad(g.filter(pl.col("reason").is_not_null()), "reason", path, strict, records)
    rest = pl.col("rest")
    return g.filter(pl.col("reason").is_null()).select(
        "line_no", "t_ns", "kind", pl.format("{}:{}:{}:{}", "host", "channel", "id", "lun").alias("device"),
        "tag", "cdb_hex", "rest", pl.lit(False).alias("_emitted"),
        # what _dmesg_events reads of the rest (the Rust scan cuts the same of its lines)
        rest.str.extract(r"hostbyte=(\w+)").alias("_host"), rest.str.extract(r"^\s*([A-Z_]+)").alias("_word"),
        rest.str.contains("TIMEOUT").alias("_timeout"))


def _dmesg_events(g: pl.DataFrame | None, st: _Events, final: bool = False) -> pl.DataFrame:
    """Events of the parsed dmesg lines `g` (and of the rows carried from earlier blocks),
    each given the CDB of the "CDB:" line after it. An event whose (device, tag) has no line
    after it in the block waits in `st.carry` for the next block (`final`: the log ended);
    the event before it is carried too, already emitted (a failed command's second end is
    dropped). A line's neighbours of its (device, tag) come from one compiled pass
    (`key_neighbours`)."""
    parts = [p for p in (st.carry, g) if p is not None]
    g = pl.concat(parts) if len(parts) > 1 else parts[0]
    is_sense = pl.col("kind").str.starts_with("Sense Key")
    if g.select(is_sense.any()).item():
        sense, g = g.filter(is_sense), g.filter(~is_sense)
    else:
        sense = g.clear()
    is_cdb = pl.col("kind") == "CDB:"
    nxt = g if g["line_no"].is_sorted() else g.sort("line_no")
    after = _neighbours(nxt)["next"]
    nxt = nxt.with_columns(pl.col("cdb_hex").gather(after).alias("next_cdb"),
                           is_cdb.gather(after).alias("next_is_cdb"))
    ev = nxt.filter(~is_cdb)
    near = _neighbours(ev)
    ev = ev.with_columns(pl.col("kind").gather(near["prev"]).alias("_prev_kind"),
                         (near["next"].is_null() | near["next"].gather(near["next"]).is_null()).alias("_last_two"))
    held = pl.col("next_is_cdb").is_null() & ~pl.col("_emitted") & pl.lit(not final)
    pending = ev.filter(~pl.col("_emitted"))
    if pending.height:
        first = int(pending["t_ns"].min())
        st.first_t = first if st.first_t is None else min(st.first_t, first)
    # per (device, tag): the last two events (the one before a held event decides whether it
    # is a failed command's second end), marked emitted unless held
    st.carry = None if final else ev.filter(pl.col("_last_two")).with_columns(
        (pl.col("_emitted") | pl.col("next_is_cdb").is_not_null()).alias("_emitted")).select(g.columns)
    sense = _sense_after_held(sense, ev.filter(held), st)
    # a failed command is logged twice ("FAILED Result:" from the midlayer's completion,
    # "Done:" from the logging hook): an end right after an end of the same device and tag,
    # one of them FAILED, is dropped (decided from the event before it alone, so every block
    # size gives the same events). Two "Done:" in a row are two completions (a
    # completions-only log, a command requeued: "Done: ADD_TO_MLQUEUE")
    prev_kind = pl.col("_prev_kind")
    ends = pl.col("kind").is_in(["Done:", "FAILED"])
    failed = (pl.col("kind") == "FAILED") | (prev_kind == "FAILED").fill_null(False)
    ev = ev.filter(~(ends & prev_kind.is_in(["Done:", "FAILED"]).fill_null(False) & failed)
                   & ~pl.col("_emitted") & ~held)
    kind = (pl.when(pl.col("kind") == "Send:").then(pl.lit("start"))
            .when(pl.col("kind") == "timing out command").then(pl.lit("timeout"))
            .when(pl.col("_timeout")).then(pl.lit("timeout"))
            .otherwise(pl.lit("done")))
    out = pl.concat([ev.select(
        "t_ns",
        kind.alias("kind"),
        "device",
        pl.col("tag").cast(pl.Int64, strict=False).alias("tag"),
        pl.when(pl.col("next_is_cdb").fill_null(False)).then(pl.col("next_cdb")).str.decode("hex").alias("cdb"),
        pl.col("_host").alias("host_byte"),
        pl.when(pl.col("kind") == "FAILED").then(pl.lit("FAILED"))
        .otherwise(pl.col("_word").replace({"SUCCESS": "GOOD"})).alias("status"),
        pl.lit(None, dtype=pl.Int64).alias("rtn"),
        pl.lit("dmesg").alias("source"),
        pl.col("line_no").alias("pos"),
    ).cast(EVENTS), _sense_events(sense)])
    return out if out["pos"].is_sorted() else out.sort("pos")


def _neighbours(rows: pl.DataFrame) -> pl.DataFrame:
    """`prev`, `next`: the row of the line before and after each of its (device, tag)."""
    from scsitrace._native import text
    if not rows.height:      # (an empty Arrow string view crosses with a dangling buffer)
        return pl.DataFrame(schema={"prev": pl.Int64, "next": pl.Int64})
    return pl.DataFrame(text.key_neighbours(rows.select("device", "tag", "line_no"), ["device", "tag"]))


def _sense_after_held(sense: pl.DataFrame, held: pl.DataFrame, st: _Events) -> pl.DataFrame:
    """The sense lines that can go now: those after an event held for the next block wait
    with it in `st.carry` (an end goes before its sense lines)."""
    if not sense.height or not held.height or st.carry is None:
        return sense
    tag = pl.col("tag").fill_null("").alias("_tag")
    after = sense.with_columns(tag).join(
        held.select("device", tag, pl.col("line_no").alias("_held")), on=["device", "_tag"], how="left")
    wait = pl.col("_held").is_not_null() & (pl.col("line_no") > pl.col("_held"))
    st.carry = pl.concat([st.carry, after.filter(wait).select(st.carry.columns)])
    return after.filter(~wait).select(sense.columns)


def _sense_events(sense: pl.DataFrame) -> pl.DataFrame:
    """"Sense Key : Unit Attention [current]" lines -> `sense` events (the key's name in
    `status`): the command they belong to is the last end of their (device, tag) before them
    (scsitrace/scsilog/completions.py)."""
    return sense.select(
        "t_ns", pl.lit("sense").alias("kind"), "device", pl.col("tag").cast(pl.Int64, strict=False).alias("tag"),
        pl.lit(None, dtype=pl.Binary).alias("cdb"), pl.lit(None, dtype=pl.Utf8).alias("host_byte"),
        pl.col("rest").str.extract(r"^\s*(.*?)\s*(?:\[[^\]]*\]\s*)*$").alias("status"),
        pl.lit(None, dtype=pl.Int64).alias("rtn"), pl.lit("dmesg").alias("source"), pl.col("line_no").alias("pos"),
    ).cast(EVENTS)
