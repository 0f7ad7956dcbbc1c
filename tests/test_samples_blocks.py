"""The block-parallel reduction of sampled captures (parsers/_samples.py `reduce_block` +
`stitch`, each block reduced on its own in a worker) against the serial one (`ProbeBus.rows`,
one carried state over the whole capture): for any split into blocks, the rows tile the
capture exactly as the serial pass finds them, and the one-sample pulses and REQ/ACK
same-sample edges (which a block cannot see across its edges alone) are counted alike."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from parsers import _samples

BUS = ["BSY", "SEL", "MSG", "C/D", "I/O", "REQ", "ACK", "ATN", "RST"]


def probe_bus(bits: list[int], nbits: int, with_db: bool) -> _samples.ProbeBus:
    names = {b: f"X{b}" for b in range(nbits)}
    for bus, bit in zip(BUS, bits):
        names[bit] = bus
    if with_db:
        for i, bit in enumerate(b for b in range(nbits) if b not in bits[:len(BUS)]):
            if i < 8:
                names[bit] = f"DB{i}"
    return _samples.ProbeBus("t.sr", names)


def serial(bus: _samples.ProbeBus, words: np.ndarray):
    bus.restart()
    parts = list(bus.rows(words))
    at = np.concatenate([p[0] for p in parts])
    cols = [np.concatenate([p[k] for p in parts]) for k in (2, 3, 4)]
    meta = bus.sampling_meta(None)
    return at, cols, meta["glitches"], meta["glitch_examples"], meta["req_ack_same_sample"]


def blockwise(bus: _samples.ProbeBus, words: np.ndarray, cuts: list[int]):
    bus.restart()
    at, cols, base = [], [[], [], []], 0
    for lo, hi in zip([0] + cuts, cuts + [len(words)]):
        block = _samples.reduce_block(bus, words[lo:hi], period_ns=10)
        if block.n == 0:
            continue
        a, lines, db, dbp = _samples.stitch(bus, block, base)
        t_local = block.t_local[len(block.rows[0]) - len(a):]
        assert list(t_local) == list(a * 10)              # the worker's times of the kept rows
        at.append(a + base)
        for c, v in zip(cols, (lines, db, dbp)):
            c.append(v)
        base += block.n
    meta = bus.sampling_meta(None)
    return (np.concatenate(at), [np.concatenate(c) for c in cols], meta["glitches"], meta["glitch_examples"],
            meta["req_ack_same_sample"])


@st.composite
def splits(draw):
    dtype, nbits = draw(st.sampled_from([(np.uint8, 8), (np.uint16, 16), (np.uint32, 24), (np.uint64, 40)]))
    n = draw(st.integers(1, 700))
    runs = draw(st.lists(st.tuples(st.integers(0, (1 << nbits) - 1), st.integers(1, 5)), min_size=1, max_size=200))
    words = np.repeat(np.array([w for w, _ in runs], dtype=np.uint64), [r for _, r in runs])[:n].astype(dtype)
    bits = draw(st.permutations(range(nbits)))[:9]
    cuts = sorted(set(draw(st.lists(st.integers(0, len(words)), max_size=8))))
    return words, bits, nbits, cuts, draw(st.booleans())


@given(splits())
@settings(max_examples=150, deadline=None)
def test_blocks_stitched_equal_the_serial_reduction(case):
    words, bits, nbits, cuts, with_db = case
    bus = probe_bus(bits, nbits, with_db and nbits >= 16)
    want = serial(bus, words)
    got = blockwise(bus, words, cuts)
    assert list(got[0]) == list(want[0])
    for g, w in zip(got[1], want[1]):
        assert list(g) == list(w)
    assert got[2:] == want[2:]
    masked = words.astype(np.uint64) & np.uint64(bus.mask)
    changes = np.flatnonzero(np.concatenate(([True], masked[1:] != masked[:-1])))
    assert list(got[0]) == list(changes)        # the rows tile the capture: exactly its changes


def test_a_block_of_64_samples_and_more_finds_changes_at_every_lane():
    """The compiled pass compares 64 samples at once: a change at each lane of a mask, and
    in the tail after the last whole mask, is a row."""
    bus = probe_bus(list(range(9)), 16, False)
    for at in list(range(1, 200)):
        words = np.zeros(200, dtype=np.uint16)
        words[at:] = 1 << 5
        block = _samples.reduce_block(bus, words)
        assert list(block.rows[0]) == [0, at]
