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
strace's lines split into their parts: `parsers/_strace_lines.py`; the SG_IO struct decoded:
`parsers/_sgio_struct.py`; here: the stream, block by block, and what each line is.

Hands over a ready-made `commands` frame (the kernel-log layer's command table, plus the
columns of `scsitrace.scsilog.COMMAND_EXTRA`) and an empty `events` frame.
"""
from __future__ import annotations

import re

import numpy as np
import polars as pl

from scsitrace import schema, scsi
from scsitrace.errors import BadInput
from scsitrace.model import Capture, LazyFrames, RecordCount
from scsitrace.scsilog.events import EVENTS
from scsitrace.streams import started
from . import _lines, _sg3_verbose, _sgio_struct, _strace_lines
from ._sgio_struct import COMMANDS

ID = "sgio"
SUFFIXES = (".strace", ".strace.txt", ".sg3.txt")

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

def sniff(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    return bool(SNIFF.search(text)) or _sg3_verbose.sniff(text)


NATIVE_SG3 = True       # sg3_utils output through the compiled reader (False: the patterns' path, the tests' reference)
# smaller blocks than the line layer's keep the reader's peak flat at the same CPU (parser alone,
# 16x: sg3_utils 395 MB 0.29 GiB at 8 MiB, 0.92 at 32; strace 468 MB 0.26 GiB, 0.71)
BLOCK_BYTES = 8 << 20
HOLD = 1 << 20          # commands held back behind a call waiting for its resumed half, at most
HEAD_BYTES = 8 << 20     # the head read to tell strace from sg3_utils output, and one process from several


def parse(path, *, strict: bool = True, progress=None, chunk_bytes: int | None = None, **_opts) -> Capture:
    """A streaming capture: `chunks()` yields the `commands` of each block of lines as it is
    read (an SG_IO call split by -f waits for its resumed half, an sg3_utils command for the
    line after its output); the first block is read here, the rest as the analysis consumes
    them. `frames["commands"]` reads the whole log (tests, `convert`)."""
    path = str(path)
    cap = Capture(layer="scsilog", path=path, format=ID, records=RecordCount(), meta={"origin_ns": 0, "position_unit": "line"})
    with open(path, "rb") as fh:
        head = fh.read(65536).decode("utf-8", "replace")
    sg3 = not SNIFF.search(head) and _sg3_verbose.sniff(head)
    if chunk_bytes is None:
        chunk_bytes = BLOCK_BYTES
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
    for buf, _ in _lines.iter_byte_blocks(path, block_bytes=HEAD_BYTES, count_lines=False):
        cut = _strace_lines.split_block(buf, 1)
        g = _classify(_text(_lines._block_frame(buf, path, 1, False)), None) if cut is None else \
            _classify(cut[1].select("line_no", "t"), None, cut[1])
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
        if self.sg3 and NATIVE_SG3:
            yield from self._sg3_native(cap, progress)
            return
        line_no = 1
        for buf, _ in _lines.iter_byte_blocks(self.path, block_bytes=self.chunk_bytes, progress=progress,
                                              count_lines=False, views=True, strict=self.strict):
            cut = None if self.sg3 else _strace_lines.split_block(buf, line_no, self)
            lines = _sg3_verbose.scan(buf, self.path, line_no, self.strict) if self.sg3 else \
                _text(_lines._block_frame(bytes(buf), self.path, line_no, self.strict)) if cut is None else \
                cut[1].select("line_no", "t")
            line_no += lines.height
            records.read += lines.height
            out = self._sg3(lines, records, False) if self.sg3 else \
                _strace(lines, self, records, False, None if cut is None else cut[1])
            out = self._release(out, False)
            if out.height:
                yield self._out(out, cap)
        out = self._sg3(None, records, True) if self.sg3 else _strace(None, self, records, True)
        out = self._release(out, True)
        if out.height:
            yield self._out(out, cap)
        cap.notes[:] = self._notes()
        cap.meta.update(self._meta())

    def _sg3_native(self, cap: Capture, progress):
        """sg3_utils output through the compiled reader (`native/src/text/sg3.rs`
        `Sg3Reader`): each block's lines read and folded into commands in one pass, the last
        command (its notes may follow in the next block) and the device opened kept there; a
        block it declines (a NUL, a byte that is not ASCII) read by the patterns first."""
        from scsitrace._native import text
        reader = text.Sg3Reader(1, [scsi.SENSE_KEY_NAMES[k] for k in range(16)], scsi.STATUS_NAMES[0x02])
        line_no = 1
        for buf, _ in _lines.iter_byte_blocks(self.path, block_bytes=self.chunk_bytes, progress=progress,
                                              count_lines=False, views=True, strict=self.strict):
            got = reader.block(np.frombuffer(buf, np.uint8))
            if got is None:
                rows = _sg3_verbose.scan(buf, self.path, line_no, self.strict).sort("line_no")
                got = reader.fields(rows.with_columns(pl.col("hint", "raw_header").cast(pl.Int64)))
            line_no += got.lines
            yield from self._sg3_out(got, cap)
        yield from self._sg3_out(reader.finish(), cap)
        cap.notes[:] = self._notes()
        cap.meta.update(self._meta())

    def _sg3_out(self, got, cap: Capture):
        cmds, other = _sg3_verbose.read_block(got, self.path, self.strict, cap.records, _bad)
        self.other += other
        if cmds.height:
            yield self._out(cmds, cap)

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
            cdb = lines.filter(pl.col("cdb").is_not_null())["line_no"]
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


def _classify(lines: pl.DataFrame, st, split: pl.DataFrame | None = None) -> pl.DataFrame:
    """Each line split (`_strace_lines.split`, or `split` already, in line order, its SG_IO
    calls classified by the Rust cut: `_kind`) and given its kind: whole, unfinished or resumed
    SG_IO, other (read, skipped by design), program (the traced program's own output, strace
    without -o: read, skipped by design), bad (a broken SG_IO line) or alien (a broken strace
    line). Rows in line order."""
    g = _strace_lines.split(lines, st) if split is None else split
    body = pl.col("body")
    # each kind from the few columns it reads, on its own rows only: a rule's patterns never
    # run on a line it cannot be about, and no row of the wide frame moves
    if "_kind" in g.columns:
        called = g["_kind"].is_not_null()
        sg = g["_kind"].filter(called).alias("kind")
        g = g.drop("_kind")
    else:
        called = g.select(pl.col("sg") | body.str.starts_with("<... ioctl resumed>")).to_series()
        sg = _call_kinds(g.select("sg", "fd", "ret", "arg", "body").filter(called))
    # a damaged line (a NUL, bytes that are not UTF-8) is bad wherever it is
    strace_shaped = (pl.col("pid_b").is_not_null() | pl.col("ts").is_not_null() | body.str.contains(STRACE_SHAPED)
                     | _lines.bad_bytes(pl.col("t")))
    rest = g.select("pid_b", "ts", "body", "t").filter(~called).select(
        pl.when(body.str.contains(STRACE_OTHER)).then(pl.lit("other")).when(strace_shaped).then(pl.lit("alien"))
        .otherwise(pl.lit("program")).alias("kind")).to_series()
    kind = sg if not rest.len() else rest if not sg.len() else \
        pl.Series("kind", [None] * g.height, dtype=pl.Utf8).scatter(called.arg_true(), sg) \
        .scatter((~called).arg_true(), rest)
    g = g.with_columns(kind)
    return g if split is not None else g.sort("line_no")


def _call_kinds(calls: pl.DataFrame) -> pl.Series:
    """What each SG_IO call (`sg`) or ioctl resumed half of `calls` (sg, fd, ret, arg, body)
    is, for the blocks the Rust cut declines (its `call_kind` for the others): whole,
    unfinished, bad; resumed (with its return) or other (without)."""
    arg, body = pl.col("arg"), pl.col("body")
    return calls.select(
        pl.when(pl.col("sg") & pl.col("fd").is_not_null() & pl.col("ret").is_not_null()
                & ((arg.str.starts_with("{") & arg.str.ends_with("}")) | arg.str.contains(r"^(?:0x[0-9a-f]+|NULL)$")))
        .then(pl.lit("whole"))
        .when(pl.col("sg") & pl.col("fd").is_not_null() & body.str.ends_with(" <unfinished ...>")
              & arg.str.starts_with("{")).then(pl.lit("unfinished"))
        .when(~pl.col("sg") & pl.col("ret").is_not_null()).then(pl.lit("resumed"))
        .when(~pl.col("sg")).then(pl.lit("other"))        # an ioctl resumed half without its result
        .otherwise(pl.lit("bad")).alias("kind")).to_series()


SLIM = ("line_no", "pid", "t_ns", "ts", "fd", "path", "arg", "ret", "errno", "dur", "kind", "opens", "closes")


def _strace(lines: pl.DataFrame | None, st: _Commands, records: RecordCount, final: bool,
            split: pl.DataFrame | None = None) -> pl.DataFrame:
    """The SG_IO commands of one block of strace lines (`final`: the log has ended: calls still
    waiting for their resumed half have no return)."""
    body = pl.col("body")
    if lines is not None and lines.height:
        if split is None:      # (the Rust cut takes no block with a NUL or a byte that is not ASCII)
            damaged = _lines.bad_bytes(pl.col("t"))     # a NUL or non-UTF-8 bytes: one bad record, never "other"
            _bad(lines.filter(damaged).with_columns(pl.lit("NUL byte or bytes that are not UTF-8 in a log line")
                                                    .alias("why")), st.path, st.strict, records)
            lines = lines.filter(~damaged)
        g = _classify(lines, st, split)
        prefixed = pl.col("prefix_why").is_not_null() & (pl.col("kind") != "program")
        _bad(g.filter(prefixed).with_columns(pl.col("prefix_why").alias("why")), st.path, st.strict, records)
        g = g.filter(~prefixed)
        _bad(g.filter(pl.col("kind").is_in(["bad", "alien"])).with_columns(
            pl.when(pl.col("kind") == "bad").then(pl.lit("malformed SG_IO ioctl line (expected "
                                                         "ioctl(FD, SG_IO, {...}) = RET)"))
            .otherwise(pl.lit("malformed strace line")).alias("why")), st.path, st.strict, records)
        g = g.filter(~pl.col("kind").is_in(["bad", "alien"]))
        st.by_design["program output"] += int((g["kind"] == "program").sum())
        g = g.filter(pl.col("kind") != "program")
        opens = _strace_lines.fd_paths(g)
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
    calls, resumed_sg, st.held = _strace_lines.pairs(g, final)
    cmds = pl.concat([whole, calls], how="diagonal_relaxed").sort("line_no")
    # resumed halves not joined to an SG_IO start: other ioctls' (or the trace began mid-call)
    st.by_design["other syscalls"] += int((g["kind"] == "resumed").sum()) - resumed_sg
    st.timed |= bool(cmds.height and cmds["dur"].is_not_null().any())
    fd_paths = st.fd_paths if st.fd_paths is not None else pl.DataFrame(
        schema={"line_no": pl.Int64, "pid": pl.Int64, "fd": pl.Int64, "opath": pl.Utf8})
    out = _sgio_struct.decode(cmds, fd_paths, st.many)
    _bad(out.filter(pl.col("why").is_not_null()), st.path, st.strict, records)
    return out.filter(pl.col("why").is_null()).drop("why", "line_no", "t")
