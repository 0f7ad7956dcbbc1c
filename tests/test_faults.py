"""The fault corpus (tests/gen_faults.py: outputs onto inputs, missing output directories,
standard output, terminal escapes and spreadsheet formulas in traces, FIFOs and devices
where files are read, values out of range and damaged archives), plus the failures of the
machine under a command: a full disk (RLIMIT_FSIZE: the write fails with EFBIG as it would
with ENOSPC), two writers of one output, SIGINT and SIGTERM to a batch.

For every case: the exit status, one line on stderr for exit 2 (no traceback), every input's
bytes unchanged, nothing new under an output's final name unless the command succeeds, no
temporary left beside it."""
from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import gen_faults
from clirun import run_cli
from scsitrace import inert, outputs

_names_dir = Path(tempfile.mkdtemp(prefix="fault-names-"))
CASES = {c.name: c for c in gen_faults.cases(_names_dir)}
for _c in list(CASES.values()):
    if _c.lenient is not None:
        CASES[_c.lenient.name] = _c.lenient
shutil.rmtree(_names_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    found = {}
    for c in gen_faults.cases(d):
        found[c.name] = c
        if c.lenient is not None:
            found[c.lenient.name] = c.lenient
    return d, found


def temporaries(d: Path) -> list[str]:
    return [str(p) for p in d.rglob("*") if p.name.endswith(outputs.PART) or ".part.old" in p.name
            or (p.name.startswith(".") and p.name.endswith(outputs.PART))]


def check_one_line(status: int, err: str, message: str | None) -> None:
    assert "Traceback" not in err
    if status == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scsitrace: "), err
        if message:
            assert message in lines[0], lines[0]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=CASES[n].gap))
                                  if CASES[n].gap else n for n in sorted(CASES)])
def test_fault_case(corpus, name):
    d, found = corpus
    case = found[name]
    before = {p: gen_faults.sha256(p) for p in case.inputs}
    existed = {p: os.path.lexists(p) for p in case.outputs}
    status, out, err = run_cli(case.argv, timeout=120)
    assert status == case.status, (status, err[-2000:])
    if case.one_line:
        check_one_line(status, err, case.message)
    assert {p: gen_faults.sha256(p) for p in case.inputs} == before, "an input's bytes changed"
    for p in case.outputs:
        if not existed[p] and p not in case.creates:
            assert not os.path.lexists(p), f"{p} written by a failing command"
    assert not temporaries(d), temporaries(d)
    if case.check is not None:
        case.check(d, out, err)


# ---------------------------------------------------------------- a full disk

def _limited(limit: int | None, as_limit: int | None = None):
    def pre():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # the write fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if as_limit:
            resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    return pre


def _scsitrace(args, limit=None, as_limit=None, **kw):
    return subprocess.run([sys.executable, "-m", "scsitrace.cli", *args], capture_output=True, text=True,
                          preexec_fn=_limited(limit, as_limit) if limit or as_limit else None, timeout=600, **kw)


@pytest.mark.parametrize("flag", ["--html", "--segments", "--json", "convert", "annotate"])
def test_a_full_disk_keeps_the_old_output_whole(tmp_path, flag):
    """The write fails (a 64 KB file size limit: EFBIG, as ENOSPC): exit 2, one line naming
    the output and the system's reason alone (pyarrow's own words cut: `convert`), the previous
    file under the final name unchanged, no temporary left."""
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    target = tmp_path / ("out.parquet" if flag == "convert" else "out.file")
    old = b"the previous output\n"
    target.write_bytes(old)
    limit = 64 << 10 if flag.startswith("--") and flag != "--json" else 256
    argv = {"convert": ["convert", str(t), "-o", str(target)],
            "annotate": ["annotate", str(shutil.copy(gen_faults.VCD, tmp_path / "t.vcd")), "-o", str(target)]
            }.get(flag, ["analyze", str(t), flag, str(target)])
    r = _scsitrace(argv, limit=limit)
    assert r.returncode == 2, r.stderr
    check_one_line(2, r.stderr, f"{target}: cannot write: File too large")
    assert target.read_bytes() == old
    assert not temporaries(tmp_path)


def test_a_full_disk_keeps_the_old_dataset_whole(tmp_path):
    """batch -o DIR over a complete dataset: a write that fails leaves the old one as it was."""
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    out = tmp_path / "ds"
    r = _scsitrace(["batch", str(t), "-o", str(out), "-j", "0"])
    assert r.returncode == 0, r.stderr
    sums = {p.name: gen_faults.sha256(p) for p in out.glob("*.parquet")}
    assert "summary.parquet" in sums and "latency.parquet" in sums
    r = _scsitrace(["batch", str(t), str(t), "-o", str(out), "-j", "0"], limit=4 << 10)
    assert r.returncode == 2, r.stderr
    check_one_line(2, r.stderr, "cannot write")
    assert {p.name: gen_faults.sha256(p) for p in out.glob("*.parquet")} == sums
    assert pl.read_parquet(out / "summary.parquet").height == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], list(tmp_path.iterdir())


def test_a_new_dataset_replaces_the_old_one_whole(tmp_path):
    """Two batches into one -o: the second's dataset replaces the first's entirely (no
    partition of the first left behind)."""
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    out = tmp_path / "ds"
    assert _scsitrace(["batch", str(t), str(t), "-o", str(out), "-j", "0"]).returncode == 0
    assert len(list((out / "ios").iterdir())) == 2
    assert _scsitrace(["batch", str(t), "-o", str(out), "-j", "0"]).returncode == 0
    assert [p.name for p in (out / "ios").iterdir()] == ["trace_id=0"]
    assert pl.read_parquet(out / "summary.parquet").height == 1


def test_a_read_only_file_system_is_refused_before_the_work(tmp_path):
    """Outputs on a read-only file system (a read-only bind mount of a directory, in a mount
    namespace of the command's own: nothing to clean up): exit 2, one line, the old file
    unchanged and nothing new in the directory; batch likewise."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) to make a read-only mount")
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "x.json").write_text("old\n")
    as_root = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    cli = f"{sys.executable} -m scsitrace.cli"
    script = (f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro} || exit 99; "
              f"{cli} analyze {t} --json {ro}/x.json; echo \"rc=$?\" >&2; "
              f"{cli} batch {t} -o {ro}/ds -j 0; echo \"rc=$?\" >&2")
    r = subprocess.run([unshare, *as_root, "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    if r.returncode == 99 or "rc=" not in r.stderr:
        pytest.skip(f"cannot make a read-only mount here: {r.stderr.strip()[-200:]}")
    lines = r.stderr.strip().splitlines()
    assert lines == [f"scsitrace: {ro}/x.json: directory not writable: {ro} (--json)", "rc=2",
                     f"scsitrace: {ro}/ds: directory not writable: {ro} (-o)", "rc=2"], r.stderr
    assert r.stdout == ""
    assert sorted(p.name for p in ro.iterdir()) == ["x.json"] and (ro / "x.json").read_text() == "old\n"


def test_a_directory_without_write_permission_is_refused_before_the_work(tmp_path):
    """A directory of mode 0555: exit 2, one line, nothing printed, nothing written (for root
    the mode does not block writes; the read-only mount test covers root)."""
    if os.geteuid() == 0:
        pytest.skip("running as root: a directory's mode does not stop root writing in it")
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    d = tmp_path / "locked"
    d.mkdir()
    d.chmod(0o555)
    try:
        status, out, err = run_cli(["analyze", str(t), "--json", str(d / "x.json")])
        assert status == 2 and out == ""
        check_one_line(2, err, f"{d}/x.json: directory not writable: {d} (--json)")
        assert list(d.iterdir()) == []
    finally:
        d.chmod(0o755)


# ---------------------------------------------------------------- two writers

def test_two_writers_of_one_output_never_interleave(tmp_path):
    """Each writer has its own temporary: the output is one writer's bytes whole."""
    target = tmp_path / "o.csv"
    a, b = outputs.Pending(target), outputs.Pending(target)
    with open(a.tmp, "w") as fa, open(b.tmp, "w") as fb:
        for i in range(1000):
            fa.write(f"a,{i}\n")
            fb.write(f"b,{i}\n")
    a.commit()
    assert target.read_text() == "".join(f"a,{i}\n" for i in range(1000))
    b.commit()
    assert target.read_text() == "".join(f"b,{i}\n" for i in range(1000))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.csv"]


# ---------------------------------------------------------------- inert text

def test_csv_rule_neutralises_formula_cells_and_leaves_numbers():
    df = pl.DataFrame({"s": ["=1+1", "+1", "-2", "@A", "\tx", "\rx", "ok", None, "'=x"], "n": [-1] * 9})
    got = inert.csv_safe(df)
    assert got["s"].to_list() == ["'=1+1", "'+1", "'-2", "'@A", "'\tx", "'\rx", "ok", None, "'=x"]
    assert got["n"].to_list() == [-1] * 9


def test_junit_with_control_characters_is_well_formed(tmp_path):
    import xml.etree.ElementTree as ET
    from scsitrace.reports import junit
    path = tmp_path / "j.xml"
    junit.write(str(path), [{"key": "t\x1b[2J\x00", "trace": "t\x07", "rows": None, "error": "bad \x1b",
                             "status": "bad"}])
    root = ET.parse(path).getroot()
    case = root.find(".//testcase")
    assert case.get("classname") == "t\\x1b[2J\\x00"


def test_printable_escapes_every_control_character():
    assert inert.printable("a\x1b]0;x\x07\x9bb") == "a\\x1b]0;x\\x07\\x9bb"
    assert inert.printable("tab\there\nnl") == "tab\\there\\nnl"
    assert inert.excerpt("x" * 500).endswith("...") and len(inert.excerpt("x" * 500)) == inert.EXCERPT


# ---------------------------------------------------------------- signals

def _started_batch(tmp_path, n: int = 120):
    """A batch of n copies of the example trace on 2 workers, running: returns (process, output,
    staging directory) once at least two traces are in its new dataset."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for i in range(n):
        shutil.copy(gen_faults.ANCOT, traces / f"t{i:03}.ancot")
    out = tmp_path / "ds"
    # as a terminal starts it: SIGINT at its default (a test run started in the background, as
    # `cmd &` in a script, inherits SIGINT ignored, and a process started so keeps ignoring it)
    proc = subprocess.Popen([sys.executable, "-m", "scsitrace.cli", "batch", str(traces), "-o", str(out), "-j", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        staged = [p for p in tmp_path.iterdir() if p.name.startswith(".ds.") and p.name.endswith(outputs.PART)]
        if staged and (staged[0] / "ios").is_dir() and len(list((staged[0] / "ios").iterdir())) >= 2:
            return proc, out
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the batch did not get going")


def _worker_processes(pid: int) -> list[int]:
    """The batch's worker processes (multiprocessing's resource tracker left out)."""
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return [k for k in kids if "resource_tracker" not in Path(f"/proc/{k}/cmdline").read_text()]


def _sigint_ignored(pid: int) -> bool:
    """SIGINT cannot run a handler in the process: its disposition in the kernel is 'ignore'
    (what Python's signal.getsignal says can differ: a native library's sigaction is not seen
    there), or every thread blocks it (a worker still importing polars, whose import installs
    a handler)."""
    def bit(status: str, key: str) -> bool:
        value = next(int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith(key))
        return bool(value >> (signal.SIGINT - 1) & 1)
    if bit(Path(f"/proc/{pid}/status").read_text(), "SigIgn:"):
        return True
    return all(bit((task / "status").read_text(), "SigBlk:") for task in Path(f"/proc/{pid}/task").iterdir())


@pytest.mark.parametrize("sig, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGINT, False)])
def test_a_signal_stops_a_batch_cleanly(tmp_path, sig, to_group):
    """Ctrl-C (SIGINT to the whole process group, workers included), SIGTERM or SIGINT to the
    batch alone: the workers ignore SIGINT in the kernel (after polars' import took it), and
    the batch ends with exit 128 + the signal, no traceback, the dataset of what finished written, every other
    trace in it with status `interrupted`; no temporary left."""
    proc, out = _started_batch(tmp_path)
    workers = _worker_processes(proc.pid)
    assert len(workers) == 2, workers
    for pid in workers:       # polars installs a native SIGINT handler on import: taken back
        assert _sigint_ignored(pid), f"worker {pid} would take Ctrl-C (a KeyboardInterrupt traceback)"
    if to_group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr and "Error" not in stderr, stderr[-2000:]
    summary = pl.read_parquet(out / "summary.parquet")
    assert summary.height == 120
    statuses = dict(summary.group_by("status").len().iter_rows())
    assert statuses.get("ok", 0) >= 2 and statuses.get("interrupted", 0) >= 1, statuses
    assert set(statuses) <= {"ok", "interrupted"}, statuses
    ok = summary.filter(pl.col("status") == "ok")["trace_id"].to_list()
    assert sorted(int(p.name.split("=")[1]) for p in (out / "ios").iterdir()) == sorted(ok)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------- the cluster

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, message", [("garbage::x", "cannot connect"),
                                              ("unreachable", "cannot connect"),
                                              ("no-workers", "no worker joined")])
def test_a_scheduler_that_cannot_run_the_batch_fails_in_bounded_time(tmp_path, monkeypatch, address, message):
    """An address that is not one, a scheduler nobody listens for, a scheduler without workers:
    one line, exit 2, within the connection bound (here 3 s), and no dataset written."""
    pytest.importorskip("distributed")
    from scsitrace import pool
    monkeypatch.setattr(pool, "CONNECT_S", 3)
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    sched = None
    if address == "unreachable":
        address = f"tcp://127.0.0.1:{_free_port()}"
    elif address == "no-workers":
        port = _free_port()
        sched = subprocess.Popen([str(Path(sys.executable).with_name("dask")), "scheduler", "--port", str(port),
                                  "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        address = f"tcp://127.0.0.1:{port}"
        time.sleep(3)
    try:
        start = time.monotonic()
        status, out, err = run_cli(["batch", str(t), "-o", str(tmp_path / "o"), "--scheduler", address], timeout=120)
        took = time.monotonic() - start
    finally:
        if sched is not None:
            sched.terminate()
            sched.wait(30)
    assert status == 2, err
    check_one_line(2, err, message)
    assert took < 60
    assert not (tmp_path / "o").exists() and not temporaries(tmp_path)


@contextlib.contextmanager
def _cluster():
    """A Dask scheduler and one worker (no nanny: killing it kills the worker), as processes of
    their own: yields (address, scheduler process, worker process); both ended on the way out."""
    dask = str(Path(sys.executable).with_name("dask"))
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sched = subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], **quiet)
    worker = None
    try:
        time.sleep(3)
        worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard"], **quiet)
        from distributed import Client
        with Client(address, timeout=60) as c:
            c.wait_for_workers(1, timeout=120)
        yield address, sched, worker
    finally:
        for p in (worker, sched):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(30)


def _kill_when_started(tmp_path: Path, proc) -> threading.Thread:
    """Kills `proc` (SIGKILL) once the batch's new dataset holds two traces."""
    def watch():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            staged = [p for p in tmp_path.iterdir() if p.name.startswith(".ds.") and p.name.endswith(outputs.PART)]
            if staged and (staged[0] / "ios").is_dir() and len(list((staged[0] / "ios").iterdir())) >= 2:
                break
            time.sleep(0.02)
        proc.kill()
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("lost, status", [("scheduler", "interrupted"), ("worker", "timeout")])
def test_a_cluster_lost_mid_batch_ends_it_in_one_line_per_trace(tmp_path, monkeypatch, capfd, lost, status):
    """The scheduler (or the only worker) killed while a batch runs on it: the batch ends (a
    lost worker: within the stall bound, here 3 s, after which no worker came back), one line
    per trace and no traceback (distributed's own logging included), the dataset written with
    every trace: those that finished `ok`, the others `interrupted` (scheduler lost) or
    `timeout` (nobody to run them)."""
    pytest.importorskip("distributed")
    from scsitrace import pool
    monkeypatch.setattr(pool, "CONNECT_S", 3)
    monkeypatch.setattr(pool, "WORKER_CHECK_S", 1)
    traces = tmp_path / "traces"
    traces.mkdir()
    n = 200
    for i in range(n):
        shutil.copy(gen_faults.ANCOT, traces / f"t{i:03}.ancot")
    out = tmp_path / "ds"
    with _cluster() as (address, sched, worker):
        watcher = _kill_when_started(tmp_path, sched if lost == "scheduler" else worker)
        code, stdout, stderr = run_cli(["batch", str(traces), "-o", str(out), "--scheduler", address], timeout=240)
        watcher.join(5)
    leaked = capfd.readouterr()          # what distributed's threads wrote straight to fd 2
    assert "Traceback" not in stderr + leaked.err and "Traceback" not in stdout, (stderr + leaked.err)[-3000:]
    assert code == 2, stderr[-2000:]
    summary = pl.read_parquet(out / "summary.parquet")
    assert summary.height == n
    statuses = dict(summary.group_by("status").len().iter_rows())
    assert statuses.get("ok", 0) >= 2 and statuses.get(status, 0) >= 1 and set(statuses) <= {"ok", status}, statuses
    rows = [ln for ln in stdout.splitlines() if ln.startswith(status)]
    assert len(rows) == statuses[status], stdout[-2000:]
    assert all(("scheduler lost" in ln or "connection to the Dask" in ln) if lost == "scheduler"
               else ("no Dask worker" in ln or "lost with its Dask worker" in ln) for ln in rows), rows[:3]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------- bounded lines

@pytest.mark.parametrize("fmt", ["scsilog", "sgio"])
def test_a_line_past_the_bound_is_bad_input_before_it_is_read_whole(tmp_path, monkeypatch, fmt):
    """A file without newlines (here: one line of 1 MiB against a bound lowered to 64 KiB, read
    in 4 KiB blocks) is one line of bad input naming its line, not a MemoryError; lenient,
    that line is one skipped record and the lines after it are read."""
    from scsitrace import parsers
    from scsitrace.errors import BadInput
    from scsitrace.parsers import _lines
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 64 << 10)
    path = tmp_path / "x.log"
    path.write_bytes(b"[    0.000000] sd 0:0:0:0: hello\n" + b"A" * (1 << 20) + b"\n"
                     + b"[    0.000001] sd 0:0:0:0: after\n")
    with pytest.raises(BadInput, match=r"x.log:2: line longer than 65536 bytes"):
        cap = parsers.parse(str(path), fmt, strict=True, chunk_bytes=4096)
        for _ in cap.chunks():
            pass
    cap = parsers.parse(str(path), fmt, strict=False, chunk_bytes=4096)
    for _ in cap.chunks():
        pass
    assert cap.records.skipped == 1 and cap.records.examples[0].startswith(f"{path}:2: "), cap.records.as_json()


def _long_line_file(path: Path, long: int, tail: bytes = b"") -> bytes:
    """Two short lines, a line of `long` bytes (a hole: NULs, no disk), then `tail`."""
    head = b"one\ntwo\n"
    with open(path, "wb") as fh:
        fh.write(head)
        fh.seek(long, 1)
        fh.write(tail)
    return head


@pytest.mark.parametrize("mode", ["read", "mapped", "ring"])
def test_the_line_layer_bounds_a_line_in_every_block_mode(tmp_path, monkeypatch, mode):
    """Copied blocks, mapped views and ring buffers: a line past the bound is bad input naming
    its line (3) when strict; lenient, it comes through as SKIPPED_LINE (one line: the lines
    after it keep their numbers) and its bytes are never held (the blocks stay small)."""
    from scsitrace.errors import BadInput
    from scsitrace.parsers import _lines
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 64 << 10)
    monkeypatch.setattr(_lines, "SKIP_BYTES", 8192)
    if mode == "ring":
        monkeypatch.setattr(_lines, "_mapped", lambda path: None)
    path = tmp_path / "x.txt"
    head = _long_line_file(path, 1 << 20, b"\nfour\nfive\n")
    kw = dict(block_bytes=4096, views=mode != "read")
    with pytest.raises(BadInput, match=r"x.txt:3: line longer than 65536 bytes"):
        list(_lines.iter_byte_blocks(str(path), **kw))
    lines = []
    for block, _ in _lines.iter_byte_blocks(str(path), strict=False, **kw):
        assert len(block) <= 4096 + len(_lines.SKIPPED_LINE)
        lines += bytes(block).splitlines(keepends=True)
    assert lines == head.splitlines(keepends=True) + [_lines.SKIPPED_LINE, b"four\n", b"five\n"]


def test_a_header_line_is_bounded_too(tmp_path, monkeypatch):
    """Header readers (ancot, VCD, Saleae) read line by line: a first line past the bound is
    bad input at line 1, not the whole file in memory."""
    from scsitrace.errors import BadInput
    from scsitrace.parsers import _lines
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 64 << 10)
    path = tmp_path / "x.txt"
    path.write_bytes(b"x" * (1 << 20))
    with open(path, "rb") as fh, pytest.raises(BadInput, match=r"x.txt:1: line longer than"):
        list(_lines.bounded_lines(fh, str(path)))
    path.write_bytes(b"a\n" + b"x" * 65536 + b"\n")
    with open(path, "rb") as fh:
        assert [len(r) for r in _lines.bounded_lines(fh, str(path))] == [2, 65537]


def test_sigterm_while_writing_leaves_the_old_output_and_no_temporary(tmp_path):
    """SIGTERM to a command writing its output (simulate of a long trace): exit 143, no
    traceback, the previous file under the final name unchanged, no temporary left."""
    out = tmp_path / "sim.ancot"
    out.write_text("the previous trace\n")
    proc = subprocess.Popen([sys.executable, "-m", "scsitrace.cli", "simulate", "--duration", "120", "--level", "3",
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any(p.name.endswith(outputs.PART) and p.stat().st_size
                                                  for p in tmp_path.iterdir()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr
    assert out.read_text() == "the previous trace\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim.ancot"]


def test_a_dsl_block_without_its_member_costs_that_block_only_when_lenient(tmp_path, monkeypatch):
    """DSView blocks (here 4096 samples) of which block 1 lost a probe's member: strict, bad
    input naming it; lenient, a note, and the blocks after it keep their times (the capture's
    full length), the lost samples decoded as nothing."""
    import gen_logic
    from scsitrace import core
    from scsitrace.errors import BadInput
    from scsitrace.parsers import dsview
    monkeypatch.setattr(dsview, "BLOCK_SAMPLES", 4096)
    monkeypatch.setattr(gen_logic, "DSL_BLOCK", 4096)
    names = {0: "BSY", 1: "SEL", 2: "MSG", 3: "CD", 4: "IO"}
    words = np.zeros(3 * 4096, dtype=np.uint64)
    for k in range(0, len(words) - 400, 400):
        words[k + 50:k + 100] = 0b00011
        words[k + 100:k + 200] = 0b01001
        words[k + 200:k + 300] = 0b11001
        words[k + 300:k + 350] = 0b11101
    path = tmp_path / "gap.dsl"
    gen_logic.write_dsl(path, words, names, 10_000_000, drop={"L-2/1"})
    with pytest.raises(BadInput, match="member L-2/1 missing"):
        core.load(str(path))
    a = core.load(str(path), strict=False)
    assert any("L-2/1" in n and "lost" in n for n in a.notes), a.notes
    assert a.elapsed_ns >= (3 * 4096 - 400) * 100


def test_a_csv_shown_on_a_terminal_has_its_control_characters_escaped():
    df = pl.DataFrame({"p": ["ok", "\x1b]0;T\x07x", None], "n": [1, 2, 3]})
    got = inert.terminal_safe(df)
    assert got["p"].to_list() == ["ok", "\\x1b]0;T\\x07x", None] and got["n"].to_list() == [1, 2, 3]


def test_crosslayer_reads_a_case_dmesg_in_bounded_memory(tmp_path):
    """crosslayer looks for the logical block size in the case's dmesg.txt: read in blocks of
    whole lines, a 10 GiB line (a sparse hole) before the size's line is skipped, not held
    (here under a 3 GiB address-space limit: reading it whole was a MemoryError, exit 1)."""
    case = tmp_path / "case"
    case.mkdir()
    src = gen_faults.CAPTURED / "lsi_bufread32k"
    for name in ("ftrace.txt",):
        shutil.copy(src / name, case / name)
    size_line = b"[    1.000000] sd 0:0:0:0: [sda] 2048 4096-byte logical blocks: (8.39 MB/8.00 MiB)\n"
    gen_faults._sparse(case / "dmesg.txt", b"[    0.000000] Linux version\n", 10 << 30, b"\n" + size_line)
    r = _scsitrace(["crosslayer", str(case), "--json", "-"], limit=None, as_limit=3 << 30)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["block_size"] == 4096, r.stdout[:500]


def test_timeout_covers_waiting_for_a_worker_too(tmp_path):
    """`--timeout` bounds scheduling as it bounds running: a scheduler without workers fails
    after the --timeout given (6 s here), not the 30 s connection bound."""
    pytest.importorskip("distributed")
    from scsitrace import pool
    assert pool.scheduling_wait(None) == pool.CONNECT_S and pool.scheduling_wait(6) == 6
    assert pool.scheduling_wait(1) == pool.MIN_CONNECT_S and pool.scheduling_wait(600) == 600
    t = shutil.copy(gen_faults.ANCOT, tmp_path / "t.ancot")
    port = _free_port()
    sched = subprocess.Popen([str(Path(sys.executable).with_name("dask")), "scheduler", "--port", str(port),
                              "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        status, _, err = run_cli(["batch", str(t), "-o", str(tmp_path / "o"), "--scheduler",
                                  f"tcp://127.0.0.1:{port}", "--timeout", "6"], timeout=120)
    finally:
        sched.terminate()
        sched.wait(30)
    assert status == 2, err
    check_one_line(2, err, "no worker joined within 6 s")
    assert not (tmp_path / "o").exists() and not temporaries(tmp_path)
