"""Synthetic SCSI kernel logs, written the way the kernel prints them (ftrace
`scsi:scsi_dispatch_cmd_*` events; dmesg with scsi_logging_level: "Send:", "CDB:", "Done:"
or "FAILED" lines), for the streaming tests and bench/bench_scsilog.py.

`ftrace_text(events)` and `dmesg_text(events)` write events (t_ns, kind, (host, channel, id,
lun), tag, cdb, status) in order; `bulk_ftrace(path, commands)` and `bulk_dmesg(path,
commands)` write a large log without a Python loop per line (blocks of commands on 8
devices, 32 tags each, overlapping).
"""
from __future__ import annotations

import numpy as np
import polars as pl

NAMES = {0x28: "READ_10", 0x2A: "WRITE_10", 0x00: "TEST_UNIT_READY", 0x12: "INQUIRY"}
HEX = np.array([f"{v:02x}" for v in range(256)])
RESULT = {"GOOD": "driver=DRIVER_OK host=DID_OK message=COMMAND_COMPLETE status=SAM_STAT_GOOD",
          "CHECK CONDITION": "driver=DRIVER_OK host=DID_OK message=COMMAND_COMPLETE status=SAM_STAT_CHECK_CONDITION"}


def _ts(t_ns: int) -> str:
    return f"{t_ns // 10**9}.{t_ns % 10**9 // 1000:06d}"


def ftrace_line(t_ns, kind, dev, tag, cdb: bytes, status="GOOD", rtn=4181) -> str:
    h, c, i, lun = dev
    name = NAMES.get(cdb[0], "UNKNOWN") if cdb else "UNKNOWN"
    line = (f"    kworker/0:1H-44      [000] .....  {_ts(t_ns):>12}: scsi_dispatch_cmd_{kind}: host_no={h} "
            f"channel={c} id={i} lun={lun} data_sgl=6 prot_sgl=0 prot_op=SCSI_PROT_NORMAL driver_tag={tag} "
            f"scheduler_tag={tag} cmnd=({name} raw={cdb.hex(' ')})")
    if kind == "error":
        return line + f" rtn={rtn}"
    if kind in ("done", "timeout"):
        return line + f" result=({RESULT[status]})"
    return line


def ftrace_text(events) -> str:
    return "# tracer: nop\n#\n" + "".join(ftrace_line(*e) + "\n" for e in events)


def dmesg_lines(t_ns, kind, dev, tag, cdb: bytes, status="GOOD", rtn=None) -> list[str]:
    """A Send: or Done:/FAILED event and its CDB: line (dmesg has no dispatch errors)."""
    h, c, i, lun = dev
    head = f"[{_ts(t_ns):>12}] sd {h}:{c}:{i}:{lun}: [sda] tag#{tag} "
    word = {"start": "Send: scmd 0x00000000c37893e6",
            "done": ("Done: SUCCESS Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s" if status == "GOOD"
                     else "FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s"),
            "timeout": "Done: TIMEOUT Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s"}[kind]
    out = [head + word, head + f"CDB: Read(10) {cdb.hex(' ')}"]
    if kind == "done" and status != "GOOD":      # the logging hook's second end of a failed command
        out += [head + "Done: SUCCESS Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s", out[1]]
    return out


def dmesg_text(events) -> str:
    return "".join(line + "\n" for e in events for line in dmesg_lines(*e))


def _bulk_commands(rng, first: int, n: int, t0: int) -> pl.DataFrame:
    """Commands first..first+n of the bulk logs: device, tag, opcode (hex), LBA and its four
    bytes (hex), start and end (ns); 8 devices x 32 tags, 20-400 us each, one every ~50 us."""
    i = np.arange(first, first + n)
    start = t0 + i * 50_000 + rng.integers(0, 20_000, n)
    took = rng.integers(20_000, 400_000, n)
    op = np.where(rng.random(n) < 0.7, "28", "2a")
    lba = rng.integers(0, 1 << 31, n)
    b = [HEX[(lba >> s) & 255] for s in (24, 16, 8, 0)]
    return pl.DataFrame({"dev": i % 8, "tag": (i // 8) % 32, "op": op, "lba": lba, "start": start,
                         "end": start + took, "b0": b[0], "b1": b[1], "b2": b[2], "b3": b[3]})


def bulk_ftrace(path, commands: int, *, seed: int = 1, block: int = 1 << 18) -> int:
    """`commands` READ(10)/WRITE(10) commands (start and done lines, interleaved by time as
    ftrace prints them), 8 devices x 32 tags, 20-400 us each; returns the bytes written."""
    rng = np.random.default_rng(seed)
    written, t0 = 0, 1_000_000_000
    with open(path, "w") as fh:
        fh.write("# tracer: nop\n#\n")
        for first in range(0, commands, block):
            n = min(block, commands - first)
            frame = _bulk_commands(rng, first, n, t0)
            raw = pl.format("{} 00 {} {} {} {} 00 00 40 00", "op", "b0", "b1", "b2", "b3")
            name = pl.when(pl.col("op") == "28").then(pl.lit("READ_10")).otherwise(pl.lit("WRITE_10"))
            common = pl.format("host_no=0 channel=0 id={} lun=0 data_sgl=6 prot_sgl=0 prot_op=SCSI_PROT_NORMAL "
                               "driver_tag={} scheduler_tag={} cmnd=({} lba={} txlen=64 protect=0 raw={})",
                               "dev", "tag", "tag", name, "lba", raw.alias("raw"))
            ts = lambda c: pl.format("{}.{}", pl.col(c) // 10**9,  # noqa: E731
                                     (pl.col(c) % 10**9 // 1000).cast(pl.Utf8).str.zfill(6)).str.pad_start(12)
            lines = pl.concat([
                frame.select(pl.col("start").alias("t"), pl.format("    kworker/0:1H-44      [000] .....  {}: "
                                                                   "scsi_dispatch_cmd_start: {}", ts("start"), common).alias("l")),
                frame.select(pl.col("end").alias("t"), pl.format("          <idle>-0       [000] d.h2.  {}: "
                                                                 "scsi_dispatch_cmd_done: {} result=({})", ts("end"), common,
                                                                 pl.lit(RESULT["GOOD"])).alias("l"))]).sort("t")
            text = "\n".join(lines["l"].to_list()) + "\n"
            fh.write(text)
            written += len(text)
    return written


def bulk_dmesg(path, commands: int, *, seed: int = 1, block: int = 1 << 18) -> int:
    """`commands` READ(10)/WRITE(10) commands as dmesg prints the kernel's SCSI logging
    (scsi_logging_level with MLQUEUE and MLCOMPLETE at level 1: "Send:" and "Done:" lines, each
    followed by its "CDB:" line), 8 devices x 32 tags as `bulk_ftrace`; returns the bytes written."""
    rng = np.random.default_rng(seed)
    written, t0 = 0, 1_000_000_000
    with open(path, "w") as fh:
        for first in range(0, commands, block):
            n = min(block, commands - first)
            frame = _bulk_commands(rng, first, n, t0)
            name = pl.when(pl.col("op") == "28").then(pl.lit("Read(10)")).otherwise(pl.lit("Write(10)"))
            cdb = pl.format("CDB: {} {} 00 {} {} {} {} 00 00 40 00", name, "op", "b0", "b1", "b2", "b3")
            ts = lambda c: pl.format("[{}]", pl.format("{}.{}", pl.col(c) // 10**9,  # noqa: E731
                                     (pl.col(c) % 10**9 // 1000).cast(pl.Utf8).str.zfill(6)).str.pad_start(12))
            head = lambda c: pl.format("{} sd 0:0:{}:0: [sd{}] tag#{} ", ts(c), "dev", "dev", "tag")  # noqa: E731
            lines = pl.concat([
                frame.select(pl.col("start").alias("t"), pl.lit(0).alias("k"),
                             pl.format("{}Send: scmd 0x00000000c37893e6", head("start")).alias("l")),
                frame.select(pl.col("start").alias("t"), pl.lit(1).alias("k"), pl.format("{}{}", head("start"), cdb).alias("l")),
                frame.select(pl.col("end").alias("t"), pl.lit(2).alias("k"),
                             pl.format("{}Done: SUCCESS Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s",
                                       head("end")).alias("l")),
                frame.select(pl.col("end").alias("t"), pl.lit(3).alias("k"), pl.format("{}{}", head("end"), cdb).alias("l")),
            ]).sort("t", "k")
            text = "\n".join(lines["l"].to_list()) + "\n"
            fh.write(text)
            written += len(text)
    return written


# the kernel's names (scsi_logging: drivers/scsi/scsi_logging.c, constants.c) of what
# `completions_log` writes
CDB_NAMES = {0x00: "Test Unit Ready", 0x12: "Inquiry", 0x28: "Read(10)", 0x2A: "Write(10)", 0xA0: "Report luns"}
SENSE = {"Unit Attention": "Power on, reset, or bus device reset occurred",
         "Not Ready": "Logical unit not ready, cause not reportable",
         "Illegal Request": "Invalid field in cdb"}
DISPOSITIONS = ("SUCCESS", "ADD_TO_MLQUEUE", "NEEDS_RETRY")
OTHER_KERNEL = ["zfcp 0.0.1900: Registering port 0x500507630708c1ab failed", "qeth 0.0.f500: MAC address 02:00:00:00:00:01",
                "EXT4-fs (dasda1): mounted filesystem with ordered data mode"]


def completions_log(cmds, *, scan: int = 0, other: bool = False, old: bool = False) -> str:
    """A kernel log of the SCSI logging's completion/error-handling level only, as an s390
    machine with zfcp LUNs writes it: per command (t_ns, (host, channel, id, lun), tag, cdb,
    disposition, sense key or None) a "Done: <disposition> Result: ..." line, its "CDB:" line,
    and for a sense key its "Sense Key :" and "Add. Sense:" lines; no "Send:" lines. `scan`:
    that many `scsi scan:` pairs of lines first; `other`: the shell lines that set the logging
    level first, ordinary kernel lines and unstamped lines (a paste's comments) between; `old`: no tag# and two spaces after the disk name (kernels before 4.x)."""
    out = ["# echo 0x0001b000 > /proc/sys/dev/scsi/logging_level", "# dmesg"] if other else []
    for k in range(scan):
        out.append(f"[{_ts(k * 1000):>12}] scsi 0:0:0:0: scsi scan: INQUIRY pass {k % 2 + 1} length 36")
        out.append(f"[{_ts(k * 1000 + 10):>12}] scsi 0:0:0:0: scsi scan: Sending REPORT LUNS to (try {k})")
    for i, (t_ns, dev, tag, cdb, disp, key) in enumerate(cmds):
        h, c, d, lun = dev
        head = f"[{_ts(t_ns):>12}] sd {h}:{c}:{d}:{lun}: [sda] " + (" " if old else f"tag#{tag} ")
        out.append(head + f"Done: {disp} Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s")
        out.append(head + f"CDB: {CDB_NAMES.get(cdb[0], 'Unknown')} {cdb.hex(' ')}")
        if key is not None:
            # descriptor-format sense adds "[descriptor]"
            out.append(head + f"Sense Key : {key} [current] " + ("[descriptor] " if key == "Illegal Request" else ""))
            out.append(head + f"Add. Sense: {SENSE[key]}")
        if other:
            out.append(f"[{_ts(t_ns + 1):>12}] {OTHER_KERNEL[i % len(OTHER_KERNEL)]}")
            out.append("... (lines cut) ...")
    return "".join(ln + "\n" for ln in out)
