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

/// A sample word: compared in its own width (a u16 capture compares 16-bit lanes).
trait Word: Copy + Into<u64> + std::ops::BitXor<Output = Self> + std::ops::BitAnd<Output = Self> + Eq {
    fn zero() -> Self;
    fn of(v: u64) -> Self;
    /// Bit j set when words[i + j] differs from words[i + j - 1] in `mask` (0 < i, i + 64 <= len).
    fn changes64(words: &[Self], i: usize, mask: Self) -> u64 {
        let cur = &words[i..i + LANES];
        let before = &words[i - 1..i - 1 + LANES];
        let mut m = 0u64;
        for j in 0..LANES {
            m |= (((cur[j] ^ before[j]) & mask != Self::zero()) as u64) << j;
        }
        m
    }
}
macro_rules! word {
    ($($t:ty),*) => {$(impl Word for $t {
        fn zero() -> Self { 0 }
        fn of(v: u64) -> Self { v as $t }
    })*};
}
word!(u32, u64);

impl Word for u8 {
    fn zero() -> Self { 0 }
    fn of(v: u64) -> Self { v as u8 }
    #[cfg(target_arch = "x86_64")]
    fn changes64(words: &[Self], i: usize, mask: Self) -> u64 {
        use std::arch::x86_64::*;
        assert!(i > 0 && i + LANES <= words.len());
        // SAFETY: SSE2 is part of x86_64; the 16-byte loads stay inside words[i - 1..i + 64]
        // (asserted above)
        unsafe {
            let p = words.as_ptr().add(i);
            let (m, zero) = (_mm_set1_epi8(mask as i8), _mm_setzero_si128());
            let mut same = 0u64;
            for q in 0..4 {
                let cur = _mm_loadu_si128(p.add(16 * q) as *const __m128i);
                let before = _mm_loadu_si128(p.add(16 * q).sub(1) as *const __m128i);
                let eq = _mm_cmpeq_epi8(_mm_and_si128(_mm_xor_si128(cur, before), m), zero);
                same |= (_mm_movemask_epi8(eq) as u32 as u64) << (16 * q);
            }
            !same
        }
    }
}

impl Word for u16 {
    fn zero() -> Self { 0 }
    fn of(v: u64) -> Self { v as u16 }
    #[cfg(target_arch = "x86_64")]
    fn changes64(words: &[Self], i: usize, mask: Self) -> u64 {
        use std::arch::x86_64::*;
        assert!(i > 0 && i + LANES <= words.len());
        // SAFETY: SSE2 is part of x86_64; the 8-lane loads stay inside words[i - 1..i + 64]
        // (asserted above)
        unsafe {
            let p = words.as_ptr().add(i);
            let (m, zero) = (_mm_set1_epi16(mask as i16), _mm_setzero_si128());
            let lanes = |k: usize| {
                let cur = _mm_loadu_si128(p.add(8 * k) as *const __m128i);
                let before = _mm_loadu_si128(p.add(8 * k).sub(1) as *const __m128i);
                _mm_cmpeq_epi16(_mm_and_si128(_mm_xor_si128(cur, before), m), zero)
            };
            let mut same = 0u64;
            for q in 0..4 {
                let eq = _mm_packs_epi16(lanes(2 * q), lanes(2 * q + 1));
                same |= (_mm_movemask_epi8(eq) as u32 as u64) << (16 * q);
            }
            !same
        }
    }
}

const LANES: usize = 64; // samples compared at once: one bit each in a change mask

/// Positions of the samples where a mapped probe changes, sample 0 first (a block is reduced
/// as if it began the capture). 64 samples make one mask (compared in the word's own width,
/// which the compiler vectorizes); its set bits are the changes.
fn change_positions<W: Word>(words: &[W], mask: W, out: &mut Vec<i64>) {
    out.clear();
    if words.is_empty() {
        return;
    }
    out.push(0);
    let n = words.len();
    let mut i = 1usize;
    while i + LANES <= n {
        let mut m = W::changes64(words, i, mask);
        while m != 0 {
            out.push((i + m.trailing_zeros() as usize) as i64);
            m &= m - 1;
        }
        i += LANES;
    }
    while i < n {
        if (words[i] ^ words[i - 1]) & mask != W::zero() {
            out.push(i as i64);
        }
        i += 1;
    }
}

/// One block's rows and the edges it can see on its own (parsers/_samples.py `Block`).
struct BlockRows {
    lines: Vec<u16>,
    db: Vec<u8>,
    dbp: Vec<u8>,
    last_v: u64,
    last_f: u64,
    same: i64,
}

/// Bus lines of the rows at `at` (lookup table per byte, active-low inversions), one-sample
/// pulses (glitches[bit], the first `n_ex` starts in examples) and REQ/ACK same-sample edges.
fn block_rows<W: Word>(words: &[W], at: &[i64], tb: &Tables, glitches: &mut [i64], examples: &mut [i64],
                       n_ex: usize) -> BlockRows {
    let k = at.len();
    let mut r = BlockRows { lines: vec![0; k], db: vec![0; k], dbp: vec![0; k], last_v: 0, last_f: 0, same: 0 };
    let (mut pv, mut prev_f, mut prev_s) = (0u64, 0u64, -2i64);
    for (row, &s) in at.iter().enumerate() {
        let v = words[s as usize].into() & tb.mask;
        let mut word = 0u32;
        for &j in tb.used_bytes {
            word |= tb.lut[(j as usize) * 256 + ((v >> (8 * j)) & 255) as usize];
        }
        word ^= tb.inv;
        if row > 0 {
            let f = v ^ pv;
            r.same += (tb.both != 0 && f & tb.both == tb.both) as i64;
            if s - prev_s == 1 {
                let mut g = f & prev_f; // changed in this sample and the one before
                while g != 0 {
                    let b = g.trailing_zeros() as usize;
                    g &= g - 1;
                    let seen = glitches[b] as usize;
                    if seen < n_ex {
                        examples[b * n_ex + seen] = prev_s;
                    }
                    glitches[b] += 1;
                }
            }
            prev_f = f;
        }
        prev_s = s;
        pv = v;
        r.lines[row] = (word & 0xFFFF) as u16;
        r.db[row] = ((word >> 16) & 0xFF) as u8;
        r.dbp[row] = (word >> 24) as u8;
    }
    r.last_v = pv;
    r.last_f = if k > 1 { prev_f } else { 0 };
    r
}

type BlockOut<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<u16>>, Bound<'py, PyArray1<u8>>,
                      Bound<'py, PyArray1<u8>>, u64, i64, u64);

/// parsers/_samples.py `reduce_block`: a block of sample words reduced on its own in two
/// passes (the change positions, then their rows), GIL released. Returns (positions, lines,
/// db, dbp, last masked word, last row's changed probes, REQ/ACK same-sample edges); counts
/// one-sample pulses into `glitches`/`examples` (block-local sample numbers).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn samples_block<'py>(py: Python<'py>, words: &Bound<'py, PyAny>, mask: u64, used_bytes: PyReadonlyArray1<u64>,
                      lut: PyReadonlyArray2<u32>, inv: u32, both: u64, mut glitches: PyReadwriteArray1<i64>,
                      mut examples: PyReadwriteArray2<i64>) -> PyResult<BlockOut<'py>> {
    let n_ex = examples.shape()[1];
    let empty: [i64; 0] = [];
    let tb = Tables { pos: &empty, use_pos: false, base: 0, mask, used_bytes: used_bytes.as_slice()?,
                      lut: lut.as_slice()?, inv, both };
    let g = glitches.as_slice_mut()?;
    let ex = examples.as_slice_mut()?;
    if tb.lut.len() != 8 * 256 || tb.used_bytes.iter().any(|&j| j >= 8) || g.len() < MAX_BITS
        || ex.len() < MAX_BITS * n_ex {
        return Err(err("array shapes"));
    }
    macro_rules! run {
        ($t:ty) => {
            if let Ok(w) = words.downcast::<PyArray1<$t>>() {
                let w = w.readonly();
                let w = w.as_slice()?;
                let (at, r) = py.allow_threads(|| {
                    let mut at = Vec::with_capacity(w.len() / 4 + 16);
                    change_positions(w, <$t as Word>::of(mask), &mut at);
                    let r = block_rows(w, &at, &tb, g, ex, n_ex);
                    (at, r)
                });
                return Ok((PyArray1::from_vec_bound(py, at), PyArray1::from_vec_bound(py, r.lines),
                           PyArray1::from_vec_bound(py, r.db), PyArray1::from_vec_bound(py, r.dbp),
                           r.last_v, r.same, r.last_f));
            }
        };
    }
    run!(u8);
    run!(u16);
    run!(u32);
    run!(u64);
    Err(err("sample words must be a uint8, uint16, uint32 or uint64 array"))
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
    m.add_function(wrap_pyfunction!(samples_block, m)?)?;
    Ok(())
}
