"""DSView .dsl captures (parsers/dsview.py), built by tests/gen_logic.py to DSView's layout
(`pv/storesession.cpp`): every header field the reader uses is checked, probe channel
indices with gaps name their `L-INDEX/BLOCK` members, a capture longer than one 2^24-sample
block crosses the block edge, and bad files give one-line errors."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

import gen_logic
from scsitrace import parsers, schema
from scsitrace.errors import BadInput, MissingSignal, TruncatedInput
from test_sigrok import CONTROL, L3, analyse, assert_same_analysis

PROBES = [(b.replace("/", "") + "_N", b) for b in CONTROL] + [(f"DB{i}", f"DB{i}") for i in range(8)]
# channel indices with gaps, as when some DSLogic channels are disabled
INDEX = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 20, 21]


def l3_dsl(path, **kw):
    tr = parsers.parse(L3).transitions()
    idx, words = gen_logic.changes(tr, PROBES, 50, low=set(CONTROL))
    names = {INDEX[k]: p[0] for k, p in enumerate(PROBES)}
    gen_logic.write_dsl(path, gen_logic.expand(idx, words, int(idx[-1])), names, 20_000_000, **kw)
    return str(path)


def test_layout_as_dsview_writes_it(tmp_path):
    path = l3_dsl(tmp_path / "c.dsl")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert names[:3] == ["header", "decoders", "session"]
        assert "L-21/0" in names and "L-9/0" not in names
        header = zf.read("header").decode()
    assert header.startswith("[version]\nversion = 3\n[header]\n")
    assert "samplerate = 20 MHz\n" in header and "total probes = 17\n" in header
    assert "probe21 = DB7\n" in header and "total blocks = 1\n" in header
    assert parsers.detect(path) == "dsview"


def test_dsl_analyses_as_the_source_trace(tmp_path):
    got = analyse(l3_dsl(tmp_path / "c.dsl"))
    assert_same_analysis(got, analyse(L3))
    meta = got[3].capture.meta
    assert meta["samplerate"] == "20 MHz" and meta["sample_period_ns"] == 50.0
    assert meta["probes"]["DB7"] == 21 and meta["probes"]["DB0"] == 10
    assert meta["dsview_version"] == "3" and meta["driver"] == "DSLogic"
    assert meta["samples"] == meta["total_samples"]


def test_version_2_reads_and_version_1_does_not(tmp_path):
    tr = parsers.parse(L3).transitions().head(4000)
    idx, words = gen_logic.changes(tr, PROBES[:9], 50, low=set(CONTROL))
    samples = gen_logic.expand(idx, words, int(idx[-1]))
    names = {k: p[0] for k, p in enumerate(PROBES[:9])}
    for version, ok in ((2, True), (1, False)):
        path = str(tmp_path / f"v{version}.dsl")
        gen_logic.write_dsl(path, samples, names, 20_000_000,
                            header=gen_logic.dsl_header(names, len(samples), 20_000_000, version=version))
        if ok:
            assert parsers.parse(path).transitions().height > 100
        else:
            with pytest.raises(BadInput, match="version '1'"):
                parsers.parse(path)


def test_a_capture_across_the_block_edge(tmp_path):
    """2^24 + 1000 samples: two blocks, the second one 1000 samples (125 bytes) long; a change
    on each side of the edge and one right at it."""
    n = gen_logic.DSL_BLOCK + 1000
    samples = np.zeros(n, dtype=np.uint64)
    bsy, sel = 1, 2
    samples[100:] |= bsy
    samples[gen_logic.DSL_BLOCK - 3:] |= sel
    samples[gen_logic.DSL_BLOCK:] &= ~np.uint64(bsy)
    samples[gen_logic.DSL_BLOCK + 500:] |= bsy
    names = {0: "BSY", 1: "SEL", 2: "MSG", 3: "CD", 4: "IO"}
    path = str(tmp_path / "two.dsl")
    gen_logic.write_dsl(path, samples, names, 100_000_000)
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("L-0/1").file_size == 125
    tr = parsers.parse(path).transitions()
    b = schema.SIGNAL_BIT
    assert tr["t_ns"].to_list() == [0, 1000, (gen_logic.DSL_BLOCK - 3) * 10, gen_logic.DSL_BLOCK * 10,
                                    (gen_logic.DSL_BLOCK + 500) * 10, n * 10]
    assert tr["lines"].to_list() == [0, 1 << b["BSY"], 3 << b["BSY"], 1 << b["SEL"], 3 << b["BSY"],
                                     3 << b["BSY"]]


@pytest.mark.parametrize("what,expect", [
    ("mode", "device mode 1"), ("probes", "total probes"), ("rate", "samplerate"),
    ("missing", "member L-20/0 missing"), ("short", "L-0/0"), ("names", "required bus line")])
def test_bad_dsl(tmp_path, what, expect):
    tr = parsers.parse(L3).transitions().head(2000)
    idx, words = gen_logic.changes(tr, PROBES, 50, low=set(CONTROL))
    samples = gen_logic.expand(idx, words, int(idx[-1]))
    names = {INDEX[k]: p[0] for k, p in enumerate(PROBES)}
    header = gen_logic.dsl_header(names, len(samples), 20_000_000)
    kw = {}
    if what == "mode":
        kw["header"] = header.replace("device mode = 0", "device mode = 1")
    elif what == "probes":
        kw["header"] = header.replace("total probes = 17", "total probes = 16")
    elif what == "rate":
        kw["header"] = header.replace("samplerate = 20 MHz", "samplerate = fast")
    elif what == "missing":
        kw["drop"] = {"L-20/0"}
    elif what == "short":
        kw["cut"] = {"L-0/0": 10}
    elif what == "names":
        names = {i: f"ch{i}" for i in names}
    path = str(tmp_path / f"{what}.dsl")
    gen_logic.write_dsl(path, samples, names, 20_000_000, **kw)
    err = MissingSignal if what == "names" else TruncatedInput if what == "short" else BadInput
    with pytest.raises(err, match=expect):
        parsers.parse(path).transitions()
    if what == "short":          # lenient: the samples the member holds, the rest counted
        cap = parsers.parse(path, strict=False)
        tr2 = cap.transitions()
        assert cap.records.read == 80 and cap.records.skipped == len(samples) - 80
        assert tr2["t_ns"].to_list()[-1] == 80 * 50
