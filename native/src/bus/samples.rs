//! Sampled logic-analyzer captures (parsers/_samples.py): sample words reduced to the rows
//! where a mapped probe changes, their bus lines by lookup table, one-sample pulses and
//! REQ/ACK same-sample edges counted on the way.
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyReadwriteArray1, PyReadwriteArray2,
            PyUntypedArrayMethods};
use pyo3::prelude::*;

const SKIP: usize = 32; // samples compared at once while nothing changes
const MAX_BITS: usize = 64;

/// The reduction's tables and carried state (see `reduce`).
struct Tables<'a> {
    pos: &'a [i64],
    use_pos: bool,
    base: i64,
    mask: u64,
    used_bytes: &'a [u64],
    lut: &'a [u32],
    inv: u32,
    both: u64,
}

struct State<'a> {
    last: &'a mut [u64],
    st: &'a mut [i64],
    glitches: &'a mut [i64],
    examples: &'a mut [i64],
    n_ex: usize,
}

struct Outs<'a> {
    vals: &'a mut [u64],
    out_i: &'a mut [i64],
    lines: &'a mut [u16],
    db: &'a mut [u8],
    dbp: &'a mut [u8],
}

/// Reduce sample words from st[1] on, at most len(lines) - 1 of them: see
/// parsers/_samples.py `_reduce`. Returns the rows written.
fn reduce<W: Copy + Into<u64>>(words: &[W], tb: &Tables, s: &mut State, o: &mut Outs) -> usize {
    let n = words.len();
    let cap = o.lines.len();
    let mask = tb.mask;
    let prev0 = s.last[0];
    let mut prev = prev0;
    let mut i = s.st[1] as usize;
    let mut started = s.st[0];
    let end = n.min(i + cap - 1);
    let mut k = 0usize;
    if started == 0 && i < end {
        prev = words[i].into() & mask;
        o.out_i[0] = i as i64;
        o.vals[0] = prev;
        k = 1;
        i += 1;
    }
    // pass 1: the samples where a mapped probe changes (SKIP at once while none does)
    while i < end {
        let stop = end.min(i + SKIP);
        if stop - i == SKIP {
            let acc = words[i..stop].iter().fold(0u64, |acc, &w| acc | (w.into() ^ prev));
            if acc & mask == 0 {
                i = stop;
                continue;
            }
        }
        while i < stop {
            let v = words[i].into() & mask;
            o.out_i[k] = i as i64;
            o.vals[k] = v;
            k += (v != prev) as usize;
            prev = v;
            i += 1;
        }
    }
    // pass 2: bus lines of the kept rows, one-sample pulses, REQ/ACK in one sample
    let mut pv = prev0;
    let mut prev_f = s.last[1];
    let mut prev_s = s.st[3];
    let mut same = s.st[2];
    for r in 0..k {
        let v = o.vals[r];
        let at = o.out_i[r];
        let sample = if tb.use_pos { tb.pos[at as usize] } else { tb.base + at };
        let mut word = 0u32;
        for &j in tb.used_bytes {
            word |= tb.lut[(j as usize) * 256 + ((v >> (8 * j)) & 255) as usize];
        }
        word ^= tb.inv;
        if started != 0 {
            let f = v ^ pv;
            if tb.both != 0 && f & tb.both == tb.both {
                same += 1;
            }
            if sample.wrapping_sub(prev_s) == 1 {
                let mut g = f & prev_f; // changed in this sample and the one before
                while g != 0 {
                    let b = g.trailing_zeros() as usize;
                    g &= g - 1;
                    let seen = s.glitches[b] as usize;
                    if seen < s.n_ex {
                        s.examples[b * s.n_ex + seen] = prev_s;
                    }
                    s.glitches[b] += 1;
                }
            }
            prev_f = f;
        } else {
            prev_f = 0; // the first sample is no edge
            started = 1;
        }
        prev_s = sample;
        pv = v;
        o.lines[r] = (word & 0xFFFF) as u16;
        o.db[r] = ((word >> 16) & 0xFF) as u8;
        o.dbp[r] = (word >> 24) as u8;
    }
    s.last[0] = prev;
    s.last[1] = prev_f;
    s.st[0] = started;
    s.st[1] = i as i64;
    s.st[2] = same;
    s.st[3] = prev_s;
    k
}

fn err(what: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("samples_reduce: {what}"))
}

/// parsers/_samples.py `_reduce` (words: uint8, uint16, uint32 or uint64).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn samples_reduce(py: Python, words: &Bound<PyAny>, pos: PyReadonlyArray1<i64>, use_pos: bool, base: i64, mask: u64,
                  used_bytes: PyReadonlyArray1<u64>, lut: PyReadonlyArray2<u32>, inv: u32, both: u64,
                  mut last: PyReadwriteArray1<u64>, mut st: PyReadwriteArray1<i64>,
                  mut glitches: PyReadwriteArray1<i64>, mut examples: PyReadwriteArray2<i64>,
                  mut vals: PyReadwriteArray1<u64>, mut out_i: PyReadwriteArray1<i64>,
                  mut out_lines: PyReadwriteArray1<u16>, mut out_db: PyReadwriteArray1<u8>,
                  mut out_dbp: PyReadwriteArray1<u8>) -> PyResult<usize> {
    let n_ex = examples.shape()[1];
    let tb = Tables {
        pos: pos.as_slice()?, use_pos, base, mask, used_bytes: used_bytes.as_slice()?, lut: lut.as_slice()?, inv, both,
    };
    let mut s = State {
        last: last.as_slice_mut()?, st: st.as_slice_mut()?, glitches: glitches.as_slice_mut()?,
        examples: examples.as_slice_mut()?, n_ex,
    };
    let mut o = Outs {
        vals: vals.as_slice_mut()?, out_i: out_i.as_slice_mut()?, lines: out_lines.as_slice_mut()?,
        db: out_db.as_slice_mut()?, dbp: out_dbp.as_slice_mut()?,
    };
    let cap = o.lines.len();
    if cap < 2 || o.vals.len() < cap || o.out_i.len() < cap || o.db.len() < cap || o.dbp.len() < cap
        || tb.lut.len() != 8 * 256 || tb.used_bytes.iter().any(|&j| j >= 8) || s.last.len() < 2 || s.st.len() < 4
        || s.st[1] < 0 || s.glitches.len() < MAX_BITS || s.examples.len() < MAX_BITS * n_ex {
        return Err(err("array shapes"));
    }
    macro_rules! run {
        ($t:ty) => {
            if let Ok(w) = words.downcast::<PyArray1<$t>>() {
                let w = w.readonly();
                let w = w.as_slice()?;
                if use_pos && tb.pos.len() < w.len() {
                    return Err(err("positions shorter than the words"));
                }
                return Ok(py.allow_threads(|| reduce(w, &tb, &mut s, &mut o)));
            }
        };
    }
    run!(u8);
    run!(u16);
    run!(u32);
    run!(u64);
    Err(err("sample words must be a uint8, uint16, uint32 or uint64 array"))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(samples_reduce, m)?)?;
    Ok(())
}
