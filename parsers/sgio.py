"""SCSI commands sent through the SCSI generic paths (`SG_IO` on /dev/sg*, /dev/sd*,
/dev/bsg/*), as strace records them or as sg3_utils programs print them with -vv.

strace: `ioctl(FD, SG_IO, {...}) = RET` lines, with or without -t/-tt/-ttt timestamps,
-T syscall times, -y/-yy fd paths, -f pids (`[pid N] ` on stderr, `N ` with -o), `-v`
or abbreviated, `<unfinished ...>`/`<... ioctl resumed>` pairs, sg v3 headers
(`interface_id='S'`) and sg v4 headers (`guard='Q'`, bsg). One SG_IO call is one command:
its CDB, direction, bytes requested (`dxfer_len`) and transferred (`dxfer_len - resid`),
status, host status, sense key/ASC/ASCQ, the syscall's time (-T, or entry to return of an
unfinished/resumed pair) and the driver's `duration` (ms). Lines of other syscalls, signals,
exits and strace's own messages are read and skipped by design (counted in the capture's
meta, not as errors); an SG_IO line that does not decode, or a line that is no strace
output, is bad input (strict) or skipped and counted (lenient).

sg3_utils -vv output (`parsers/_sg3_verbose.py`): one command per "cdb: [..]" line.

Hands over a ready-made `commands` frame (the kernel-log layer's command table, plus the
columns of `scsitrace.scsilog.COMMAND_EXTRA`) and an empty `events` frame.
"""
from __future__ import annotations

import re

import polars as pl

from scsitrace import schema, scsi
from scsitrace.errors import BadInput
from scsitrace.model import Capture, LazyFrames, RecordCount
from scsitrace.scsilog.events import EVENTS
from scsitrace.streams import started
from . import _lines, _sg3_verbose

ID = "sgio"
SUFFIXES = (".strace", ".strace.txt", ".sg3.txt")

PREFIX = (r"^\s*(?:\[pid\s+(?P<pid_b>\d+)\]\s+|(?P<pid_o>\d+)\s+)?"
          r"(?:(?P<ts>\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+)?$")
FD = r"ioctl\((?P<fd>\d+)(?:<(?P<path>[^<>]*)(?:<[^<>]*>)?>)?, SG_IO, "
# the end of an SG_IO line or of a resumed half: return value, errno, -T time
RET = (r"(?P<retpart>\)\s+= (?P<ret>-?\d+|\?)(?: (?P<errno>E[A-Z0-9]+) \([^)]*\))?"
       r"(?: <(?P<dur>\d+\.\d+)>)?)$")
# everything strace writes besides SG_IO calls
STRACE_OTHER = (r"^(?:[a-z_][a-z0-9_]*\(.*(?:\)\s+= .*|<unfinished \.\.\.>)|<\.\.\. [a-z_][a-z0-9_]* resumed>.*"
                r"|--- .* ---|\+\+\+ .* \+\+\+|strace: .*|\?\?\?.*|)$"
                # strace without -o shares the terminal with the traced program: a write(2) to it
                # is printed up to its count, the program's text follows, then ") = N" on a line
                r"|^write\([12](?:<[^<>]*>)?, .*, \d+.*$|^\)\s+= -?\d+.*$")
# what only strace writes at the start of a line (after -f's pid and a timestamp): a call, a
# resumed half, a signal, an exit, its own message; any other line is the traced program's
STRACE_SHAPED = r"^(?:[a-z_][a-z0-9_]*\(|<\.\.\. |--- |\+\+\+ |strace: |\)\s+= |\?\?\?)"
SNIFF = re.compile(r"(?m)^[ \t]*(?:\[pid\s+\d+\]\s+|\d+\s+)?(?:[\d:.]+\s+)?ioctl\(\d+(?:<[^\n]*?>)?, SG_IO, [{0N]")

DIRECTIONS = {"SG_DXFER_NONE": "none", "SG_DXFER_TO_DEV": "out", "SG_DXFER_FROM_DEV": "in",
              "SG_DXFER_TO_FROM_DEV": "bidi", "SG_DXFER_UNKNOWN": "unknown"}
HOST_BYTES = {0x00: "DID_OK", 0x01: "DID_NO_CONNECT", 0x02: "DID_BUS_BUSY", 0x03: "DID_TIME_OUT",
              0x04: "DID_BAD_TARGET", 0x05: "DID_ABORT", 0x06: "DID_PARITY", 0x07: "DID_ERROR",
              0x08: "DID_RESET", 0x09: "DID_BAD_INTR", 0x0A: "DID_PASSTHROUGH", 0x0B: "DID_SOFT_ERROR",
              0x0C: "DID_IMM_RETRY", 0x0D: "DID_REQUEUE", 0x0E: "DID_TRANSPORT_DISRUPTED",
              0x0F: "DID_TRANSPORT_FAILFAST", 0x11: "DID_TRANSPORT_MARGINAL"}
COMMANDS = {"device": pl.Utf8, "tag": pl.Int64, "cdb": pl.Binary, "pos": pl.Int64, "start_ns": pl.Int64,
            "end_ns": pl.Int64, "status": pl.Utf8, "host_byte": pl.Utf8, "reason": pl.Utf8,
            "response_ns": pl.Int64, "bytes": pl.Int64, "data_bytes": pl.Int64, "direction": pl.Utf8,
            "sense_key": pl.Utf8, "asc": pl.Int64, "ascq": pl.Int64, "syscall_ns": pl.Int64,
            "driver_ns": pl.Int64, "pid": pl.Int64}


def sniff(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    return bool(SNIFF.search(text)) or _sg3_verbose.sniff(text)


HOLD = 1 << 20          # commands held back behind a call waiting for its resumed half, at most
HEAD_BYTES = 8 << 20     # the head read to tell strace from sg3_utils output, and one process from several


def parse(path, *, strict: bool = True, progress=None, chunk_bytes: int = _lines.BLOCK_BYTES, **_opts) -> Capture:
    """A streaming capture: `chunks()` yields the `commands` of each block of lines as it is
    read (an SG_IO call split by -f waits for its resumed half, an sg3_utils command for the
    line after its output); the first block is read here, the rest as the analysis consumes
    them. `frames["commands"]` reads the whole log (tests, `convert`)."""
    path = str(path)
    cap = Capture(layer="scsilog", path=path, format=ID, records=RecordCount(), meta={"origin_ns": 0, "position_unit": "line"})
    with open(path, "rb") as fh:
        head = fh.read(65536).decode("utf-8", "replace")
    sg3 = not SNIFF.search(head) and _sg3_verbose.sniff(head)
    many = False if sg3 else _many_pids(path)
    first = _Commands(path, strict, chunk_bytes, sg3, many).run(cap, progress)
    chunks = started(first, lambda: _Commands(path, strict, chunk_bytes, sg3, many).run(
        Capture(layer="scsilog", path=path, format=ID, records=RecordCount(), meta={}), None))
    cap.chunks = chunks
    cap.frames = LazyFrames({"commands": lambda: pl.concat([pl.DataFrame(schema=COMMANDS), *chunks()])})
    cap.frames["events"] = schema.empty(EVENTS)
    return cap


def _many_pids(path: str) -> bool:
    """Whether the SG_IO lines name more than one process (-f): devices are then named
    "pid N fd M". Decided on the log's first HEAD_BYTES."""
    for block in _lines.iter_line_blocks(path, strict=False, block_bytes=HEAD_BYTES):
        g = _classify(_text(block), None)
        # the SG_IO lines' processes (an unprefixed line, before -f's first fork, is one too;
        # other lines' are not: a write(2) split by the program's output resumes unprefixed)
        return g.filter(pl.col("kind").is_in(["whole", "unfinished", "resumed"]))["pid"].n_unique() > 1
    return False


def _text(block: pl.DataFrame) -> pl.DataFrame:
    return block.select("line_no", pl.col("text").str.strip_chars_end("\r\n").alias("t"))


class _Commands:
    """The commands of one pass over the log, block by block, with what spans block edges:
    strace: -f halves waiting for their resumed half, the last open() of each (pid, fd), the
    clock for -t/-tt midnights; sg3_utils: the lines from the last command on, the device
    last opened."""

    def __init__(self, path: str, strict: bool, chunk_bytes: int, sg3: bool, many: bool):
        self.path, self.strict, self.chunk_bytes, self.sg3, self.many = path, strict, chunk_bytes, sg3, many
        self.held = self.fd_paths = self.tail = self.dev = self.waiting = None
        self.clock = (None, 0)
        self.by_design = {"other syscalls": 0, "signals and exits": 0, "strace messages": 0, "blank": 0,
                          "program output": 0}
        self.other = 0
        self.stamped = self.timed = False
        self.origin = None

    def run(self, cap: Capture, progress):
        records = cap.records
        for block in _lines.iter_line_blocks(self.path, strict=self.strict, progress=progress,
                                             block_bytes=self.chunk_bytes):
            lines = _text(block)
            records.read += lines.height
            out = self._sg3(lines, records, False) if self.sg3 else _strace(lines, self, records, False)
            out = self._release(out, False)
            if out.height:
                yield self._out(out, cap)
        out = self._sg3(None, records, True) if self.sg3 else _strace(None, self, records, True)
        out = self._release(out, True)
        if out.height:
            yield self._out(out, cap)
        cap.notes[:] = self._notes()
        cap.meta.update(self._meta())

    def _release(self, cmds: pl.DataFrame, final: bool) -> pl.DataFrame:
        """The commands that can go: those before the first call still waiting for its resumed
        half (so that commands stay in log order), or all (`final`, or more than HOLD wait)."""
        if self.waiting is not None:
            cmds = pl.concat([self.waiting, cmds]) if cmds.height else self.waiting
            self.waiting = None
        if final or self.held is None or not self.held.height or cmds.height > HOLD:
            return cmds
        cut = int(self.held["line_no"].min())
        self.waiting = cmds.filter(pl.col("pos") > cut)
        return cmds.filter(pl.col("pos") < cut)

    def _out(self, cmds: pl.DataFrame, cap: Capture) -> pl.DataFrame:
        """Commands with times from the first command's start (the earliest of the first block
        that has one, calls still open included: logs are in time order)."""
        if self.origin is None and cmds["start_ns"].is_not_null().any():
            held = self.held["t_ns"].min() if self.held is not None and self.held.height else None
            self.origin = min(v for v in (cmds["start_ns"].min(), held) if v is not None)
            cap.meta["origin_ns"] = self.origin
        held = self.held["t_ns"].min() if self.held is not None and self.held.height else None
        cap.held_from = held - (self.origin or 0) if held is not None else None
        o = self.origin or 0
        return cmds.with_columns(pl.col("start_ns") - o, pl.col("end_ns") - o).select(
            [pl.col(k).cast(v) for k, v in COMMANDS.items()])

    def _sg3(self, lines, records, final: bool) -> pl.DataFrame:
        """sg3_utils output up to the last "cdb:" line of the block (the lines from it on wait
        for the next block: they belong to that command)."""
        parts = [p for p in (self.tail, lines) if p is not None]
        if not parts:
            return pl.DataFrame(schema=COMMANDS)
        lines = pl.concat(parts) if len(parts) > 1 else parts[0]
        self.tail = None
        if not final:
            cdb = lines.filter(pl.col("t").str.contains(_sg3_verbose.CDB))["line_no"]
            if cdb.len():
                cut = int(cdb.max())
                self.tail, lines = lines.filter(pl.col("line_no") >= cut), lines.filter(pl.col("line_no") < cut)
        # lines carried in the tail were counted when read; the module counts what it is handed
        cmds, meta, _, self.dev = _sg3_verbose.commands(lines, self.path, self.strict, records, _bad, self.dev)
        self.other += meta["skipped_by_design"]["program output"]
        return cmds

    def _meta(self) -> dict:
        if self.sg3:
            return {"log": "sg3_utils", "skipped_by_design": {"program output": self.other},
                    "timestamps": False, "syscall_times": False}
        return {"log": "strace", "skipped_by_design": dict(self.by_design), "timestamps": self.stamped,
                "syscall_times": self.timed}

    def _notes(self) -> list[str]:
        if self.sg3:
            return _sg3_verbose.notes_of(self.other)
        program = self.by_design["program output"]
        notes = [f"{sum(self.by_design.values()) - program} strace lines are not SG_IO commands (other syscalls, "
                 "signals, exits, strace's messages, second halves of interrupted calls): read, skipped by design"]
        if program:
            notes.append(f"{program} lines are the traced program's own output (strace without -o shares its "
                         "terminal): read, skipped by design")
        if not self.stamped:
            notes.append("strace without -t/-tt/-ttt: no timestamps, so no time line (segments, elapsed, IOPS)")
        notes.append("response time = the SG_IO syscall's time (strace -T)" if self.timed else
                     "response time = the driver's duration (strace without -T; millisecond resolution)")
        return notes


def _bad(bad: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> None:
    """Lines that do not decode (line_no, t, why): the first is the error (strict), or all are
    skipped and counted (lenient)."""
    if not bad.height:
        return
    bad = bad.sort("line_no")
    first = bad.row(0, named=True)
    if strict:
        raise BadInput(path, first["why"], line=first["line_no"], text=first["t"])
    records.read -= bad.height
    records.skip(bad.height, [f"{path}:{r['line_no']}: {r['why']}" for r in bad.head(5).iter_rows(named=True)])


def _classify(lines: pl.DataFrame, st) -> pl.DataFrame:
    """Each line split (`_split`) and given its kind: whole, unfinished or resumed SG_IO,
    other (read, skipped by design), program (the traced program's own output, strace without
    -o: read, skipped by design), bad (a broken SG_IO line) or alien (a broken strace line)."""
    g = _split(lines, st)
    body = pl.col("body")
    sg = g.filter(pl.col("sg") | body.str.starts_with("<... ioctl resumed>"))
    rest = g.filter(~(pl.col("sg") | body.str.starts_with("<... ioctl resumed>")))
    arg = pl.col("arg")
    sg = sg.with_columns(
        pl.when(pl.col("sg") & pl.col("fd").is_not_null() & pl.col("ret").is_not_null()
                & ((arg.str.starts_with("{") & arg.str.ends_with("}")) | arg.str.contains(r"^(?:0x[0-9a-f]+|NULL)$")))
        .then(pl.lit("whole"))
        .when(pl.col("sg") & pl.col("fd").is_not_null() & body.str.ends_with(" <unfinished ...>")
              & arg.str.starts_with("{")).then(pl.lit("unfinished"))
        .when(~pl.col("sg") & pl.col("ret").is_not_null()).then(pl.lit("resumed"))
        .when(~pl.col("sg")).then(pl.lit("other"))        # an ioctl resumed half without its result
        .otherwise(pl.lit("bad")).alias("kind"))
    # a damaged line (a NUL, bytes that are not UTF-8) is bad wherever it is
    strace_shaped = (pl.col("pid_b").is_not_null() | pl.col("ts").is_not_null() | body.str.contains(STRACE_SHAPED)
                     | _lines.bad_bytes(pl.col("t")))
    rest = rest.with_columns(pl.when(body.str.contains(STRACE_OTHER)).then(pl.lit("other"))
                             .when(strace_shaped).then(pl.lit("alien"))
                             .otherwise(pl.lit("program")).alias("kind"))
    return pl.concat([sg, rest], how="diagonal_relaxed").sort("line_no")


SLIM = ("line_no", "pid", "t_ns", "ts", "fd", "path", "arg", "ret", "errno", "dur", "kind", "opens", "closes")


def _strace(lines: pl.DataFrame | None, st: _Commands, records: RecordCount, final: bool) -> pl.DataFrame:
    """The SG_IO commands of one block of strace lines (`final`: the log has ended: calls still
    waiting for their resumed half have no return)."""
    body = pl.col("body")
    if lines is not None and lines.height:
        damaged = _lines.bad_bytes(pl.col("t"))     # a NUL or non-UTF-8 bytes: one bad record, never "other"
        _bad(lines.filter(damaged).with_columns(pl.lit("NUL byte or bytes that are not UTF-8 in a log line")
                                                .alias("why")), st.path, st.strict, records)
        lines = lines.filter(~damaged)
        g = _classify(lines, st)
        _bad(g.filter(pl.col("kind").is_in(["bad", "alien"])).with_columns(
            pl.when(pl.col("kind") == "bad").then(pl.lit("malformed SG_IO ioctl line (expected "
                                                         "ioctl(FD, SG_IO, {...}) = RET)"))
            .otherwise(pl.lit("malformed strace line")).alias("why")), st.path, st.strict, records)
        g = g.filter(~pl.col("kind").is_in(["bad", "alien"]))
        st.by_design["program output"] += int((g["kind"] == "program").sum())
        g = g.filter(pl.col("kind") != "program")
        opens = _fd_paths(g)
        if st.fd_paths is not None:
            opens = pl.concat([st.fd_paths, opens])
        st.fd_paths = opens.group_by("pid", "fd", maintain_order=True).last().select(opens.columns)
        other = g.filter(pl.col("kind") == "other").select("body")
        for name, n in (("other syscalls", other.filter(~body.str.contains(r"^(?:---|\+\+\+|strace: )")
                                                        & (body != "")).height),
                        ("signals and exits", int(other["body"].str.contains(r"^(?:---|\+\+\+)").sum())),
                        ("strace messages", int(other["body"].str.starts_with("strace: ").sum())),
                        ("blank", int((other["body"] == "").sum()))):
            st.by_design[name] += n
        st.stamped |= bool(g["ts"].is_not_null().any())
        # from here on only the struct text is carried (sorting three copies of each line cost a third)
        g = g.select(*SLIM[:-2], (body.str.starts_with("ioctl(") & body.str.ends_with("<unfinished ...>")).alias("opens"),
                     body.str.starts_with("<... ioctl resumed>").alias("closes"))
        if st.held is not None:
            g = pl.concat([st.held, g], how="vertical_relaxed").sort("line_no")
    elif st.held is not None:
        g = st.held
    else:
        return pl.DataFrame(schema=COMMANDS)
    whole = g.filter(pl.col("kind") == "whole").select(
        "line_no", "pid", "t_ns", "fd", "path", "arg", "ret", "errno", "dur",
        pl.lit(None, dtype=pl.Int64).alias("end_t_ns"))
    calls, resumed_sg, st.held = _pairs(g, final)
    cmds = pl.concat([whole, calls], how="diagonal_relaxed").sort("line_no")
    # resumed halves not joined to an SG_IO start: other ioctls' (or the trace began mid-call)
    st.by_design["other syscalls"] += int((g["kind"] == "resumed").sum()) - resumed_sg
    st.timed |= bool(cmds.height and cmds["dur"].is_not_null().any())
    fd_paths = st.fd_paths if st.fd_paths is not None else pl.DataFrame(
        schema={"line_no": pl.Int64, "pid": pl.Int64, "fd": pl.Int64, "opath": pl.Utf8})
    out = _decode(cmds, fd_paths, st.many)
    _bad(out.filter(pl.col("why").is_not_null()), st.path, st.strict, records)
    return out.filter(pl.col("why").is_null()).drop("why", "line_no", "t")


DAY = 86_400_000_000_000


def _clock(ts: pl.Expr, before: tuple) -> tuple[pl.Expr, pl.Expr]:
    """-ttt (epoch seconds) or -t/-tt (time of day; a step back of over 12 h is midnight):
    (the time as printed, midnights passed), `before`: (the last time printed in earlier
    blocks, midnights passed by then)."""
    clock = ts.str.contains(":")
    hms = ts.str.extract_groups(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")
    frac = lambda s: s.str.slice(0, 9).str.pad_end(9, "0").cast(pl.Int64).fill_null(0)  # noqa: E731
    tod = ((hms.struct[0].cast(pl.Int64) * 3600 + hms.struct[1].cast(pl.Int64) * 60
            + hms.struct[2].cast(pl.Int64)) * 1_000_000_000 + frac(hms.struct[3]))
    epoch = ts.str.split(".")
    sec = epoch.list.get(0, null_on_oob=True).cast(pl.Int64) * 1_000_000_000 + frac(epoch.list.get(1, null_on_oob=True))
    raw = pl.when(clock).then(tod).otherwise(sec)
    last, wraps = before
    filled = raw.forward_fill()
    step = filled.diff() if last is None else filled.fill_null(last) - filled.fill_null(last).shift(1, fill_value=last)
    return raw, (pl.when(clock).then(step < -DAY // 2).otherwise(False)).fill_null(False).cum_sum() + wraps


def _split(lines: pl.DataFrame, st=None) -> pl.DataFrame:
    """Each line's -f pid, timestamp and body; for SG_IO lines (and ioctl resumed halves) the
    fd, -y path, struct text, return value, errno and -T time. Patterns run on the short head
    and tail of a line only (a capture over a whole 600-byte line costs 30 times more). `st`:
    the stream, whose clock (-t/-tt midnights) goes on from block to block."""
    t = pl.col("t")
    pre = t.str.slice(0, 64).str.extract(r"^(\s*(?:\[pid\s+\d+\]\s+|\d+\s+)?"
                                         r"(?:(?:\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+)?)", 1)
    g = lines.with_columns(pre.alias("pre"))
    g = g.with_columns(pl.col("pre").str.extract_groups(PREFIX).alias("p"),
                       t.str.slice(pl.col("pre").str.len_chars()).str.strip_chars_end().alias("body")).unnest("p")
    body = pl.col("body")
    resumed = body.str.starts_with("<... ioctl resumed>")
    raw, wraps = _clock(pl.col("ts"), st.clock if st is not None else (None, 0))
    g = g.with_columns(raw.alias("_raw"), wraps.cast(pl.Int64).alias("_wraps"))
    if st is not None and g.height:
        stamped = g.filter(pl.col("_raw").is_not_null())
        if stamped.height:
            st.clock = (int(stamped["_raw"][-1]), int(g["_wraps"][-1]))
    g = g.with_columns(
        pl.coalesce(pl.col("pid_b"), pl.col("pid_o")).cast(pl.Int64).alias("pid"),
        (pl.col("_raw") + pl.col("_wraps") * DAY).alias("t_ns"),
        (body.str.starts_with("ioctl(") & body.str.contains(", SG_IO, ", literal=True)).alias("sg")).drop("_raw", "_wraps")
    part = g.filter(pl.col("sg") | resumed).with_columns(
        body.str.slice(0, 300).str.extract_groups("^" + FD).alias("f"),
        body.str.slice(-200).str.extract_groups(RET).alias("r")).unnest("f").unnest("r")
    begin = pl.when(pl.col("sg")).then(body.str.find(", SG_IO, ", literal=True) + 9).otherwise(19)
    finish = (body.str.len_chars() - pl.when(pl.col("retpart").is_not_null()).then(pl.col("retpart").str.len_chars())
              .when(body.str.ends_with(" <unfinished ...>")).then(17).otherwise(0))
    part = part.with_columns(body.str.slice(begin, finish - begin).alias("arg")).drop("retpart")
    return pl.concat([part, g.filter(~(pl.col("sg") | resumed))], how="diagonal_relaxed")


def _pairs(g: pl.DataFrame, final: bool = True):
    """SG_IO calls split by -f into `<unfinished ...>` and `<... ioctl resumed>`: each resumed
    half belongs to its pid's previous unfinished ioctl. Returns the joined SG_IO calls, how
    many resumed halves they used, and (unless `final`) the unfinished halves that are their
    pid's last line so far (rows of `g`: their resumed half may come in the next block)."""
    halves = g.filter(pl.col("opens") | pl.col("closes")).sort("pid", "line_no")
    cols = ("kind", "arg", "line_no", "t_ns", "fd", "path")
    halves = halves.with_columns([pl.col(c).shift(1).over("pid").alias(f"p_{c}") for c in cols])
    done = halves.filter((pl.col("kind") == "resumed") & (pl.col("p_kind") == "unfinished")).select(
        pl.col("p_line_no").alias("line_no"), "pid", pl.col("p_t_ns").alias("t_ns"), pl.col("p_fd").alias("fd"),
        pl.col("p_path").alias("path"), pl.concat_str("p_arg", "arg").alias("arg"), "ret", "errno", "dur",
        pl.col("t_ns").alias("end_t_ns"))
    # an unfinished SG_IO whose pid has no resumed half after it: the trace ended (or the process died)
    nxt = pl.col("closes").shift(-1).over("pid")
    last = nxt.is_null() & pl.lit(not final)
    held = halves.filter((pl.col("kind") == "unfinished") & last).select(g.columns)
    open_ = halves.filter((pl.col("kind") == "unfinished") & ~nxt.fill_null(False) & ~last).select(
        "line_no", "pid", "t_ns", "fd", "path", "arg", pl.lit("?").alias("ret"),
        pl.lit(None, dtype=pl.Int64).alias("end_t_ns"))
    return pl.concat([done, open_], how="diagonal_relaxed"), done.height, held


def _fd_paths(g: pl.DataFrame) -> pl.DataFrame:
    """(pid, fd) -> path of the last open/openat of it before each line (traces with opens)."""
    m = g.filter(pl.col("body").str.contains(r"^open(?:at)?\(")).select(
        "line_no", "pid", pl.col("body").str.extract_groups(
            r'^open(?:at)?\((?:(?:[A-Z_]+|\d+(?:<[^>]*>)?), )?"(?P<opath>[^"]*)".*\)\s+= (?P<ofd>\d+)').alias("o")
    ).unnest("o").filter(pl.col("ofd").is_not_null())
    return m.select("line_no", pl.col("pid").fill_null(-1), pl.col("ofd").cast(pl.Int64).alias("fd"), "opath")


# the struct fields read: sg v3 (interface_id='S'), then sg v4 (guard='Q')
FIELDS = ("dxfer_direction", "cmdp", "dxfer_len", "status", "host_status", "sb_len_wr", "sbp", "resid",
          "duration", "request", "din_xfer_len", "dout_xfer_len", "din_resid", "dout_resid", "device_status",
          "transport_status", "response_len", "response")


def _fields(c: pl.DataFrame) -> pl.DataFrame:
    """`c` with one string column per FIELDS entry: the struct split once at ", " into
    name=value pairs (strace prints buffers as \\xNN escapes, so no value holds ", ")."""
    kv = c.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
                  pl.col("arg").str.strip_prefix("{").str.strip_suffix("}").str.split(", ").alias("kv")) \
        .explode("kv").select("_row", pl.col("kv").str.splitn("=", 2).struct.rename_fields(["k", "v"]).alias("kv")) \
        .unnest("kv").filter(pl.col("k").is_in(FIELDS))
    wide = kv.pivot(on="k", index="_row", values="v", aggregate_function="first") if kv.height else \
        pl.DataFrame(schema={"_row": pl.Int64})
    c = c.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64)).join(wide, on="_row", how="left")
    return c.with_columns([pl.lit(None, dtype=pl.Utf8).alias(f) for f in FIELDS if f not in c.columns])


NUMBERS = ("dxfer_len", "status", "host_status", "sb_len_wr", "resid", "duration", "din_xfer_len",
           "dout_xfer_len", "din_resid", "dout_resid", "device_status", "transport_status", "response_len")


def _num(name: str) -> pl.Expr:
    """A number strace printed (decimal or 0x hex), null unless it fits 32 bits (every field
    of sg_io_hdr and sg_io_v4 that is read here does)."""
    v = pl.col(name)
    return pl.when(v.str.starts_with("0x")).then(_lines.checked_int(v.str.slice(2), *_lines.U32, base=16)) \
        .otherwise(_lines.checked_int(v, -2**31, 2**32 - 1))


def _why_bad() -> pl.Expr:
    """Why an SG_IO line's struct does not decode (null: it does): a CDB that is not \\xNN
    bytes, or a number outside its field's range (the error contract)."""
    why = pl.lit(None, pl.Utf8)
    for name in reversed(NUMBERS):
        why = pl.when(pl.col(name).is_not_null() & _num(name).is_null()) \
            .then(pl.lit(f"{name} is not a number in range")).otherwise(why)
    why = pl.when(pl.col("fd_text").is_not_null() & pl.col("fd").is_null()) \
        .then(pl.lit("fd is not a number in range")) \
        .when(pl.col("dur").is_not_null() & pl.col("syscall_ns").is_null()) \
        .then(pl.lit("-T time is not a number of seconds in range")) \
        .when(pl.col("duration").is_not_null() & (_num("duration") < 0)).then(pl.lit("duration is negative")) \
        .when(pl.col("dxfer_len").is_not_null() & (_num("dxfer_len") < 0)).then(pl.lit("dxfer_len is negative")) \
        .when(_num("resid") > _num("dxfer_len")).then(pl.lit("resid is larger than dxfer_len")) \
        .otherwise(why)
    hexed = pl.col("cdb_hex")
    return pl.when(hexed.is_not_null() & ~hexed.str.contains(r"^(?:[0-9a-fA-F]{2})*$")) \
        .then(pl.lit("CDB bytes are not \\xNN escapes")).otherwise(why)


def _hex(name: str) -> pl.Expr:
    """A buffer strace printed as "\\xNN..." -> hex digits (a truncated one, `"..."...`, keeps its
    prefix); NULL or an address -> null."""
    v = pl.col(name)
    return pl.when(v.str.starts_with('"')).then(v.str.replace_all(r'[\\x".]', ""))


def _decode(c: pl.DataFrame, fd_paths: pl.DataFrame, many_pids: bool) -> pl.DataFrame:
    if not c.height:
        return pl.DataFrame(schema={**COMMANDS, "why": pl.Utf8, "line_no": pl.Int64, "t": pl.Utf8})
    v4 = pl.col("arg").str.starts_with("{guard='Q'")
    c = _fields(c).with_columns(pl.col("fd").alias("fd_text"), _lines.checked_int(pl.col("fd"), 0, 2**31 - 1)
                                .alias("fd"), pl.col("pid").fill_null(-1).alias("_pid"))
    if fd_paths.height:
        c = c.sort("line_no").join_asof(fd_paths.sort("line_no"), on="line_no", by_left=["_pid", "fd"],
                                        by_right=["pid", "fd"], strategy="backward", check_sortedness=False)
        c = c.with_columns(pl.coalesce("path", "opath").alias("path"))
    din, dout = _num("din_xfer_len"), _num("dout_xfer_len")
    resid = pl.when(v4).then(din - _num("din_resid").clip(0, None) + dout - _num("dout_resid").clip(0, None)) \
        .otherwise(_num("dxfer_len") - _num("resid").clip(0, None))
    sense_len = pl.when(v4).then(_num("response_len")).otherwise(_num("sb_len_wr"))
    c = c.with_columns(
        pl.when(v4).then(_hex("request")).otherwise(_hex("cmdp")).alias("cdb_hex"),
        pl.when(v4).then(_num("device_status")).otherwise(_num("status")).alias("scsi_status"),
        pl.when(v4).then(_num("transport_status")).otherwise(_num("host_status")).alias("host"),
        pl.when(sense_len > 0).then(pl.when(v4).then(_hex("response")).otherwise(_hex("sbp"))).alias("sense"),
        pl.when(v4).then(din + dout).otherwise(_num("dxfer_len")).alias("bytes"),
        resid.clip(0, None).alias("data_bytes"),
        pl.when(v4).then(pl.when((din > 0) & (dout > 0)).then(pl.lit("bidi")).when(din > 0).then(pl.lit("in"))
                         .when(dout > 0).then(pl.lit("out")).otherwise(pl.lit("none")))
        .otherwise(pl.col("dxfer_direction").replace_strict(DIRECTIONS, default="unknown")).alias("direction"),
        (_num("duration") * 1_000_000).alias("driver_ns"),
        _lines.seconds_ns(pl.col("dur")).alias("syscall_ns"))
    ok = pl.col("ret") == "0"
    returned = pl.col("ret") != "?"
    fixed = pl.col("sense").str.slice(0, 2).is_in(["70", "71", "f0", "f1"])
    sbyte = lambda k: pl.col("sense").str.slice(2 * k, 2).str.to_integer(base=16, strict=False)  # noqa: E731
    key = pl.when(fixed).then(sbyte(2) & 0x0F).otherwise(sbyte(1) & 0x0F)
    syscall = pl.coalesce("syscall_ns", pl.col("end_t_ns") - pl.col("t_ns"))
    who = (pl.format("pid {} fd {}", "_pid", "fd") if many_pids else pl.format("fd {}", "fd"))
    return c.select(
        pl.coalesce(pl.col("path"), who).alias("device"),
        pl.lit(None, dtype=pl.Int64).alias("tag"),
        pl.col("cdb_hex").str.decode("hex", strict=False).alias("cdb"),   # bad ones: `why`, below
        pl.col("line_no").alias("pos"),
        pl.col("t_ns").alias("start_ns"),
        pl.when(ok).then(pl.col("t_ns") + syscall).alias("end_ns"),
        pl.when(ok).then(pl.when(pl.col("host").fill_null(0) != 0).then(
            pl.col("host").replace_strict(HOST_BYTES, default=None, return_dtype=pl.Utf8)
            .fill_null(pl.format("host 0x{}", pl.col("host"))))
            .otherwise(pl.col("scsi_status").replace_strict(scsi.STATUS_NAMES, default=None, return_dtype=pl.Utf8)))
        .alias("status"),
        pl.when(ok).then(pl.col("host").replace_strict(HOST_BYTES, default=None, return_dtype=pl.Utf8)).alias("host_byte"),
        pl.when(ok).then(None).when(~returned).then(pl.lit("no return (trace ended)"))
        .otherwise(pl.format("ioctl failed ({})", pl.coalesce("errno", "ret"))).alias("reason"),
        pl.when(ok).then(pl.coalesce(syscall, "driver_ns")).alias("response_ns"),
        "bytes", pl.when(ok).then(pl.col("data_bytes")).alias("data_bytes"), "direction",
        key.replace_strict(scsi.SENSE_KEY_NAMES, default=None, return_dtype=pl.Utf8).alias("sense_key"),
        pl.when(fixed).then(sbyte(12)).otherwise(sbyte(2)).alias("asc"),
        pl.when(fixed).then(sbyte(13)).otherwise(sbyte(3)).alias("ascq"),
        pl.when(ok).then(syscall).alias("syscall_ns"), "driver_ns", pl.col("pid"),
        _why_bad().alias("why"), pl.col("line_no"), pl.col("arg").alias("t"))
