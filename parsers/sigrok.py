"""sigrok session files (`.sr`, written by sigrok-cli and PulseView) -> `transitions` frames.

A session file is a zip archive (libsigrok `src/output/srzip.c`, `src/session_file.c`):
- `version`: the format version, `2` (`1`, from old libsigrok, has the same layout here);
- `metadata`: an ini file; section `[device 1]` holds `capturefile` (the chunk base name,
  `logic-1`), `samplerate` (`1 GHz`, `24 MHz`...), `unitsize` (bytes per sample),
  `total probes` and `probeN = name` (N from 1: probe N is bit N-1 of a sample);
- `logic-1-1`, `logic-1-2`, ...: the samples, `unitsize` bytes each, little-endian, in
  chunks of about 4 MiB (numbered from 1; version 1 may have one `logic-1`).

Chunks are inflated whole (libdeflate) and reduced to the samples where a mapped probe changes
(`parsers/_samples.py`, compiled) in worker threads, a few chunks ahead, both with the GIL
released; the chunks are stitched in order, so memory stays flat whatever the capture length.
"""
from __future__ import annotations

import configparser
import os
import re
import zipfile
from collections import Counter

import deflate
import numpy as np

from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.inert import excerpt
from scsitrace.model import Capture
from . import _samples

ID = "sigrok"
SUFFIXES = (".sr",)


def sniff(head: bytes) -> bool:
    """A zip whose first member is `version` or `metadata` (libsigrok writes `version` first)."""
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        return False
    name_len = int.from_bytes(head[26:28], "little")
    return head[30:30 + name_len] in (b"version", b"metadata")


def _open(path: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise BadInput(path, f"not a sigrok session file (not a zip archive: {exc})", offset=0) from None


def read_metadata(path: str, zf: zipfile.ZipFile) -> dict:
    """The `[device 1]` section and version of a session file, checked."""
    names = set(zf.namelist())
    for member in ("version", "metadata"):
        if member not in names:
            raise BadInput(path, f"not a sigrok session file: no '{member}' member in the archive", offset=0)
    version = small_member(path, zf, "version").decode("ascii", "replace").strip()
    if version not in ("1", "2"):
        raise BadInput(path, f"sigrok session format version {excerpt(version)!r} (this reader knows 1 and 2)",
                       offset=zf.getinfo("version").header_offset)
    ini = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",))
    try:
        ini.read_string(small_member(path, zf, "metadata").decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise BadInput(path, f"metadata: not an ini file ({str(exc).splitlines()[0]})",
                       offset=zf.getinfo("metadata").header_offset) from None
    devices = [s for s in ini.sections() if s.startswith("device ")]
    if "device 1" not in devices:
        raise BadInput(path, "metadata: no [device 1] section", offset=zf.getinfo("metadata").header_offset)
    dev = ini["device 1"]
    where = "metadata [device 1]"
    rate = _samples.check_rate(path, dev.get("samplerate"), where)
    try:
        unitsize = int(dev.get("unitsize", "1"))
    except ValueError:
        unitsize = 0
    if not 1 <= unitsize <= 8:
        raise BadInput(path, f"{where}: unitsize {dev.get('unitsize')!r} (expected 1 to 8 bytes)")
    probes = {}
    for key, value in dev.items():
        m = re.fullmatch(r"probe(\d+)", key.strip())
        if m and int(m.group(1)) >= 1:
            probes[int(m.group(1)) - 1] = value.strip()
    if not probes:
        raise BadInput(path, f"{where}: no probeN = NAME entries (no logic probes)")
    if max(probes) >= unitsize * 8:
        raise BadInput(path, f"{where}: probe{max(probes) + 1} does not fit in unitsize {unitsize}")
    capturefile = dev.get("capturefile", "logic-1").strip()
    if not re.fullmatch(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*", capturefile) or capturefile in ("version", "metadata"):
        raise BadInput(path, f"{where}: capturefile {excerpt(capturefile)!r} is not a sample member name "
                             "(expected e.g. 'logic-1')", offset=zf.getinfo("metadata").header_offset)
    stored = Counter(zf.namelist())
    chunks = sorted((n for n in names if n == capturefile or re.fullmatch(re.escape(capturefile) + r"-\d+", n)),
                    key=lambda n: int(n.rsplit("-", 1)[1]) if n != capturefile else 0)
    analog = dev.get("total analog", "0") or "0"
    if not re.fullmatch(r"\d{1,6}", analog.strip()):
        raise BadInput(path, f"{where}: total analog {excerpt(analog)!r} is not a channel count")
    return {"version": version, "rate": rate, "unitsize": unitsize, "probes": probes,
            "capturefile": capturefile, "chunks": chunks, "devices": len(devices),
            "analog": int(analog), "missing": missing_chunks(chunks, capturefile),
            "duplicates": sorted(n for n in chunks if stored[n] > 1),
            "sigrok_version": ini.get("global", "sigrok version", fallback=None)}


SMALL_MEMBER_BYTES = 1 << 20    # version and metadata: a few hundred bytes in every real file


def small_member(path: str, zf: zipfile.ZipFile, name: str) -> bytes:
    """A small text member (version, metadata), read no further than SMALL_MEMBER_BYTES
    whatever its declared size: a member that inflates past it is not one libsigrok wrote."""
    info = zf.getinfo(name)
    if info.file_size > SMALL_MEMBER_BYTES:
        raise BadInput(path, f"member {name}: {info.file_size} bytes inflated (at most {SMALL_MEMBER_BYTES} "
                             "expected)", offset=info.header_offset)
    with zf.open(info) as fh:
        data = fh.read(SMALL_MEMBER_BYTES + 1)
    if len(data) > SMALL_MEMBER_BYTES:
        raise BadInput(path, f"member {name}: inflates past {SMALL_MEMBER_BYTES} bytes (damaged or hostile "
                             "archive)", offset=info.header_offset)
    return data


def missing_chunks(chunks: list[str], capturefile: str) -> list[int]:
    """The chunk numbers missing between 1 and the last one (libsigrok numbers them from 1,
    without gaps)."""
    numbers = {int(n.rsplit("-", 1)[1]) for n in chunks if n != capturefile}
    return sorted(set(range(1, max(numbers) + 1)) - numbers) if numbers else []


def check_members(path: str, md: dict, strict: bool, notes: list) -> None:
    """Missing and duplicated sample chunks: bad input (strict), or a note (lenient; a
    missing chunk's samples are counted as lost and its time kept, see _Reader)."""
    cf = md["capturefile"]
    if md["duplicates"]:
        what = f"sample member(s) {', '.join(md['duplicates'])} stored twice in the archive"
        if strict:
            raise BadInput(path, what + " (damaged archive; --lenient reads the last copy)")
        notes.append(what + ": the last copy of each was read")
    if md["missing"]:
        names = ", ".join(f"{cf}-{n}" for n in md["missing"])
        if strict:
            raise BadInput(path, f"sample member(s) {names} missing from the archive (their samples are lost; "
                                 "--lenient reads the rest, keeping their time)")
        notes.append(f"sample member(s) {names} missing from the archive: their samples are lost (each counted "
                     "as long as the chunk before it), every figure covers only the samples present")


MAX_MEMBER_BYTES = 256 << 20    # a chunk is inflated whole (libsigrok writes 4 MiB chunks)


def member_bytes(path: str, fd: int, info: zipfile.ZipInfo) -> bytes:
    """One archive member, inflated whole with libdeflate (3 GB/s here, against 0.2-0.3 GB/s
    for zlib on these highly compressed runs) and checked against its CRC-32. Reads with
    pread: worker threads share the file descriptor."""
    where = info.header_offset
    if info.file_size > MAX_MEMBER_BYTES:
        raise BadInput(path, f"member {info.filename}: {info.file_size} bytes inflated, more than this "
                       f"reader takes at once ({MAX_MEMBER_BYTES})", offset=where)
    local = os.pread(fd, 30, where)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise BadInput(path, f"member {info.filename}: no local file header", offset=where)
    skip = int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    raw = os.pread(fd, info.compress_size, where + 30 + skip)
    if len(raw) < info.compress_size:
        raise TruncatedInput(path, f"member {info.filename}: the archive ends inside its data", offset=where)
    if info.compress_type == zipfile.ZIP_STORED:
        data = raw
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        try:
            data = deflate.deflate_decompress(raw, info.file_size)
        except deflate.DeflateError as exc:
            raise BadInput(path, f"member {info.filename}: damaged deflate data ({exc})", offset=where) from None
    else:
        raise BadInput(path, f"member {info.filename}: zip compression method {info.compress_type} "
                       "(expected stored or deflated)", offset=where)
    if len(data) != info.file_size or deflate.crc32(data) != info.CRC:
        raise BadInput(path, f"member {info.filename}: CRC-32 or size does not match the archive "
                       "directory (damaged file)", offset=where)
    return data


class _Reader(_samples.ArchiveReader):
    def _blocks(self, fd: int):
        """A function per chunk returning its sample words (run in a worker thread). A chunk
        that is not whole samples (libsigrok writes whole ones) makes the reading sequential,
        carrying the partial sample over."""
        unitsize = self.md["unitsize"]
        with _open(self.path) as zf:
            infos = [zf.getinfo(name) for name in self.md["chunks"]]
        if all(i.file_size % unitsize == 0 for i in infos[:-1]):
            missing = set(self.md.get("missing") or ())
            for k, info in enumerate(infos):
                number = info.filename.rsplit("-", 1)[1]
                while number.isdigit() and int(number) - 1 in missing:     # lenient: the lost samples' time
                    missing.discard(int(number) - 1)
                    yield _samples.gap(infos[max(k - 1, 0)].file_size // unitsize)
                yield lambda info=info: self._words(fd, info, last=info is infos[-1])
        else:
            yield from self._carried(fd, infos)

    def _words(self, fd: int, info: zipfile.ZipInfo, last: bool) -> np.ndarray:
        unitsize = self.md["unitsize"]
        buf = member_bytes(self.path, fd, info)
        if self.progress:
            self.progress(info.compress_size)
        cut = len(buf) - len(buf) % unitsize
        if cut < len(buf) and last:
            self._partial(len(buf) - cut, info.header_offset)
        return _samples.widen(np.frombuffer(buf, dtype=np.uint8, count=cut), unitsize)

    def _partial(self, nbytes: int, where: int) -> None:
        unitsize = self.md["unitsize"]
        reason = f"the samples end inside a sample ({nbytes} of {unitsize} bytes; last member at this offset)"
        if self.strict:
            raise TruncatedInput(self.path, reason, offset=where)
        self.cap.records.skip(1, [f"{self.path}: byte offset {where}: {reason}"])

    def _carried(self, fd: int, infos: list):
        unitsize = self.md["unitsize"]
        carry = b""
        for info in infos:
            buf = carry + member_bytes(self.path, fd, info)
            cut = len(buf) - len(buf) % unitsize
            carry = buf[cut:]
            words = _samples.widen(np.frombuffer(buf, dtype=np.uint8, count=cut), unitsize)
            yield lambda words=words: words
        if carry:
            self._partial(len(carry), infos[-1].header_offset)


def parse(path: str, *, strict: bool = True, progress=None, mapping: dict | None = None,
          active_low: list[str] | None = None, initiator: int = 7, **_opts) -> Capture:
    """Read a sigrok session file. Raises MissingSignal before decoding when BSY SEL MSG C/D
    I/O cannot be found among the probe names (use --map), BadInput on a damaged archive."""
    path = str(path)
    with _open(path) as zf:
        md = read_metadata(path, zf)
    bus = _samples.ProbeBus(path, md["probes"], mapping=mapping, active_low=active_low)
    period = _samples.SampleTimes(md["rate"]).period
    notes = list(bus.notes)
    check_members(path, md, strict, notes)
    if not md["chunks"]:
        notes.append(f"no sample chunks ({md['capturefile']}-N) in the archive: an empty capture")
    if md["devices"] > 1:
        notes.append(f"{md['devices']} devices in the session file: only [device 1] is read")
    meta = {
        **bus.meta(), "initiator": initiator, "tick_ns": float(period),
        "samplerate_hz": float(md["rate"]), "samplerate": _samples.rate_text(md["rate"]),
        "sample_period_ns": float(period), "unitsize": md["unitsize"],
        "sigrok_version": md["sigrok_version"], "session_version": md["version"],
    }
    cap = Capture(layer="bus", path=path, format=ID, meta=meta, notes=notes)
    cap.chunks = _Reader(path, md, bus, cap, strict, progress)
    return cap
