"""Generator of the fault corpus: what a hostile user or a failing machine does to the outputs,
the inputs around them and the text inside them, run by tests/test_faults.py.

Every case is a command line over files written here, and what must happen:
- the exit status (`status`), and for exit 2 one line on stderr `scsitrace: ...` holding
  `message`, no traceback;
- every input file's bytes unchanged (sha256 before and after);
- no file under an output's final name that was not there before, unless the case says
  the command succeeds (`creates`), and no temporary left beside it (`.NAME.*.part`);
- `check(dir, stdout, stderr)` for what a case asserts beyond that (stdout CSV, escapes).

Outputs (issue 30, item 1; issue 28, item 6):
  out-is-input          analyze T --ios T (the log would become a CSV)
  out-is-hardlink       analyze T --json H, H a hard link of T
  out-is-symlink        convert T -o L, L a symbolic link to T
  out-is-sibling        analyze b.blktrace.0 --ios b.blktrace.1 (a per-CPU file of the input)
  out-joins-capture     analyze b.blktrace.0 --json b.blktrace.7 (a new file the next read
                        would take for a CPU's file)
  annotate-onto-input   annotate t.vcd -o t.vcd
  out-dir-missing       --ios /nonexistent/dir/x.parquet: refused before the analysis (no
                        table printed)
  out-is-directory      --json DIR
  out-in-procfs         --json /proc/x.json: a directory access() calls writable for root where
                        no file can be made: refused before the analysis (the temporary is
                        created and removed first)
  out-under-a-file      --ios FILE/x.csv, batch -o FILE/ds (batch-under-a-file): not a directory
  two-stdout            --json - --ios -: one output may be standard output
  ios-to-stdout         --ios -: the CSV on standard output, no file named `-`
  batch-foreign-dir     batch -o DIR where DIR holds other files: refused, files kept
  batch-holds-input     batch --manifest M whose trace lies inside -o DIR
Inert text (item 2):
  escape-in-names       a blktrace whose process names are `=cmd|' '!A1` and `@` ESC ] 0 ;
                        ... BEL: no ESC byte on stdout, `\\x1b` shown; the --ios CSV cells
                        begin with `'`
  escape-in-filename    a trace file named with ESC ] 0 ; ... BEL: the header shows `\\x1b`
  missing-escape-name   a missing file named with ESC: the error line shows `\\x1b`
  junit-escape          regress --junit over that file (no baseline): the report line shows
                        `\\x1b`, the JUnit XML is well formed
  manifest-outside      a manifest naming ../x: refused without --allow-outside
  manifest-date-label   a manifest label holding a TOML date: the dataset is written (the
                        label as text), not an internal error after every trace ran
Not regular files, bounded reads (item 3):
  fifo-sibling          b.blktrace.1 a FIFO beside b.blktrace.0
  manifest-fifo         batch --manifest FIFO
  regress-fifo          regress FIFO.json T
  manifest-dev-zero     batch --manifest /dev/zero
  baselines-fifo        regress --baselines DIR where DIR/x.baseline.json is a FIFO: that
                        baseline reported bad (exit 2), nothing hangs
  out-is-manifest-trace regress --manifest M --junit T, T a trace M names
  regress-dev-zero      regress /dev/zero T
Values read from files (item 4):
  sr-rate-tiny          .sr samplerate 0.000000001 Hz
  sr-rate-huge          .sr samplerate 99999999999999999999 GHz
  sr-analog-abc         .sr `total analog=abc`
  saleae-time-huge      Saleae CSV times 1e300, -1e10
  strace-T-huge         strace `-T <99999999999999999999.000000>`
  strace-duration-neg   SG_IO `duration=-5`
  strace-resid-over     SG_IO `resid` larger than `dxfer_len`
  strace-fd-huge        SG_IO on fd 99999999999999999999
  strace-nul            a NUL inside `SG_IO`: a bad record, not a line of another syscall
  strace-clock-bad      a -t time of day 25:61:61
  strace-pid-huge       a -f pid past int64
  parquet-initiator     transitions Parquet whose metadata says initiator 999
  parquet-null-t        a null t_ns row
  parquet-reverse       transitions in reverse time (lenient: never a negative elapsed time)
Bounded lines (item 3: a 10 GB file without newlines, a valid trace with a 10 GiB NUL tail;
sparse files, no disk):
  no-newline-FMT        10 GiB of NULs named --format FMT, for the readers that read a
                        header line by line (ancot, vcd, saleae): line 1 is longer than the
                        bound (256 MiB), read no further
  long-tail-FMT         a valid trace of every text format (ancot, VCD, Saleae, QEMU, blkparse,
                        usbmon, ftrace, dmesg, strace, sg3_utils) followed by 10 GiB of NULs:
                        strict, exit 2 naming the line after the last record
  long-line-FMT-lenient a 300 MiB line in the middle: lenient, exit 0, that line one skipped
                        record (named by its line), the records after it read
Archive members (item 5):
  sr-missing-chunk      .sr without logic-1-2 of 3 chunks (strict: exit 2; lenient: exit 0,
                        a note, and the capture's full length)
  sr-duplicate-chunk    .sr with logic-1-1 stored twice
  sr-capturefile-version  capturefile=version
  sr-metadata-bomb      metadata inflating to 4 MiB (compressed to a few KB)
  sr-version-long       a 10 KB version member: the error line stays short
  dsl-header-bomb       .dsl whose header inflates to 4 MiB
  dsl-duplicate-member  .dsl with L-0/0 stored twice
"""
from __future__ import annotations

import hashlib
import os
import shutil
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ANCOT = ROOT / "fixtures" / "examples" / "table3-slice.ancot"
VCD = ROOT / "fixtures" / "bus" / "random4k-vcd-l1" / "trace.vcd"
ESC_TITLE = "\x1b]0;PWNED\x07\x1b[2J"


@dataclass
class Case:
    name: str
    argv: list[str]
    status: int
    message: str | None = None          # what the one exit-2 line holds
    inputs: list[str] = field(default_factory=list)    # files whose bytes must not change
    outputs: list[str] = field(default_factory=list)   # final names: no new file, no temporary
    creates: list[str] = field(default_factory=list)   # outputs the command must write whole
    check: object = None                # check(directory, stdout, stderr) -> None
    lenient: "Case | None" = None       # the same files with --lenient, when it differs
    one_line: bool = True               # exit 2 is one line on stderr (False: a corpus report on stdout)
    gap: str | None = None              # a known gap (expected to fail, strictly: its fix ends the mark)


def sha256(path) -> str | None:
    """The checksum of a file's bytes, holes included: data segments are hashed with their
    offsets (SEEK_DATA / SEEK_HOLE), a hole reads as NULs, so a 10 GiB sparse input costs its
    data only, and a byte written anywhere changes the sum."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            h = hashlib.sha256(str(size).encode())
            for start, end in _data_segments(fh, size):
                fh.seek(start)
                h.update(str(start).encode())
                left = end - start
                while left > 0:
                    chunk = fh.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    h.update(chunk)
                    left -= len(chunk)
            return h.hexdigest()
    except OSError:
        return None


def _data_segments(fh, size: int) -> list[tuple[int, int]]:
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    out, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fh.fileno(), pos, os.SEEK_DATA)
        except OSError:         # ENXIO: only a hole from here on
            break
        end = os.lseek(fh.fileno(), start, os.SEEK_HOLE)
        out.append((start, end))
        pos = end
    return out


def _copy(src, d: Path, name: str) -> str:
    dst = d / name
    shutil.copy(src, dst)
    return str(dst)


def _blktrace(d: Path, base: str, names: dict | None = None, cpus: int = 1) -> list[str]:
    import gen_blktrace as gb
    ev = gb.workload(40)
    if names is not None:
        data = gb.encode(ev, names=names)
        path = d / f"{base}.blktrace.0"
        path.write_bytes(data)
        return [str(path)]
    ev["cpu"] = ev["cpu"] % cpus
    return gb.write(ev, str(d / base))


def _sr(path: Path, chunks: int = 3, chunk_samples: int = 4000, metadata: str | None = None,
        drop: tuple = (), twice: tuple = (), version: str = "2", rate: str = "10 MHz",
        analog: str = "0") -> str:
    """A level-1 bus capture as an srzip file (gen_logic.write_sr's layout), in `chunks`
    members of `chunk_samples`; members in `drop` left out, those in `twice` stored twice."""
    names = ["BSY", "SEL", "MSG", "CD", "IO"]
    n = chunks * chunk_samples
    words = np.zeros(n, dtype=np.uint64)
    for k in range(0, n - 400, 400):           # a selection, command, status each 400 samples
        words[k + 50:k + 100] = 0b00010 | 0b00001          # SEL (+BSY)
        words[k + 100:k + 200] = 0b00001 | 0b01000         # BSY + C/D: COMMAND
        words[k + 200:k + 300] = 0b00001 | 0b01000 | 0b10000   # STATUS
        words[k + 300:k + 350] = 0b00001 | 0b00100 | 0b01000 | 0b10000   # MESSAGE IN
    md = metadata if metadata is not None else (
        "[global]\nsigrok version=0.5.2\n\n[device 1]\ncapturefile=logic-1\n"
        f"total probes=5\nsamplerate={rate}\ntotal analog={analog}\n"
        + "".join(f"probe{k + 1}={name}\n" for k, name in enumerate(names)) + "unitsize=1\n")
    raw = words.astype(np.uint8).tobytes()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("version", version)
        zf.writestr("metadata", md)
        for i in range(chunks):
            name = f"logic-1-{i + 1}"
            if name in drop:
                continue
            for _ in range(2 if name in twice else 1):
                with warnings.catch_warnings():     # zipfile warns of the duplicate it is asked for
                    warnings.simplefilter("ignore")
                    zf.writestr(name, raw[i * chunk_samples:(i + 1) * chunk_samples])
    return str(path)


def _no_esc(d, out, err):
    assert "\x1b" not in out and "\x1b" not in err, "a raw ESC reached the terminal"


def _has_shown_escape(d, out, err):
    _no_esc(d, out, err)
    assert "\\x1b" in out + err, "the escape is not shown as \\x1b"


def _csv_neutralised(d, out, err):
    _has_shown_escape(d, out, err)
    import polars as pl
    ios = pl.read_csv(d / "ios.csv", infer_schema_length=0)
    procs = set(ios["process"].drop_nulls())
    formula = [p for p in procs if p[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert not formula, f"CSV cells a spreadsheet would run: {formula}"
    assert procs == {"'=cmd|' '!A1", "'@\x1b]0;PWN\x07"}, procs


def _csv_on_stdout(d, out, err):
    assert out.startswith("io,"), out[:80]
    assert not (d / "-").exists(), "a file named '-' was written"


def _fifo_reported(d, out, err):
    assert "Traceback" not in err
    assert "x.baseline.json" in out and "FIFO" in out, out


def _printed_nothing(d, out, err):
    assert out == "", f"the analysis ran before the output was refused: {out[:200]!r}"


def _lenient_sr_keeps_time(d, out, err):
    import json
    s = json.loads(out)
    assert any("logic-1-2" in n and "missing" in n for n in s["notes"]), s["notes"]
    assert s["elapsed_ns"] >= 3 * 4000 * 100 - 400 * 100, s["elapsed_ns"]   # three chunks at 10 MHz


STRACE_GAPS: dict[str, str] = {}   # strace cases known to fail (none since _strace_lines checks the prefix)


def cases(d: Path) -> list[Case]:
    """Every case, its files written under `d`."""
    d = Path(d)
    out: list[Case] = []
    t = _copy(ANCOT, d, "t.ancot")

    out.append(Case("out-is-input", ["analyze", t, "--ios", t], 2, "names an input", inputs=[t]))
    hard = d / "hard.json"
    os.link(t, hard)
    out.append(Case("out-is-hardlink", ["analyze", t, "--json", str(hard)], 2, "names an input",
                    inputs=[t, str(hard)]))
    link = d / "link.parquet"
    os.symlink(t, link)
    out.append(Case("out-is-symlink", ["convert", t, "-o", str(link)], 2, "names an input", inputs=[t]))
    sib = _blktrace(d, "sib", cpus=2)
    out.append(Case("out-is-sibling", ["analyze", sib[0], "--ios", sib[1]], 2, "names an input", inputs=sib))
    out.append(Case("out-joins-capture", ["analyze", sib[0], "--json", str(d / "sib.blktrace.7")], 2,
                    "names an input", inputs=sib, outputs=[str(d / "sib.blktrace.7")]))
    v = _copy(VCD, d, "t.vcd")
    out.append(Case("annotate-onto-input", ["annotate", v, "-o", v], 2, "names an input", inputs=[v]))
    out.append(Case("out-dir-missing", ["analyze", t, "--ios", str(d / "nonexistent" / "x.parquet")], 2,
                    "no such directory", inputs=[t], outputs=[str(d / "nonexistent" / "x.parquet")],
                    check=_printed_nothing))
    out.append(Case("out-in-procfs", ["analyze", t, "--json", "/proc/scsitrace-fault.json"], 2, "cannot write",
                    inputs=[t], outputs=["/proc/scsitrace-fault.json"], check=_printed_nothing))
    (d / "afile").write_text("a file where a directory is expected\n")
    out.append(Case("out-under-a-file", ["analyze", t, "--ios", str(d / "afile" / "x.csv")], 2, "not a directory",
                    inputs=[t, str(d / "afile")], check=_printed_nothing))
    out.append(Case("batch-under-a-file", ["batch", t, "-o", str(d / "afile" / "ds"), "-j", "0"], 2,
                    "not a directory", inputs=[t, str(d / "afile")]))
    (d / "adir").mkdir()
    out.append(Case("out-is-directory", ["analyze", t, "--json", str(d / "adir")], 2, "is a directory",
                    inputs=[t], check=_printed_nothing))
    out.append(Case("two-stdout", ["analyze", t, "--json", "-", "--ios", "-"], 2, "standard output",
                    inputs=[t], check=_printed_nothing))
    out.append(Case("ios-to-stdout", ["analyze", t, "--ios", "-"], 0, inputs=[t], check=_csv_on_stdout))
    foreign = d / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    out.append(Case("batch-foreign-dir", ["batch", t, "-o", str(foreign), "-j", "0"], 2,
                    "not a scsitrace dataset", inputs=[t, str(foreign / "notes.txt")]))
    ds = d / "ds"
    ds.mkdir()
    inner = _copy(ANCOT, ds, "inner.ancot")
    man = d / "inner.toml"
    man.write_text('[[trace]]\npath = "ds/inner.ancot"\n')
    out.append(Case("batch-holds-input", ["batch", "--manifest", str(man), "-o", str(ds), "-j", "0"], 2,
                    "holds", inputs=[inner, str(man)]))

    names = {4242: "=cmd|' '!A1", 4243: "@\x1b]0;PWN\x07"}     # the workload's two processes
    esc = _blktrace(d, "esc", names=names)
    out.append(Case("escape-in-names", ["analyze", esc[0], "--ios", str(d / "ios.csv")], 0, inputs=esc,
                    creates=[str(d / "ios.csv")], check=_csv_neutralised))
    weird = _copy(ANCOT, d, f"x{ESC_TITLE}.ancot")
    out.append(Case("escape-in-filename", ["analyze", weird], 0, inputs=[weird], check=_has_shown_escape))
    jdir = d / "jbase"
    jdir.mkdir()

    def junit_well_formed(_, out, err):
        import xml.etree.ElementTree as ET
        _has_shown_escape(_, out, err)
        case = ET.parse(d / "gate.xml").getroot().find(".//testcase")
        assert "\\x1b" in case.get("classname"), case.attrib

    out.append(Case("junit-escape", ["regress", "--baselines", str(jdir), weird, "--junit", str(d / "gate.xml"),
                                     "-j", "0"], 2, inputs=[weird], one_line=False, creates=[str(d / "gate.xml")],
                    check=junit_well_formed))
    out.append(Case("missing-escape-name", ["analyze", str(d / f"gone{ESC_TITLE}.ancot")], 2, "\\x1b",
                    check=_has_shown_escape))
    dated = d / "dated.toml"
    dated.write_text('[[trace]]\npath = "t.ancot"\nlabels = {when = 2024-01-02, at = 2024-01-02T03:04:05Z}\n')

    def dates_kept(_, out, err):
        import polars as pl
        row = pl.read_parquet(d / "dated" / "summary.parquet").row(0, named=True)
        assert row["status"] == "ok" and row["label.when"] == "2024-01-02", row

    out.append(Case("manifest-date-label", ["batch", "--manifest", str(dated), "-o", str(d / "dated"), "-j", "0"], 0,
                    inputs=[t, str(dated)], creates=[str(d / "dated")], outputs=[str(d / "dated")],
                    check=dates_kept))
    sub = d / "sub"
    sub.mkdir()
    outside = sub / "out.toml"
    outside.write_text('[[trace]]\npath = "../t.ancot"\n')
    out.append(Case("manifest-outside", ["batch", "--manifest", str(outside), "-o", str(d / "o1"), "-j", "0"],
                    2, "outside the manifest's directory", inputs=[t, str(outside)], outputs=[str(d / "o1")]))

    fb = _blktrace(d, "fifo", cpus=1)
    os.mkfifo(d / "fifo.blktrace.1")
    out.append(Case("fifo-sibling", ["analyze", fb[0]], 2, "FIFO", inputs=fb))
    os.mkfifo(d / "m.toml")
    out.append(Case("manifest-fifo", ["batch", "--manifest", str(d / "m.toml"), "-o", str(d / "o2"), "-j", "0"],
                    2, "FIFO", outputs=[str(d / "o2")]))
    os.mkfifo(d / "b.json")
    out.append(Case("regress-fifo", ["regress", str(d / "b.json"), t], 2, "FIFO", inputs=[t]))
    out.append(Case("manifest-dev-zero", ["batch", "--manifest", "/dev/zero", "-o", str(d / "o3"), "-j", "0"],
                    2, "device", outputs=[str(d / "o3")]))
    bdir = d / "baselines"
    bdir.mkdir()
    os.mkfifo(bdir / "x.baseline.json")
    out.append(Case("baselines-fifo", ["regress", "--baselines", str(bdir), "-j", "0"], 2, inputs=[t],
                    one_line=False, check=_fifo_reported))
    mt = d / "mt.toml"
    mt.write_text('[[trace]]\npath = "t.ancot"\n')
    out.append(Case("out-is-manifest-trace", ["regress", "--baselines", str(bdir), "--manifest", str(mt),
                                              "--junit", t, "-j", "0"], 2, "names an input", inputs=[t, str(mt)]))
    out.append(Case("regress-dev-zero", ["regress", "/dev/zero", t], 2, "device", inputs=[t]))

    tiny = _sr(d / "rate-tiny.sr", rate="0.000000001 Hz")
    out.append(Case("sr-rate-tiny", ["analyze", tiny], 2, "samplerate", inputs=[tiny]))
    huge = _sr(d / "rate-huge.sr", rate="99999999999999999999 GHz")
    out.append(Case("sr-rate-huge", ["analyze", huge], 2, "samplerate", inputs=[huge]))
    abc = _sr(d / "analog.sr", analog="abc")
    out.append(Case("sr-analog-abc", ["analyze", abc], 2, "total analog", inputs=[abc]))

    for name, text in (("saleae-time-huge", "0.0,0,0,0,0,0\n1e300,1,0,0,0,0\n"),
                       ("saleae-time-negative", "0.0,0,0,0,0,0\n-1e10,1,0,0,0,0\n0.1,1,0,0,0,0\n")):
        s = d / f"{name}.csv"
        s.write_text("Time [s],BSY,SEL,MSG,CD,IO\n" + text)
        out.append(Case(name, ["analyze", str(s)], 2, ":3: ", inputs=[str(s)]))
    turs = (ROOT / "fixtures" / "captured" / "sg" / "lsi_sg_tools" / "turs.strace.txt").read_text()
    for name, old, new, why in (
            ("strace-T-huge", "= 0 <0.", "= 0 <99999999999999999999.", "-T time"),
            ("strace-duration-neg", "duration=0", "duration=-5", "duration is negative"),
            ("strace-resid-over", "resid=0", "resid=4096", "resid is larger than dxfer_len"),
            ("strace-fd-huge", "ioctl(3,", "ioctl(99999999999999999999,", "fd is not a number"),
            ("strace-nul", "SG_IO", "SG\x00IO", "NUL byte"),
            ("strace-clock-bad", "ioctl(3", "25:61:61.000000 ioctl(3", "time of day"),
            ("strace-pid-huge", "ioctl(3", "99999999999999999999 ioctl(3", "pid")):
        s = d / f"{name}.strace.txt"
        lines = turs.splitlines(keepends=True)
        k = next(i for i, ln in enumerate(lines) if ", SG_IO, " in ln and old in ln)    # the first SG_IO call
        lines[k] = lines[k].replace(old, new, 1)
        s.write_text("".join(lines))
        out.append(Case(name, ["analyze", str(s)], 2, why, inputs=[str(s)], gap=STRACE_GAPS.get(name)))
    out += _parquet_cases(d)

    gap = _sr(d / "gap.sr", drop=("logic-1-2",))
    out.append(Case("sr-missing-chunk", ["analyze", gap], 2, "logic-1-2 missing", inputs=[gap],
                    lenient=Case("sr-missing-chunk-lenient", ["analyze", gap, "--lenient", "--json", "-"], 0,
                                 inputs=[gap], check=_lenient_sr_keeps_time)))
    dup = _sr(d / "dup.sr", twice=("logic-1-1",))
    out.append(Case("sr-duplicate-chunk", ["analyze", dup], 2, "stored twice", inputs=[dup]))
    cfv = _sr(d / "cfv.sr", metadata="[device 1]\ncapturefile=version\nsamplerate=10 MHz\nprobe1=BSY\n"
                                      "probe2=SEL\nprobe3=MSG\nprobe4=CD\nprobe5=IO\nunitsize=1\n")
    out.append(Case("sr-capturefile-version", ["analyze", cfv], 2, "capturefile", inputs=[cfv]))
    bomb = _sr(d / "bomb.sr", metadata="[device 1]\ncapturefile=logic-1\nsamplerate=10 MHz\nprobe1=BSY\n"
                                       "probe2=SEL\nprobe3=MSG\nprobe4=CD\nprobe5=IO\nunitsize=1\n"
                                       + "#" * (4 << 20) + "\n")
    out.append(Case("sr-metadata-bomb", ["analyze", bomb], 2, "member metadata", inputs=[bomb]))
    longv = _sr(d / "longv.sr", version="9" * 10_000)
    out.append(Case("sr-version-long", ["analyze", longv], 2, "version", inputs=[longv]))
    out += _dsl_cases(d)
    out += _long_line_cases(d)
    return out


MAX_LINE = 256 << 20      # parsers/_lines.MAX_LINE_BYTES: a line longer is no record
CAPTURED = ROOT / "fixtures" / "captured"
TEXT_TRACES = {            # one real trace of every text format (the Saleae one written here)
    "ancot": ANCOT, "vcd": VCD, "saleae": None,
    "qemu": CAPTURED / "lsi_bufread32k" / "qemu-trace.txt",
    "blkparse": CAPTURED / "lsi_bufread32k" / "ref.blkparse.txt",
    "usbmon": CAPTURED / "usb_bufread32k" / "usbmon.txt",
    "ftrace": CAPTURED / "lsi_bufread32k" / "ftrace.txt",
    "dmesg": CAPTURED / "lsi_bufread32k" / "dmesg.txt",
    "strace": CAPTURED / "sg" / "lsi_sg_tools" / "dd_4k.strace.txt",
    "sg3": CAPTURED / "sg" / "lsi_sg_tools" / "inq.out.txt"}
SALEAE = b"Time [s],BSY,SEL,MSG,CD,IO\n" + b"".join(
    b"%.6f,%d,0,0,0,0\n" % (k * 1e-6, k % 2) for k in range(40))


def _sparse(path: Path, head: bytes, hole: int, tail: bytes = b"") -> str:
    """`head`, `hole` NUL bytes that take no disk, then `tail`."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.seek(hole, 1)
        fh.write(tail)
        fh.truncate()
    return str(path)


def _skipped_at(line: int):
    def check(_, out, err):
        import json
        rec = json.loads(out)["records"]
        assert rec["skipped"] == 1 and rec["read"] > 0, rec
        assert rec["skipped_examples"][0].split(": ")[0].endswith(f":{line}"), rec
    return check


def _long_line_cases(d: Path) -> list[Case]:
    out = []
    for fmt in ("ancot", "vcd", "saleae"):
        z = _sparse(d / f"zeros-{fmt}", b"", 10 << 30)
        out.append(Case(f"no-newline-{fmt}", ["analyze", "--format", fmt, z], 2,
                        ":1: line longer than 268435456 bytes", inputs=[z]))
    for name, src in TEXT_TRACES.items():
        text = SALEAE if src is None else Path(src).read_bytes()
        lines = text.splitlines(keepends=True)
        suffix = {"saleae": ".csv", "vcd": ".vcd", "ancot": ".ancot"}.get(name, ".txt")
        t = _sparse(d / f"tail-{name}{suffix}", text, 10 << 30)
        out.append(Case(f"long-tail-{name}", ["analyze", t], 2,
                        f":{len(lines) + 1}: line longer than 268435456 bytes", inputs=[t]))
        k = len(lines) // 2
        m = _sparse(d / f"mid-{name}{suffix}", b"".join(lines[:k]), MAX_LINE + (44 << 20),
                    b"\n" + b"".join(lines[k:]))
        out.append(Case(f"long-line-{name}-lenient", ["analyze", m, "--lenient", "--json", "-"], 0,
                        inputs=[m], check=_skipped_at(k + 1)))
    return out


def _dsl_cases(d: Path) -> list[Case]:
    import gen_logic
    names = {0: "BSY", 1: "SEL", 2: "MSG", 3: "CD", 4: "IO"}
    words = np.tile(np.array([0, 1, 3, 0x1F, 0], dtype=np.uint64), 400)
    bomb = d / "bomb.dsl"
    gen_logic.write_dsl(bomb, words, names, 10_000_000,
                        header=gen_logic.dsl_header(names, len(words), 10_000_000) + "#" * (4 << 20) + "\n")
    dup = d / "dup.dsl"
    gen_logic.write_dsl(dup, words, names, 10_000_000)
    with zipfile.ZipFile(dup, "a") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zf.writestr("L-0/0", b"\xff" * 250)
    return [Case("dsl-header-bomb", ["analyze", str(bomb)], 2, "member header", inputs=[str(bomb)]),
            Case("dsl-duplicate-member", ["analyze", str(dup)], 2, "stored twice", inputs=[str(dup)])]


def _parquet_cases(d: Path) -> list[Case]:
    """Transitions Parquet files (as `scsitrace convert` writes them) with one value damaged."""
    import json
    import polars as pl
    import pyarrow.parquet as pq
    from scsitrace import parsers
    from scsitrace.parsers import transitions_parquet as tp
    good = d / "good.parquet"
    tp.write(str(good), parsers.parse(str(ANCOT)))
    table = pq.read_table(good)
    meta = dict(table.schema.metadata)

    def save(name, frame=None, **over):
        m = dict(meta)
        if over:
            stored = json.loads(m[tp.META_KEY])
            stored["meta"].update(over)
            m[tp.META_KEY] = json.dumps(stored).encode()
        t = table if frame is None else frame.to_arrow()
        path = d / name
        pq.write_table(t.replace_schema_metadata(m), path)
        return str(path)

    df = pl.from_arrow(table)
    init = save("initiator.parquet", initiator=999)
    null = save("null-t.parquet", df.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(None)
                                                  .otherwise(pl.col("t_ns")).alias("t_ns")))
    rev = save("reverse.parquet", df.with_columns(pl.col("t_ns").reverse()))

    def never_negative(_, out, err):
        assert json.loads(out)["elapsed_ns"] >= 0

    return [Case("parquet-initiator", ["analyze", init], 2, "initiator", inputs=[init]),
            Case("parquet-null-t", ["analyze", null], 2, "t_ns is null", inputs=[null]),
            Case("parquet-reverse", ["analyze", rev], 2, "back in time", inputs=[rev],
                 lenient=Case("parquet-reverse-lenient", ["analyze", rev, "--lenient", "--json", "-"], 0,
                              inputs=[rev], check=never_negative))]


def write_all(d: Path) -> list[Case]:
    """The corpus under `d` (a fresh directory), as the tests use it."""
    d.mkdir(parents=True, exist_ok=True)
    return cases(d)


if __name__ == "__main__":
    import sys
    import tempfile
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="faults-"))
    for c in write_all(target):
        print(f"{c.name:24} exit {c.status}  scsitrace {' '.join(c.argv)}")
