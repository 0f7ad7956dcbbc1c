"""DSView (DreamSourceLab) logic captures (`.dsl`) -> `transitions` frames.

Layout, as DSView's `pv/storesession.cpp` writes it (`save_start`, `meta_gen`, `save_logic`,
`MakeChunkName`) and its `libsigrok4DSL` session driver reads it back:
- a zip archive whose first member is `header`: an ini file (GKeyFile) with
  `[version]` `version = 3` (2 has the same layout; 1 kept the samples in one `data`
  member, not read here) and `[header]`: `driver`, `device mode` (0 = logic), `capturefile`,
  `total samples`, `total probes`, `total blocks`, `samplerate` (`100 MHz`), `trigger time`,
  `trigger pos`, and `probeN = name` where N is the probe's channel index;
- `decoders` and `session` (JSON, the GUI's state: not needed here);
- `L-N/B`: the samples of probe N in block B (B from 0 to total blocks - 1), one bit per
  sample, least significant bit first, 2^24 samples (2 MiB) per block, the last block
  shorter; every enabled probe has every block (DSView writes a constant block as 0x00 or
  0xff bytes).
Each block's mapped probes are inflated (libdeflate), merged into sample words and reduced
to the changes of the mapped probes (`parsers/_samples.py`), one block at a time.
"""
from __future__ import annotations

import re
import zipfile
from collections import Counter

import numpy as np

from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.model import Capture
from . import _samples
from .sigrok import member_bytes, small_member

ID = "dsview"
SUFFIXES = (".dsl",)
BLOCK_SAMPLES = 1 << 24        # DSView's LogicSnapshot::LeafBlockSamples
FORMAT_VERSIONS = ("2", "3")
LOGIC_MODE = "0"


def sniff(head: bytes) -> bool:
    """A zip whose first member is `header` (DSView writes it first)."""
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        return False
    name_len = int.from_bytes(head[26:28], "little")
    return head[30:30 + name_len] == b"header"


def read_header(path: str, text: str) -> dict[str, dict[str, str]]:
    """GKeyFile text -> {section: {key: value}} (keys and values stripped; `#` comments)."""
    sections: dict[str, dict[str, str]] = {}
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), {})
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise BadInput(path, f"member header, line {n}: expected [section] or key = value", text=line)
        current[key.strip()] = value.strip()
    return sections


def _int(path: str, head: dict, key: str) -> int:
    value = head.get(key)
    if value is None or not re.fullmatch(r"\d+", value):
        raise BadInput(path, f"header: [header] {key!r} missing or not a count", text=value)
    return int(value)


def read_metadata(path: str, zf: zipfile.ZipFile) -> dict:
    if "header" not in zf.namelist():
        raise BadInput(path, "not a DSView file: no 'header' member in the archive", offset=0)
    try:
        ini = read_header(path, small_member(path, zf, "header").decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(path, "header: not UTF-8 text", offset=zf.getinfo("header").header_offset) from None
    version = ini.get("version", {}).get("version")
    if version not in FORMAT_VERSIONS:
        raise BadInput(path, f"header: DSView file format version {version!r} (this reader knows "
                       f"{' and '.join(FORMAT_VERSIONS)})")
    head = ini.get("header")
    if head is None:
        raise BadInput(path, "header: no [header] section")
    mode = head.get("device mode", LOGIC_MODE)
    if mode != LOGIC_MODE:
        raise BadInput(path, f"header: device mode {mode} is not a logic capture (0); oscilloscope and "
                       "analog captures carry no bus lines")
    twice = sorted(n for n, k in Counter(zf.namelist()).items() if k > 1 and n.startswith("L-"))
    if twice:                       # zipfile reads the last copy; which one DSView meant is unknown
        raise BadInput(path, f"sample member(s) {', '.join(twice[:3])} stored twice in the archive (damaged archive)")
    probes = {int(m.group(1)): v for k, v in head.items() if (m := re.fullmatch(r"probe(\d+)", k))}
    total_probes = _int(path, head, "total probes")
    if len(probes) != total_probes:
        raise BadInput(path, f"header: 'total probes = {total_probes}' but {len(probes)} probeN entries")
    if probes and max(probes) >= 64:
        raise BadInput(path, f"header: probe{max(probes)}: channel index beyond 63")
    return {"version": version, "probes": probes, "samples": _int(path, head, "total samples"),
            "blocks": _int(path, head, "total blocks"),
            "rate": _samples.check_rate(path, head.get("samplerate"), "header [header]"),
            "driver": head.get("driver"), "trigger_pos": head.get("trigger pos"),
            "trigger_time": head.get("trigger time")}


class _Reader(_samples.ArchiveReader):
    def _blocks(self, fd: int):
        """A function per block returning its sample words (run in a worker thread). Member
        sizes come from the archive directory, so a missing or short member is found before
        its block is read."""
        total = self.md["samples"]
        bits = sorted(set(self.bus.bit_of.values()))
        with zipfile.ZipFile(self.path) as zf:
            infos = {i.filename: i for i in zf.infolist()}
        for block in range(self.md["blocks"]):
            first = block * BLOCK_SAMPLES
            want = n = min(BLOCK_SAMPLES, total - first)
            if n <= 0:
                break
            members = []
            lost = [f"L-{bit}/{block}" for bit in bits if f"L-{bit}/{block}" not in infos]
            if lost:
                reason = (f"member {', '.join(lost)} missing (block {block} of {self.md['blocks']}: "
                          f"{n} samples)")
                if self.strict:
                    raise BadInput(self.path, reason + "; --lenient reads the other blocks, keeping their time")
                self.cap.notes.append(f"{reason}: the block's samples are lost, their time kept; every figure "
                                      "covers only the samples present")
                yield _samples.gap(n)
                continue
            for bit in bits:
                name = f"L-{bit}/{block}"
                info = infos[name]
                if info.file_size * 8 < n:
                    reason = (f"member {name}: {info.file_size} bytes hold {info.file_size * 8} samples, the "
                              f"header says {want} in this block")
                    if self.strict:
                        raise TruncatedInput(self.path, reason, offset=info.header_offset)
                    self.cap.records.skip(n - info.file_size * 8, [f"{self.path}: {reason}"])
                    n = info.file_size * 8
                members.append((bit, info))
            yield lambda members=members, n=n: self._words(fd, members, n)
            if n < want:
                break

    def _words(self, fd: int, members: list, n: int) -> np.ndarray:
        dtype = np.uint32 if max(b for b, _ in members) < 32 else np.uint64
        words = np.zeros(n, dtype=dtype)
        for bit, info in members:
            raw = member_bytes(self.path, fd, info)
            if self.progress:
                self.progress(info.compress_size)
            probe = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=n, bitorder="little")
            words |= probe.astype(dtype) << dtype(bit)
        return words


def parse(path: str, *, strict: bool = True, progress=None, mapping: dict | None = None,
          active_low: list[str] | None = None, initiator: int = 7, **_opts) -> Capture:
    """Read a DSView `.dsl` logic capture. Raises MissingSignal before decoding when BSY SEL
    MSG C/D I/O cannot be found among the probe names (use --map)."""
    path = str(path)
    try:
        with zipfile.ZipFile(path) as zf:
            md = read_metadata(path, zf)
    except zipfile.BadZipFile as exc:
        raise BadInput(path, f"not a DSView file (not a zip archive: {exc})", offset=0) from None
    bus = _samples.ProbeBus(path, md["probes"], mapping=mapping, active_low=active_low)
    period = _samples.SampleTimes(md["rate"]).period
    meta = {
        **bus.meta(), "initiator": initiator, "tick_ns": float(period),
        "samplerate_hz": float(md["rate"]), "samplerate": _samples.rate_text(md["rate"]),
        "sample_period_ns": float(period), "dsview_version": md["version"], "driver": md["driver"],
        "total_samples": md["samples"], "trigger_pos": md["trigger_pos"],
    }
    cap = Capture(layer="bus", path=path, format=ID, meta=meta, notes=list(bus.notes))
    cap.chunks = _Reader(path, md, bus, cap, strict, progress)
    return cap
