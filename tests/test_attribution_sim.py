"""Acceptance: attribution on the simulator's level-3 trace of the Table 3 workload (here one
disk, as Table 11 was traced) recovers the Table 11 rows the simulator was given: which
component, the 8192-byte period of the host adapter's buffer allocation, the fixed waits
(plus at most one ordinary handshake) and the ranged ones inside their ranges."""
from __future__ import annotations

import json

import pytest

from scsitrace import cli
from scsitrace.sim.params import DiskParams, HbaParams

US = 1_000
SLACK = 1 * US          # the simulator adds its pause to an ordinary handshake; ticks are 50 ns


@pytest.fixture(scope="module")
def attribution(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    trace = d / "t3.ancot"
    assert cli.main(["simulate", "-o", str(trace), "--level", "3", "--disks", "1", "--count", "3",
                     "--seed", "7"]) == 0
    out = d / "a.json"
    assert cli.main(["attribute", str(trace), "--json", str(out)]) == 0
    return json.loads(out.read_text())


def step(result, name, component):
    found = [s for s in result["steps"] if s["step"] == name and s["component"] == component]
    assert found, f"no step {name!r} for {component}: {[s['step'] for s in result['steps']]}"
    return found[0]


def fixed(result, name, component, value, per=1):
    s = step(result, name, component)
    assert value <= s["min_ns"] <= s["max_ns"] <= value + per * SLACK, (name, s)


def ranged(result, name, component, lo_hi):
    s = step(result, name, component)
    lo, hi = lo_hi
    assert lo <= s["min_ns"] <= s["max_ns"] <= hi + SLACK, (name, s)


def test_command_setup_rows(attribution):
    disk, hba = DiskParams(), HbaParams()
    fixed(attribution, "pause before ID message", "target", disk.id_message_pause_ns)
    fixed(attribution, "ack of first command byte", "initiator", hba.command_first_ack_ns)
    fixed(attribution, "ack of remaining command bytes", "initiator", hba.command_rest_ack_ns, per=5)
    fixed(attribution, "pause before disconnect", "target", disk.command_decode_ns)
    fixed(attribution, "ack of disconnect", "initiator", hba.message_ack_ns)
    for name in ("arbitration", "selection", "rearbitration", "reselection"):
        assert step(attribution, name, "neither")["count"] > 0


def test_data_transfer_rows(attribution):
    disk, hba = DiskParams(), HbaParams()
    ranged(attribution, "pause before first data byte", "target", disk.first_data_pause_ns)
    fixed(attribution, f"ack after first {hba.fifo_bytes} bytes", "initiator", hba.fifo_ack_ns)
    (periodic,) = attribution["periodic"]
    assert (periodic["component"], periodic["period_bytes"]) == ("initiator", hba.alloc_block)
    lo, hi = hba.alloc_pause_ns
    assert lo <= periodic["min_ns"] <= periodic["max_ns"] <= hi + SLACK
    ranged(attribution, "pause before save pointer", "target", disk.save_pointer_pause_ns)
    fixed(attribution, "ack of save pointer", "initiator", hba.save_pointer_ack_ns)
    fixed(attribution, "ack of disconnect after data", "initiator", hba.disconnect_ack_ns)


def test_completion_rows(attribution):
    disk, hba = DiskParams(), HbaParams()
    ranged(attribution, "pause before status", "target", disk.status_pause_ns)
    fixed(attribution, "ack of status", "initiator", hba.status_ack_ns)
    fixed(attribution, "ack of command complete", "initiator", hba.complete_ack_ns)
