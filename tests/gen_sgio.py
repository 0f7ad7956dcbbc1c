"""Synthetic strace SG_IO logs, written the way strace 6.x prints them (src/sg_io_v3.c,
src/sg_io_v4.c: entry fields, then exit fields; -f splits a call into `<unfinished ...>` and
`<... ioctl resumed>` halves), for round-trip tests of parsers/sgio.py.

`strace_text(cmds, ts=..., T=..., y=..., f=...)` writes commands (dicts, see `command`) in
time order; a command whose pid has another pid's line inside its call is split.

Hostile lines (`HOSTILE`), each with what the parser must do:
  truncated     an SG_IO line cut inside its struct            -> bad input at that line
  garbage       a line with strace's pid prefix and no call      -> bad input at that line
  cut_call      a syscall line cut before its return            -> bad input at that line
  bad_ret       an SG_IO line whose return value is "= zero"    -> bad input at that line
  (a line with no strace shape at all is the traced program's own output: `with_program_output`)
  other         ioctl(1, TCGETS, ...), openat, read, a signal,
                an exit, "strace: Process N attached"           -> read, skipped by design (no error)
"""
from __future__ import annotations

import re


DIRS = {"none": "SG_DXFER_NONE", "in": "SG_DXFER_FROM_DEV", "out": "SG_DXFER_TO_DEV"}


def command(cdb: bytes, *, pid=None, fd=3, path=None, direction="none", dxfer_len=0, resid=0, status=0,
            host=0, sense=b"", duration_ms=0, start_us=0, syscall_us=100, v4=False, ret="0") -> dict:
    return dict(cdb=cdb, pid=pid, fd=fd, path=path, direction=direction, dxfer_len=dxfer_len, resid=resid,
                status=status, host=host, sense=sense, duration_ms=duration_ms, start_us=start_us,
                syscall_us=syscall_us, v4=v4, ret=ret)


def buf(data: bytes, limit: int = 32) -> str:
    s = '"' + "".join(f"\\x{b:02x}" for b in data[:limit]) + '"'
    return s + "..." if len(data) > limit else s


def x(v: int) -> str:
    return "0" if v == 0 else f"{v:#x}"


def halves(c: dict) -> tuple[str, str]:
    """(entry part after "SG_IO, ", exit part ending with "}") of one call."""
    if c["v4"]:
        din = c["dxfer_len"] if c["direction"] == "in" else 0
        dout = c["dxfer_len"] if c["direction"] == "out" else 0
        entry = (f"{{guard='Q', protocol=BSG_PROTOCOL_SCSI, subprotocol=BSG_SUB_PROTOCOL_SCSI_CMD, "
                 f"request_len={len(c['cdb'])}, request={buf(c['cdb'])}, request_tag=0, request_attr=0, "
                 f"request_priority=0, request_extra=0, max_response_len=32, dout_iovec_count=0, "
                 f"dout_xfer_len={dout}, din_iovec_count=0, din_xfer_len={din}, "
                 f"dout_xferp={buf(bytes(dout)) if dout else 'NULL'}, timeout=60000, flags=0, usr_ptr=0")
        exit_ = (f", response_len={len(c['sense'])}, response={buf(c['sense'])}, "
                 f"din_xferp={buf(bytes(max(din - c['resid'], 0))) if din else 'NULL'}, driver_status=0, "
                 f"transport_status={x(c['host'])}, device_status={x(c['status'])}, retry_delay=0, info=0, "
                 f"duration={c['duration_ms']}, response_len={len(c['sense'])}, "
                 f"din_resid={c['resid'] if din else 0}, dout_resid={c['resid'] if dout else 0}, generated_tag=0}}")
        return entry, exit_
    entry = (f"{{interface_id='S', dxfer_direction={DIRS[c['direction']]}, cmd_len={len(c['cdb'])}, "
             f"cmdp={buf(c['cdb'])}, mx_sb_len=64, iovec_count=0, dxfer_len={c['dxfer_len']}, timeout=60000, flags=0")
    if c["direction"] == "out":
        entry += f", dxferp={buf(bytes(c['dxfer_len']))}"
    exit_ = ""
    if c["direction"] == "in":
        exit_ += f", dxferp={buf(bytes(max(c['dxfer_len'] - c['resid'], 0)))}"
    exit_ += (f", status={x(c['status'])}, masked_status={x(c['status'] >> 1)}, msg_status=0, "
              f"sb_len_wr={len(c['sense'])}, sbp={buf(c['sense'])}, host_status={x(c['host'])}, driver_status=0, "
              f"resid={c['resid']}, duration={c['duration_ms']}, info=0}}")
    return entry, exit_


def stamp(us: int, ts: str | None) -> str:
    if ts is None:
        return ""
    if ts == "ttt":
        return f"{1_700_000_000 + us // 1_000_000}.{us % 1_000_000:06d} "
    sec = 36_000 + us // 1_000_000
    hms = f"{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
    return hms + (f".{us % 1_000_000:06d} " if ts == "tt" else " ")


def strace_text(cmds: list[dict], *, ts: str | None = "tt", T: bool = True, y: bool = False,
                f: str | None = None, other: bool = False) -> str:
    """The log of `cmds` (each pid's calls must not overlap). f: None, "bracket" ([pid N],
    strace on stderr) or "plain" (N, strace -o)."""
    events = []  # (time_us, order, pid, kind, cmd)
    for i, c in enumerate(cmds):
        events.append((c["start_us"], 2 * i, c["pid"], "start", c))
        events.append((c["start_us"] + c["syscall_us"], 2 * i + 1, c["pid"], "end", c))
    events.sort(key=lambda e: (e[0], e[1]))
    lines, open_ = [], {}
    for k, (t, _, pid, kind, c) in enumerate(events):
        who = "" if f is None else (f"[pid {pid:5d}] " if f == "bracket" else f"{pid:<5d} ")
        fd = f"{c['fd']}<{c['path']}>" if y and c["path"] else str(c["fd"])
        entry, exit_ = halves(c)
        ret = "= 0" if c["ret"] == "0" else "= -1 EIO (Input/output error)"
        if c["ret"] != "0":
            exit_ = "}"
        took = f" <{c['syscall_us'] // 1_000_000}.{c['syscall_us'] % 1_000_000:06d}>" if T else ""
        if kind == "start":
            nxt = events[k + 1] if k + 1 < len(events) else None
            whole = nxt is not None and nxt[4] is c
            if whole:
                lines.append(f"{who}{stamp(t, ts)}ioctl({fd}, SG_IO, {entry}{exit_}) {ret}{took}")
            else:
                open_[pid] = c
                lines.append(f"{who}{stamp(t, ts)}ioctl({fd}, SG_IO, {entry} <unfinished ...>")
        elif open_.get(pid) is c:
            del open_[pid]
            lines.append(f"{who}{stamp(t, ts)}<... ioctl resumed>{exit_}) {ret}{took}")
        if other and kind == "end":
            lines.append(f"{who}{stamp(t, ts)}write(1, \"x\\n\", 2) = 2" + (" <0.000010>" if T else ""))
    return "\n".join(lines) + "\n"


HOSTILE = {
    "truncated": "ioctl(3, SG_IO, {interface_id='S', dxfer_direction=SG_DXFER_NONE, cmd_len=6, cmdp=\"\\x00\\x00",
    "garbage": "[pid   12] this is not what strace writes",
    "cut_call": 'openat(AT_FDCWD, "/dev/sg0", O_RDWR',
    "bad_ret": ("ioctl(3, SG_IO, {interface_id='S', dxfer_direction=SG_DXFER_NONE, cmd_len=6, "
                "cmdp=\"\\x00\\x00\\x00\\x00\\x00\\x00\", mx_sb_len=32, iovec_count=0, dxfer_len=0, timeout=60000, "
                "flags=0, status=0, masked_status=0, msg_status=0, sb_len_wr=0, sbp=\"\", host_status=0, "
                "driver_status=0, resid=0, duration=0, info=0}) = zero"),
}
OTHER = [
    "ioctl(1, TCGETS, {c_iflag=ICRNL|IXON, c_oflag=NL0|CR0|TAB0|BS0|VT0|FF0|OPOST|ONLCR, ...}) = 0",
    'openat(AT_FDCWD, "/dev/sg0", O_RDWR|O_NONBLOCK) = 3',
    'read(3, "\\177ELF\\2\\1\\1\\0"..., 832) = 832',
    "--- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=262, si_uid=0, si_status=0} ---",
    "+++ exited with 0 +++",
    "strace: Process 255 attached",
]


# what sg example programs print (sg3_utils examples/sg_simple*.c, sg_turs): lines that are no
# strace output, written by strace without -o between its own lines
PROGRAM_LINES = [
    "Some of the INQUIRY command's results:",
    "    ATA       QEMU HARDDISK     2.5+  [wide=0 sync=0 cmdque=0 sftre=0]",
    "Test Unit Ready successful so unit ready",
    "INQUIRY duration=0 millisecs, resid=0",
    "36 bytes of INQUIRY data",
    "",
    "sense key: Unit Attention",
]


def with_program_output(text: str, inserts: list[tuple[int, str]], indent: str = "", split_write: bool = False) -> str:
    """`text` (strace lines) with program lines inserted: (index of the strace line it follows,
    -1: before the first; the program line); every line prefixed by `indent` (an excerpt
    pasted indented). `split_write`: the program's first line comes as a terminal shows it when
    strace and the program share it: strace's `write(1, ...` entry, the program's text on the
    same line, then `) = N` on the next line (two strace lines, one of them holding the program
    text)."""
    lines = text.splitlines()
    out = [ln for i, ln in enumerate(lines) for ln in [ln] + [p for at, p in inserts if at == i]]
    out = [p for at, p in inserts if at < 0] + out
    if split_write:
        msg = PROGRAM_LINES[0]
        who = re.match(r"(\[pid\s+\d+\] )?", out[0])[0]
        out[1:1] = [f'{who}write(1, "{msg[:20]}"..., {len(msg) + 1}{msg}', f") = {len(msg) + 1}"]
    return "".join(f"{indent}{ln}\n" if ln else "\n" for ln in out)
