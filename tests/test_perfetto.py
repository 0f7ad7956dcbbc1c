"""`scsitrace export --perfetto`: the file read back with the perfetto package's protos has
every I/O (its times, command, LBA, bytes, status), every bus phase, every stage nested in
its I/O, and counters that are the layer's declared tables (the HTML's).

Perfetto's trace processor (`perfetto.trace_processor.TraceProcessor`) is not used: it needs a
trace_processor_shell binary that the perfetto package downloads at run time, and no package
registry ships one; reading the file back with the protos checks the same content."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import scsitrace
from scsitrace.cli import main

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

ROOT = Path(__file__).resolve().parent.parent
TRACES = {"bus": ROOT / "fixtures/captured/lsi_randread4k/qemu-trace.txt",
          "bus-ancot": ROOT / "fixtures/bus/table3-l3/trace.ancot",
          "bus-level1": ROOT / "fixtures/bus/table3-l1/trace.ancot",
          "block": ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0",
          "usb": ROOT / "fixtures/captured/usb_bufread32k/usbmon.txt",
          "uas": ROOT / "fixtures/captured/uas_randread4k/usbmon.txt",
          "scsilog": ROOT / "fixtures/captured/lsi_randread4k/ftrace.txt",
          "sgio": ROOT / "fixtures/captured/sg/lsi_sg_tools/parallel.strace.txt"}


def read_back(path: Path):
    """(tracks uuid -> (name, parent), slices per track [(name, start, end, depth, args)],
    counters per track [(t, value)]): begin/end replayed per track in time order (file order
    at equal times, as trace processor sorts), asserting that they nest."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    tracks, slices, counters, open_ = {}, {}, {}, {}
    events = []
    for i, p in enumerate(trace.packet):
        assert p.trusted_packet_sequence_id == 1
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = (d.name, d.parent_uuid if d.HasField("parent_uuid") else None)
        elif p.HasField("track_event"):
            events.append((p.timestamp, i, p.track_event))
    for t, _, e in sorted(events, key=lambda x: (x[0], x[1])):
        assert e.track_uuid in tracks
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            args = {}
            for a in e.debug_annotations:
                args[a.name] = getattr(a, a.WhichOneof("value"))
            open_.setdefault(e.track_uuid, []).append((e.name, t, args))
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            name, start, args = open_[e.track_uuid].pop()
            assert start <= t
            depth = len(open_[e.track_uuid])
            slices.setdefault(e.track_uuid, []).append((name, start, t, depth, args))
        elif e.type == pb.TrackEvent.TYPE_COUNTER:
            counters.setdefault(e.track_uuid, []).append((t, e.double_counter_value))
    assert not any(open_.values()), "every slice ends"
    return tracks, slices, counters


def export(capsys, tmp_path, trace: Path):
    out = tmp_path / "t.pftrace"
    assert main(["export", str(trace), "--perfetto", str(out)]) == 0
    assert main(["analyze", str(trace), "--ios", str(tmp_path / "ios.parquet"), "--json", str(tmp_path / "s.json"),
                 "--segments", str(tmp_path / "seg.parquet")]) == 0
    capsys.readouterr()
    summary = json.loads((tmp_path / "s.json").read_text())
    return (read_back(out), pl.read_parquet(tmp_path / "ios.parquet"), pl.read_parquet(tmp_path / "seg.parquet"),
            summary)


@pytest.mark.parametrize("name", TRACES)
def test_every_io_is_a_slice_with_its_times_and_fields(capsys, tmp_path, name):
    (tracks, slices, counters), ios, segments, summary = export(capsys, tmp_path, TRACES[name])
    elapsed = summary["elapsed_ns"]
    lanes = {u for u, (n, parent) in tracks.items() if n.startswith("I/Os")}
    found = {}
    for u in lanes:
        device = tracks[tracks[u][1]][0]
        for s in slices.get(u, []):
            if s[3] == 0:
                found[s[4]["io"]] = (device, *s)
    assert len(found) == ios.height > 0
    for io in ios.iter_rows(named=True):
        device, label, start, end, _, args = found[io["io"]]
        assert device == (io["device_id"] or io["device"] or "unknown")
        assert start == io["start_ns"]
        assert end == (io["end_ns"] if io["end_ns"] is not None else max(elapsed, io["start_ns"]))
        assert label == (io.get("command") or io["op"] or "I/O")      # level 1: no command known
        for key in ("lba", "blocks", "bytes", "status"):
            assert args.get(key) == io[key], key
        assert args.get("complete") == io["complete"]          # (level 1: unknown, no argument)


@pytest.mark.parametrize("name", ["bus", "bus-ancot"])
def test_every_bus_phase_is_a_slice(capsys, tmp_path, name):
    (tracks, slices, _), _, segments, _ = export(capsys, tmp_path, TRACES[name])
    bus = next(u for u, (n, _) in tracks.items() if n == "bus phases")
    got = sorted((s[1], s[2], s[0]) for s in slices[bus])
    assert got == sorted(segments.select("start_ns", "end_ns", "phase").iter_rows())


@pytest.mark.parametrize("name", ["usb", "uas", "scsilog", "sgio"])
def test_command_stages_are_nested_in_their_io(capsys, tmp_path, name):
    (tracks, slices, _), _, segments, _ = export(capsys, tmp_path, TRACES[name])
    nested = []
    for u, (n, _) in tracks.items():
        if n.startswith("I/Os"):
            rows = sorted(slices.get(u, []), key=lambda s: (s[1], -s[3]))
            parents = [s for s in rows if s[3] == 0]
            for s in rows:
                if s[3] == 1:
                    parent = next(p for p in parents if p[1] <= s[1] and s[2] <= p[2])
                    nested.append((parent[4]["io"], s[0], s[1], s[2]))
    expected = segments.filter(pl.col("io").is_not_null()).select("io", "phase", "start_ns", "end_ns")
    assert sorted(nested) == sorted(expected.iter_rows()) and nested


def test_btt_stages_are_nested_in_their_io(capsys, tmp_path):
    (tracks, slices, _), ios, _, _ = export(capsys, tmp_path, TRACES["block"])
    by_io = {}
    for u, (n, _) in tracks.items():
        if n.startswith("I/Os"):
            rows = sorted(slices.get(u, []), key=lambda s: (s[1], s[3]))
            for s in rows:
                if s[3] == 0:
                    current = by_io.setdefault(s[4]["io"], {})
            for s in rows:
                if s[3] == 1:
                    io = next(p[4]["io"] for p in rows if p[3] == 0 and p[1] <= s[1] and s[2] <= p[2])
                    by_io[io][s[0]] = (s[1], s[2])
    for io in ios.iter_rows(named=True):
        st = by_io[io["io"]]
        assert st["Q2G"] == (io["start_ns"], io["start_ns"] + io["q2g_ns"])
        assert st["D2C"] == (io["end_ns"] - io["d2c_ns"], io["end_ns"])
        assert st["I2D"][1] - st["I2D"][0] == io["i2d_ns"]
        assert st["G2I"][0] == st["Q2G"][1]


COUNTERS = {"queue depth": ("depth_steps", "t_ns", "in_flight"),
            "max in flight": ("series_queue", "start_ns", "max_in_flight"),
            "mean in flight": ("series_queue", "start_ns", "mean_in_flight"),
            "MB/s": ("series_rates", "start_ns", "mib_s"),
            "I/Os per second": ("series_rates", "start_ns", "iops")}


@pytest.mark.parametrize("name", TRACES)
def test_counters_are_the_declared_tables(capsys, tmp_path, name):
    """The counters are the layer's declared tables (the ones the HTML plots draw) value for
    value and time for time: queue depth at every change (depth_steps, from 0 before the first
    start), max and mean in flight per bin (series_queue), MB/s and I/Os per second
    (series_rates); the depth is never negative, its maximum per bin is the bin's max in
    flight, and it never exceeds the I/O lanes the slices needed (every I/O in flight at once
    has its own lane)."""
    (tracks, slices, counters), _, _, _ = export(capsys, tmp_path, TRACES[name])
    tables = scsitrace.analyze(TRACES[name]).tables
    root = next(u for u, (n, parent) in tracks.items() if parent is None)
    shown = {n: counters.get(u, []) for u, (n, parent) in tracks.items() if parent == root and n in COUNTERS}
    if not tables["depth_steps"].height:          # no completed I/O (a level-3 capture of one command)
        assert not shown
        return
    for track, (table, time, column) in COUNTERS.items():
        frame = tables[table].filter(pl.col(column).is_not_null())
        want = [(t, float(v)) for t, v in frame.select(time, column).iter_rows()]
        if track == "queue depth" and want and want[0][0] > 0:
            want.insert(0, (0, 0.0))
        assert shown.get(track, []) == want, track
    depth = shown["queue depth"]
    assert min(v for _, v in depth) >= 0
    lanes = sum(1 for n, _ in tracks.values() if n.startswith("I/Os"))
    assert max(v for _, v in depth) <= lanes
    queue = tables["series_queue"]
    for row in queue.iter_rows(named=True):
        inside = [v for t, v in depth if row["start_ns"] <= t < row["end_ns"]]
        before = [v for t, v in depth if t < row["start_ns"]]
        level = max(inside + before[-1:]) if inside or before else 0
        assert level == row["max_in_flight"], row


@pytest.mark.parametrize("trace", [TRACES["sgio"], ROOT / "fixtures/bus/random4k-l3/trace.ancot"])
def test_each_device_has_its_queue_depth(capsys, tmp_path, trace):
    """With several devices, each device's track holds a `queue depth` counter: its rows of
    device_depth_steps (from 0 before its first start), and at every instant the devices'
    levels add up to the root's queue depth."""
    (tracks, _, counters), ios, _, _ = export(capsys, tmp_path, trace)
    steps = scsitrace.analyze(trace).tables["device_depth_steps"]
    assert steps["device_id"].n_unique() >= 2
    assert set(steps["device_id"]) <= set(ios["device_id"].drop_nulls())
    device_tracks = {u: n for u, (n, parent) in tracks.items() if n in set(steps["device_id"])}
    shown = {device_tracks[parent]: counters.get(u, []) for u, (n, parent) in tracks.items()
             if n == "queue depth" and parent in device_tracks}
    assert set(shown) == set(steps["device_id"])
    for (device_id,), rows in steps.group_by("device_id"):
        want = [(t, float(v)) for t, v in rows.select("t_ns", "in_flight").iter_rows()]
        if want[0][0] > 0:
            want.insert(0, (0, 0.0))
        assert shown[device_id] == want, device_id
    root = next(u for u, (n, parent) in tracks.items() if parent is None)
    total = next(counters[u] for u, (n, parent) in tracks.items() if parent == root and n == "queue depth")
    for t, level in total:
        assert level == sum(next((v for s, v in reversed(c) if s <= t), 0) for c in shown.values()), t


@pytest.mark.parametrize("case", ["lsi_randread4k", "usb_bufread32k"])
def test_crosslayer_one_io_across_the_layer_tracks(capsys, tmp_path, case):
    """crosslayer --perfetto: per layer a track group with every matched I/O at its times
    (the table's, in us), and each I/O's slices joined by one flow across the layers."""
    out = tmp_path / "cl.pftrace"
    case_dir = ROOT / "fixtures/captured" / case
    assert main(["crosslayer", str(case_dir), "--perfetto", str(out), "--json", str(tmp_path / "cl.json")]) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "cl.json").read_text())
    tracks, slices, _ = read_back(out)
    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    flows = {}
    for p in trace.packet:
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            for f in p.track_event.flow_ids:
                flows.setdefault(f, []).append(p.track_event.name)
    layers = [k[:-len("_start_us")] for k in doc["ios"][0] if k.endswith("_start_us")]
    assert len(layers) >= 3
    got = {}
    for u, (name, parent) in tracks.items():
        if name.startswith("I/Os"):
            layer = next(s[4]["layer"] for s in slices[u])
            for s in slices[u]:
                got[(layer, s[4]["io"])] = (s[1], s[2], s[0])
    for row in doc["ios"]:
        for layer in layers:
            start = round(row[f"{layer}_start_us"] * 1000)
            end = round((row[f"{layer}_start_us"] + row[f"{layer}_dur_us"]) * 1000)
            assert got[(layer, row["io"])] == (start, end, f"{row['op']} #{row['io']}")
        assert flows[row["io"] + 1] == [f"{row['op']} #{row['io']}"] * len(layers)


def test_the_report_links_the_timeline_it_writes_beside_it(capsys, tmp_path):
    """`report --perfetto` writes the timeline (every I/O as export writes it) and the page
    links it relative to itself; without it the page says how to make one."""
    import re
    trace = TRACES["block"]
    (tmp_path / "pages").mkdir()
    page, timeline = tmp_path / "pages" / "r.html", tmp_path / "t.pftrace"
    assert main(["report", str(trace), "-o", str(page), "--perfetto", str(timeline)]) == 0
    assert main(["export", str(trace), "--perfetto", str(tmp_path / "e.pftrace")]) == 0
    capsys.readouterr()
    assert read_back(timeline) == read_back(tmp_path / "e.pftrace")
    assert re.search(r'<a href="\.\./t\.pftrace">t\.pftrace</a>', page.read_text())
    assert main(["report", str(trace), "-o", str(tmp_path / "plain.html")]) == 0
    assert "--perfetto TIMELINE.pftrace" in (tmp_path / "plain.html").read_text()


def test_a_timeline_written_over_its_input_is_refused_before_any_work(tmp_path, capsys):
    import hashlib
    import shutil
    trace = Path(shutil.copy(TRACES["scsilog"], tmp_path / "ftrace.txt"))
    before = hashlib.sha256(trace.read_bytes()).hexdigest()
    for argv in (["export", str(trace), "--perfetto", str(trace)],
                 ["report", str(trace), "-o", str(tmp_path / "r.html"), "--perfetto", str(trace)]):
        assert main(argv) == 2
        assert "--perfetto" in capsys.readouterr().err
    assert hashlib.sha256(trace.read_bytes()).hexdigest() == before and not (tmp_path / "r.html").exists()
