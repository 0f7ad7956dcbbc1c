"""The QEMU capture rig (fixtures/capture/): its workload declarations and guest commands are
deterministic, and (marked `qemu`, skipped without qemu-system-x86_64) a fresh smoke capture
issues the same commands, sizes and LBAs as the committed one.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RIG_DIR = REPO / "fixtures" / "capture"
CAPTURED = REPO / "fixtures" / "captured"


def load_rig():
    spec = importlib.util.spec_from_file_location("capture_rig", RIG_DIR / "rig.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rig = load_rig()


def dispatched(blkparse_text: str) -> list[tuple[str, str, str]]:
    """(rwbs, sector, sectors) of every D (issued to the driver) line of blkparse output."""
    out = []
    for line in blkparse_text.splitlines():
        f = line.split()
        if len(f) >= 10 and f[5] == "D" and f[8] == "+":
            out.append((f[6], f[7], f[9]))
    return out


def test_workloads_declare_every_disk_kind_and_shape():
    doc = rig.load_workloads(RIG_DIR / "workloads.toml")
    shapes = {(c["disk"], c["op"], c["pattern"], c["bs"], c.get("direct", True)) for c in doc["case"]}
    for disk in rig.DISK_KINDS:
        assert (disk, "read", "seq", 32768, True) in shapes
        assert (disk, "write", "seq", 32768, True) in shapes
        assert (disk, "read", "rand", 4096, True) in shapes
        assert (disk, "read", "seq", 32768, False) in shapes
    assert any(c.get("smoke") for c in doc["case"])


def test_guest_commands_are_deterministic_and_inside_the_disk():
    doc = rig.load_workloads(RIG_DIR / "workloads.toml")
    disk_bytes = doc["disk_mib"] << 20
    for case in doc["case"]:
        a = rig.workload_commands(case, doc["seed"], disk_bytes)
        assert a == rig.workload_commands(case, doc["seed"], disk_bytes)
        offsets = rig.block_offsets(case, doc["seed"], disk_bytes)
        assert len(offsets) == case["count"]
        assert all(0 <= b and (b + 1) * case["bs"] <= disk_bytes for b in offsets)


def test_committed_workloads_match_the_declaration():
    """Each committed case was captured with the guest commands the declaration gives now."""
    doc = rig.load_workloads(RIG_DIR / "workloads.toml")
    for case in doc["case"]:
        committed = json.loads((CAPTURED / case["name"] / "workload.json").read_text())
        assert committed["guest_commands"] == rig.workload_commands(case, doc["seed"], doc["disk_mib"] << 20)


def test_committed_random_reads_hit_the_declared_blocks():
    """The kernel's dispatched sectors are exactly the rig's offsets (direct I/O, 4 KiB)."""
    doc = rig.load_workloads(RIG_DIR / "workloads.toml")
    for case in (c for c in doc["case"] if c["pattern"] == "rand"):
        got = dispatched((CAPTURED / case["name"] / "ref.blkparse.txt").read_text())
        want = [str(b * case["bs"] // 512) for b in rig.block_offsets(case, doc["seed"], doc["disk_mib"] << 20)]
        assert [sector for _, sector, _ in got] == want
        assert {n for _, _, n in got} == {str(case["bs"] // 512)}


@pytest.mark.parametrize("bad, why", [
    ('[[case]]\nname = "x"\ndisk = "scsi"\nop = "read"\npattern = "seq"\nbs = 512\ncount = 1\n', "bad disk"),
    ('[[case]]\nname = "x"\ndisk = "lsi"\nop = "read"\npattern = "seq"\nbs = 512\n', "lacks 'count'"),
    ('[[case]]\nname = "X y"\ndisk = "lsi"\nop = "read"\npattern = "seq"\nbs = 512\ncount = 1\n', "unique"),
    ('[[case]]\nname = "x"\ndisk = "lsi"\nop = "read"\npattern = "seq"\nbs = 1000\ncount = 1\n', "multiple of 512"),
    ('disk_mib = 1\n[[case]]\nname = "x"\ndisk = "lsi"\nop = "read"\npattern = "seq"\nbs = 4096\ncount = 257\n',
     "past the end"),
])
def test_bad_declarations_are_refused(tmp_path, bad, why):
    p = tmp_path / "w.toml"
    p.write_text(bad)
    with pytest.raises(rig.RigError, match=why):
        rig.load_workloads(p)


def test_unknown_case_is_refused():
    doc = rig.load_workloads(RIG_DIR / "workloads.toml")
    with pytest.raises(rig.RigError, match="unknown case"):
        rig.select_cases(doc, ["no_such_case"], smoke=False)


@pytest.mark.qemu
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86_64 not installed")
def test_smoke_capture_repeats_the_committed_commands(tmp_path):
    """A fresh smoke capture (about 40 s: boot + one case) issues the same commands, sizes
    and LBAs as the committed one; only timings differ."""
    res = subprocess.run(["bash", str(RIG_DIR / "run.sh"), "--smoke", "--no-install", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    smoke = [c["name"] for c in rig.load_workloads(RIG_DIR / "workloads.toml")["case"] if c.get("smoke")]
    for name in smoke:
        fresh = dispatched((tmp_path / name / "ref.blkparse.txt").read_text())
        committed = dispatched((CAPTURED / name / "ref.blkparse.txt").read_text())
        assert fresh == committed and fresh
