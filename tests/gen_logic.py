"""Writers of logic-analyzer captures for the tests, built to the published layouts:

- DSView `.dsl` (DSView `pv/storesession.cpp`: `meta_gen` writes the `header` ini,
  `save_start` the `decoders` and `session` JSON members, `save_logic` one `L-INDEX/BLOCK`
  member per probe and block, bits least significant first, 2^24 samples per block);
- Saleae Logic 2 digital CSV (`Time [s],NAME,...`, one row per change, times in seconds);
- sigrok `.sr` (srzip: `version`, `metadata`, `logic-1-N`), for hostile variants only: the
  real `.sr` files of the tests come from sigrok-cli.

Captures are given as probe words at change points: `changes(transitions, probes, period)`
turns a `transitions` frame into (sample index, word) pairs for probes {name: bus line}.
"""
from __future__ import annotations

import zipfile

import numpy as np
import polars as pl

from scsitrace import schema

DSL_BLOCK = 1 << 24


def changes(tr: pl.DataFrame, probes: list[tuple[str, str]], period_ns: int, *, low: set[str] = frozenset()):
    """(sample index, word) at each transition; probe k (of `probes`, (name, bus line)) is bit
    k; bus lines named in `low` are written inverted. DB0..DB7 come from the db column."""
    t = tr["t_ns"].to_numpy() - int(tr["t_ns"][0])
    lines = tr["lines"].to_numpy().astype(np.uint64)
    db = tr["db"].fill_null(0).to_numpy().astype(np.uint64)
    words = np.zeros(len(tr), dtype=np.uint64)
    for k, (_, bus) in enumerate(probes):
        if bus.startswith("DB") and bus != "DBP":
            bit = (db >> np.uint64(int(bus[2:]))) & np.uint64(1)
        else:
            bit = (lines >> np.uint64(schema.SIGNAL_BIT[bus])) & np.uint64(1)
        if bus in low:
            bit ^= np.uint64(1)
        words |= bit << np.uint64(k)
    return t // period_ns, words


def expand(idx: np.ndarray, words: np.ndarray, n: int) -> np.ndarray:
    """Every sample's word, from words at change points (the last one holds to sample n)."""
    reps = np.diff(np.append(idx, n))
    return np.repeat(words, reps)


def rate_string(hz: int) -> str:
    """libsigrok's sr_samplerate_string spelling, as both sigrok and DSView write it."""
    for unit, mult in (("GHz", 10**9), ("MHz", 10**6), ("kHz", 10**3)):
        if hz >= mult and hz % mult == 0:
            return f"{hz // mult} {unit}"
    return f"{hz} Hz"


def dsl_header(names: dict[int, str], n: int, hz: int, *, version: int = 3, mode: int = 0,
               blocks: int | None = None) -> str:
    """The `header` member as DSView's meta_gen writes it for a logic capture."""
    blocks = (n + DSL_BLOCK - 1) // DSL_BLOCK if blocks is None else blocks
    out = ["[version]", f"version = {version}", "[header]", "driver = DSLogic", f"device mode = {mode}",
           "capturefile = data", f"total samples = {n}", f"total probes = {len(names)}",
           f"total blocks = {blocks}", f"samplerate = {rate_string(hz)}",
           "trigger time = 1732400000000", "trigger pos = 0"]
    out += [f"probe{i} = {name}" for i, name in sorted(names.items())]
    return "\n".join(out) + "\n"


def write_dsl(path, samples: np.ndarray, names: dict[int, str], hz: int, *, header: str | None = None,
              drop: set[str] = frozenset(), cut: dict[str, int] | None = None) -> None:
    """samples: every sample's word, bit k = probe k of `names` {channel index: name} in order
    (the channel index names the member). `drop` leaves members out, `cut` truncates them
    (hostile files)."""
    n = len(samples)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("header", header if header is not None else dsl_header(names, n, hz))
        zf.writestr("decoders", "[]")
        zf.writestr("session", '{"Version": 3}')
        for k, (index, _) in enumerate(sorted(names.items())):
            bits = ((samples >> np.uint64(k)) & np.uint64(1)).astype(np.uint8)
            for b in range(0, max(n, 1), DSL_BLOCK):
                name = f"L-{index}/{b // DSL_BLOCK}"
                data = np.packbits(bits[b:b + DSL_BLOCK], bitorder="little").tobytes()
                if name in drop:
                    continue
                if cut and name in cut:
                    data = data[:cut[name]]
                zf.writestr(name, data)


def write_saleae_csv(path, t_ns: np.ndarray, words: np.ndarray, names: list[str], *, t0_s: float = 0.0,
                     x_at: dict[int, int] | None = None) -> None:
    """One row per change: time in seconds (9 decimals), each channel's state; `x_at`
    {row: channel} writes X there."""
    lines = ["Time [s]," + ",".join(names)]
    for r, (t, w) in enumerate(zip(t_ns.tolist(), words.tolist())):
        states = [str((w >> k) & 1) for k in range(len(names))]
        if x_at and r in x_at:
            states[x_at[r]] = "X"
        lines.append(f"{t0_s + t / 1e9:.9f}," + ",".join(states))
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write_sr(path, samples: np.ndarray, names: list[str], hz: int, *, unitsize: int = 1,
             chunk_samples: int = 1 << 22, metadata: str | None = None, version: str = "2") -> None:
    """An srzip file as libsigrok writes it (`version`, `metadata`, `logic-1-N`)."""
    md = metadata if metadata is not None else (
        "[global]\nsigrok version=0.5.2\n\n[device 1]\ncapturefile=logic-1\n"
        f"total probes={len(names)}\nsamplerate={rate_string(hz)}\ntotal analog=0\n"
        + "".join(f"probe{k + 1}={name}\n" for k, name in enumerate(names)) + f"unitsize={unitsize}\n")
    raw = samples.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :unitsize].tobytes()
    step = chunk_samples * unitsize
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("version", version)
        zf.writestr("metadata", md)
        for i in range(0, len(raw), step):
            zf.writestr(f"logic-1-{i // step + 1}", raw[i:i + step])


# ---------------------------------------------------------------- hostile sigrok archives
#
# Each case: (name, what the one-line error must say, samples skipped in lenient mode or None
# when lenient mode must fail too).
#   not-zip                 zip magic, then garbage: not a zip archive (byte offset 0)
#   no-metadata             a `version` member only: no 'metadata' member
#   version-3               `version` says 3: a format version this reader does not know
#   no-samplerate           metadata without samplerate: no readable samplerate
#   bad-unitsize            unitsize=0: unitsize must be 1 to 8 bytes
#   no-probes               no probeN entries: no logic probes
#   probe-beyond-unitsize   probe9 in 1-byte samples: does not fit
#   damaged-member          bytes inside logic-1-1's deflate stream overwritten: the member is
#                           named, with the archive offset of its header
#   truncated-archive       the file cut in half (no central directory): not a zip archive
#   partial-sample          2-byte samples, the last chunk one byte short: TruncatedInput when
#                           strict; lenient reads the whole samples and skips one record
HOSTILE_SR = [
    ("not-zip", "not a zip archive", None),
    ("no-metadata", "no 'metadata' member", None),
    ("version-3", "version '3'", None),
    ("no-samplerate", "no readable samplerate", None),
    ("bad-unitsize", "unitsize", None),
    ("no-probes", "no probeN", None),
    ("probe-beyond-unitsize", "does not fit", None),
    ("damaged-member", "member logic-1-1", None),
    ("truncated-archive", "not a zip archive", None),
    ("partial-sample", "end inside a sample", 1),
]
_NAMES = ["BSY", "SEL", "MSG", "CD", "IO"]


def _md(**over) -> str:
    fields = {"capturefile": "logic-1", "total probes": str(len(_NAMES)), "samplerate": "10 MHz",
              "total analog": "0", **{f"probe{k + 1}": n for k, n in enumerate(_NAMES)}, "unitsize": "1"}
    fields.update(over)
    body = "".join(f"{k}={v}\n" for k, v in fields.items() if v is not None)
    return "[global]\nsigrok version=0.5.2\n\n[device 1]\n" + body


def hostile_sr(tmp_path, name: str) -> str:
    path = str(tmp_path / f"{name}.sr")
    words = np.tile(np.array([0, 1, 3, 0x1F, 0], dtype=np.uint64), 2000)
    if name == "not-zip":
        with open(path, "wb") as fh:
            fh.write(b"PK\x03\x04" + b"\x00garbage" * 20)
    elif name == "no-metadata":
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("version", "2")
    elif name in ("version-3", "no-samplerate", "bad-unitsize", "no-probes", "probe-beyond-unitsize"):
        md = {"no-samplerate": _md(samplerate=None), "bad-unitsize": _md(unitsize="0"),
              "no-probes": _md(**{f"probe{k + 1}": None for k in range(len(_NAMES))}),
              "probe-beyond-unitsize": _md(probe9="X")}.get(name, _md())
        write_sr(path, words, _NAMES, 10_000_000, metadata=md, version="3" if name == "version-3" else "2")
    elif name in ("damaged-member", "truncated-archive"):
        write_sr(path, np.arange(5000, dtype=np.uint64) % 32, _NAMES, 10_000_000)
        data = bytearray(open(path, "rb").read())
        if name == "truncated-archive":
            data = data[:len(data) // 2]
        else:
            at = data.index(b"logic-1-1") + len(b"logic-1-1") + 40
            data[at:at + 16] = b"\xff" * 16
        with open(path, "wb") as fh:
            fh.write(data)
    elif name == "partial-sample":
        raw = np.repeat(np.array([0, 1, 3, 0x1F], dtype="<u2"), 100).tobytes()[:-1]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("version", "2")
            zf.writestr("metadata", _md(unitsize="2"))
            zf.writestr("logic-1-1", raw)
    else:
        raise ValueError(name)
    return path
