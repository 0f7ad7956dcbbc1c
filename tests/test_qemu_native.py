"""QEMU LSI traces read by the compiled passes (parsers/_qemu_scan.py and `qemu_runs`, Rust;
parsers/_qemu_stream.py `Stream`) against the reference: the same file read by the previous
reader's route, every line through `_split_lines` + `_qemu_fields.decode_fields` and the runs
through `runs_of` (polars and Python). On random traces of commands with damaged lines
(tests/damage.py), lines at each field's edge, blanks, CRs, stray bytes and a cut last line,
strict and lenient, at any part size: the same runs, device commands, steps, records,
anomalies, notes and meta, or the same one-line error; and the bus layer's runs read from the
capture's stretches equal those of its synthesized transitions."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from damage import damaged
from scsitrace import parsers
from scsitrace.bus import polarity
from scsitrace.bus.runs import RunReducer, reduce_stretches
from scsitrace.errors import BadInput
from scsitrace.parsers import _qemu_scan, _qemu_steps, _qemu_stream, qemu_lsi
from scsitrace.schema import SIGNAL_BIT
from test_qemu_lsi import COMMANDS, qemu_trace_lines

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ALPHABET = "0123456789abcdefx@.:_ =()ATNlsi"
EDGES = [  # lines at or past a field's edge, and rare forms the scanner must leave or read alike
    "4242@1795000000.000500:lsi_do_dma DMA addr=0x1 len=4294967295",
    "4242@1795000000.000500:lsi_do_dma DMA addr=0x1 len=4294967296",
    "4242@1795000000.000500:lsi_do_dma DMA len=x len=7",
    "4242@1795000000.000500:lsi_do_dma DMA len=99999999999999999999 len=7",
    "4242@1795000000.000500:lsi_do_msgout_simplequeue SIMPLE queue tag=0x1ffffffff",
    "4242@1795000000.000500:lsi_do_msgout_simplequeue SIMPLE queue tag=0x0000000000000000001",
    "4242@1795000000.000500:lsi_do_msgout_extended Extended message 0x1ff (len 3)",
    "4242@1795000000.000500:lsi_do_msgout_extended Extended message 0x1 (len 0)",
    "4242@1795000000.000500:lsi_add_msg_byte MSG IN 0x1ff",
    "4242@1795000000.000500:lsi_do_status Get status len=1 status=256",
    "4242@1795000000.000500:lsi_do_status Get status len=1 status=2",
    "4242@1795000000.000500:lsi_execute_script_io_selected Selected target 4294967296 ATN",
    "4242@1795000000.000500:lsi_execute_script_tc_compp Compare phase msgin == MSGIN",
    "4242@1795000000.000500:lsi_execute_script_tc_compp Compare phase RSVIN == MSGIN",
    "4242@1795000000.000500:scsi_req_parsed_lba target 0 lun 0 tag 1 command 40 lba 9223372036854775808",
    "4242@1795000000.000500:scsi_req_parsed target 0 lun 0 tag 1 command 300 dir 1 length 4096",
    "4242@1795000000.000500:scsi_disk_dma_command_READ Read (sector 5, count 4294967296)",
    "4242@1795000000.000500:lsi_do_command Send command len=0",
    "4242@1795000000.000500:lsi_do_command Send command len=99999",
    "4242@1795000000.000500:usb_msd_cmd_submit lun 0, tag 0x5, flags 0x80, len 31, data-len 512",
    "4242@1795000000.000500:usb_msd_send_status status 0, tag 0x5, len 13",
    "4242@1795000000.000500:lsi_wait_reselect",
    "4294967296@1795000000.000500:lsi_wait_reselect Wait Reselect",
    "4242@1795000000.1234567890:lsi_wait_reselect Wait Reselect",
    "4242@9223372036.000000:lsi_wait_reselect Wait Reselect",
    "4242@1795000000.000001:lsi_do_msgin Message in len=1 1",
    "4242@1795000000.000500:lsi_do_msgin  Message in len=1 1",
    "", "   ", "\t", "garbage", "4242@1795000000.000500:lsi_do_dma DMA len=8\r",
    "4242@1795000000.000500:lsi_do_dma DMA len=8 \u00e9",
]
BAD_BYTES = [b"\xff\xfe", b"4242@1795000000.000500:lsi\x00_do_dma DMA len=8"]


@st.composite
def traces(draw) -> bytes:
    lines = [line.encode() for line in qemu_trace_lines(draw(COMMANDS))]
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.integers(0, len(lines) - 1))
        lines[k] = draw(damaged(lines[k].decode(), ALPHABET)).encode()
    for extra in draw(st.lists(st.sampled_from(EDGES), max_size=4)):
        lines.insert(draw(st.integers(0, len(lines))), extra.encode())
    if draw(st.integers(0, 4)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(BAD_BYTES)))
    text = b"\n".join(lines)
    if draw(st.booleans()):
        text += b"\n"
    elif draw(st.booleans()):
        text = text[:len(text) - draw(st.integers(1, 5))]     # the file ends inside its last line
    return text


def _outcome(path, strict: bool, chunk_bytes: int | None = None):
    try:
        opts = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
        cap = qemu_lsi.parse(str(path), strict=strict, **opts)
        return (cap.frames["phase_runs"].to_dicts(), cap.frames["device_commands"].to_dicts(),
                cap.frames["steps"].to_dicts(), cap.records.as_json(), cap.anomalies.to_dicts(), cap.notes,
                cap.meta, cap.columns["stretches"].to_dicts())
    except BadInput as exc:
        return str(exc), exc.line


def _by_python(monkeypatch):
    """Every non-blank line through the Python patterns, every run through `runs_of`."""
    def scan_block(view, first_line, parts=None):
        data = bytes(view)
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        taken = pl.DataFrame(schema=_qemu_scan.EVENTS)
        return taken, [(first_line + k, raw) for k, raw in enumerate(lines) if raw.strip(b" ")], len(lines)
    monkeypatch.setattr(_qemu_scan, "scan_block", scan_block)
    monkeypatch.setattr(_qemu_steps, "runs_pass", lambda steps, end: None)
    monkeypatch.setattr(qemu_lsi, "CompiledStream", lambda stretching=None, **kw: _qemu_stream.Stream(**kw))


@SETTINGS
@given(text=traces(), strict=st.booleans())
def test_compiled_passes_read_what_the_python_reader_reads(tmp_path, monkeypatch, text, strict):
    path = tmp_path / "t.qemu-trace.txt"
    path.write_bytes(text)
    fast = _outcome(path, strict)
    with monkeypatch.context() as m:
        _by_python(m)
        assert _outcome(path, strict) == fast


@SETTINGS
@given(text=traces(), part=st.sampled_from([64, 300, 4096]))
def test_parts_do_not_change_the_result(tmp_path, text, part):
    """Lenient, at any part size (the runs built part by part, bad lines named per block):
    what one part of the whole file gives."""
    path = tmp_path / "t.qemu-trace.txt"
    path.write_bytes(text)
    assert _outcome(path, False, part) == _outcome(path, False, 1 << 30)


@SETTINGS
@given(text=traces())
def test_scanner_columns_do_not_depend_on_threads(text):
    one = _qemu_scan.scan_block(text, 1, parts=1)
    for parts in (2, 3, 7):
        many = _qemu_scan.scan_block(text, 1, parts=parts)
        assert many[0].equals(one[0]) and many[1:] == one[1:]


def _streamed(kind, events: pl.DataFrame, cuts: list[int]):
    """What a stream of `kind` makes of the events cut at `cuts`: runs, device commands,
    stretches, counters."""
    stream = kind(summed=qemu_lsi.stretches, summed_times=("start_ns", "first_handshake_ns", "last_ns"))
    for a, b in zip([0, *cuts], [*cuts, events.height]):
        stream.add(events.slice(a, b - a))
    runs, devices = stream.finish()
    return (runs.to_dicts(), devices.to_dicts(), stream.summed_runs().to_dicts(),
            (stream.t_min, stream.events, stream.lsi_events, stream.clamped, stream.names))


@SETTINGS
@given(text=traces(), data=st.data())
def test_compiled_stream_gives_the_python_streams_runs_at_any_split(tmp_path, text, data):
    """The compiled stream carries the phase, the run numbers, the open run and the queued
    MESSAGE IN bytes across batches: any split of the events gives the runs the Python
    stream gives (which holds a batch's unfinished runs back instead); where a value is no
    byte or a CDB is too long for it (NotCompiled), the Python stream's compiled runs give up
    too and it rebuilds them."""
    path = tmp_path / "t.qemu-trace.txt"
    path.write_bytes(text)
    try:
        events = qemu_lsi._events(str(path), False, qemu_lsi.Capture(layer="bus", path=str(path), format="qemu_lsi"), None)
    except BadInput:
        return
    cuts = sorted(data.draw(st.lists(st.integers(0, events.height), max_size=6)))
    expected = _streamed(_qemu_stream.Stream, events, [])
    try:
        got = _streamed(_qemu_stream.CompiledStream, events, cuts)
        summed = _streamed(lambda **kw: _qemu_stream.CompiledStream(**kw, keep_runs=False,
                                                                   stretching=qemu_lsi.STRETCHING), events, cuts)
    except _qemu_stream.NotCompiled:
        steps = _qemu_steps.steps_frame(events)
        assert _qemu_steps.runs_pass(steps, steps["t_ns"].max()) is None
        return
    assert got == expected
    assert summed[1:] == expected[1:]      # the stretches summed in Rust: qemu_lsi.stretches' rows


@SETTINGS
@given(text=traces(), threads=st.integers(2, 5))
def test_a_block_scanned_and_summed_on_threads_gives_what_one_thread_gives(tmp_path, monkeypatch, text, threads):
    """`QemuStream.scan` on any number of threads (the scanner's parts), its lines summed
    at once: the capture read on one thread."""
    path = tmp_path / "t.qemu-trace.txt"
    path.write_bytes(text)
    one = _outcome(path, False)
    monkeypatch.setattr(_qemu_scan, "THREADS", threads)
    monkeypatch.setattr(_qemu_scan, "SMALL_BLOCK", 0)
    assert _outcome(path, False) == one


def test_a_cdb_too_long_for_the_compiled_stream_is_read_the_python_way(tmp_path):
    """`Send command len=99999` (a CDB past the compiled rebuild's longest): the trace is read
    again through the Python stream, whose CDB has that length."""
    lines = qemu_trace_lines([(0x28, 8, 8, 1, False)])
    lines = [ln.replace("Send command len=10", "Send command len=99999") for ln in lines]
    path = tmp_path / "t.qemu-trace.txt"
    path.write_text("\n".join(lines) + "\n")
    cap = qemu_lsi.parse(str(path))
    command = cap.frames["phase_runs"].filter(pl.col("phase") == "COMMAND")
    assert command["info_bytes"].list.len().to_list() == [99999]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(buf=st.binary(max_size=400).map(lambda b: b.replace(b"\r", b"\n")), part=st.integers(1, 60),
       window=st.sampled_from([3, 4096]))
def test_parts_are_whole_lines_of_about_the_part_size(monkeypatch, buf, part, window):
    """A block (here bytes; the mapped file's views alike) cut into parts: all of it, in
    order; each part but the last ends a line; a part is cut at the last line end that fits
    in `part` bytes, or holds one line longer than that."""
    monkeypatch.setattr(qemu_lsi, "NEWLINE_WINDOW", window)
    parts = [bytes(p) for p in qemu_lsi._parts(buf, part)]
    assert b"".join(parts) == buf
    for k, p in enumerate(parts):
        assert p and (p.endswith(b"\n") or k == len(parts) - 1)
        if len(p) > part:
            assert b"\n" not in p[:part] or p.index(b"\n") == len(p) - 1
        elif k < len(parts) - 1:
            nxt = parts[k + 1]
            first_line = nxt[:nxt.index(b"\n") + 1] if b"\n" in nxt else nxt
            assert len(p) + len(first_line) > part


def _transition_runs(cap):
    reducer, times = RunReducer(settle_ns=0), polarity.LineTimes()
    parts = list(reducer.runs(times.counted(cap.chunks())))
    return (pl.concat(parts) if parts else None), reducer.stats, times.asserted


@SETTINGS
@given(commands=COMMANDS)
def test_stretches_give_the_runs_of_the_synthesized_transitions(tmp_path, commands):
    path = tmp_path / "t.qemu-trace.txt"
    path.write_text("\n".join(qemu_trace_lines(commands)) + "\n")
    cap = parsers.parse(str(path), "qemu_lsi", strict=True)
    runs, stats, asserted = _transition_runs(cap)
    given_runs = reduce_stretches(cap.columns["stretches"], [SIGNAL_BIT[n] for n in polarity.DECIDING])
    assert given_runs.runs.equals(runs)
    assert given_runs.stats == stats
    assert {n: given_runs.asserted[SIGNAL_BIT[n]] for n in polarity.DECIDING} == asserted


CAPTURED = sorted((Path(__file__).resolve().parent.parent / "fixtures" / "captured").glob("*/qemu-trace.txt"))


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: p.parent.name)
def test_captured_traces_read_alike(path, monkeypatch):
    """The committed QEMU captures: the compiled passes give what the Python reader gives,
    and the stretches the runs of the synthesized transitions."""
    fast = _outcome(path, True)
    cap = parsers.parse(str(path), "qemu_lsi", strict=True)
    runs, stats, _ = _transition_runs(cap)
    given_runs = reduce_stretches(cap.columns["stretches"], [SIGNAL_BIT[n] for n in polarity.DECIDING])
    assert (runs is None and given_runs.runs.height == 0) or given_runs.runs.equals(runs)
    assert given_runs.stats == stats
    with monkeypatch.context() as m:
        _by_python(m)
        assert _outcome(path, True) == fast


def test_a_selection_right_after_data_out_is_one_run_with_it(tmp_path):
    """The zero-length ARBITRATION before a selection has DATA OUT's phase key (BSY alone):
    after a DATA OUT run with no BUS FREE between, the two stretches are one run, as the
    transitions make them."""
    lines = qemu_trace_lines([(0x2A, 8, 1, 1, False)])
    data_out = max(k for k, line in enumerate(lines) if ":lsi_do_dma " in line)
    again = qemu_trace_lines([(0x28, 16, 1, 2, False)], t0_us=1_795_000_000_000_100)
    path = tmp_path / "t.qemu-trace.txt"
    path.write_text("\n".join(lines[:data_out + 1] + again) + "\n")
    cap = parsers.parse(str(path), "qemu_lsi", strict=True)
    runs, stats, asserted = _transition_runs(cap)
    given_runs = reduce_stretches(cap.columns["stretches"], [SIGNAL_BIT[n] for n in polarity.DECIDING])
    assert given_runs.runs.height < cap.columns["stretches"].height       # stretches were merged
    assert given_runs.runs.equals(runs) and given_runs.stats == stats
    assert {n: given_runs.asserted[SIGNAL_BIT[n]] for n in polarity.DECIDING} == asserted
