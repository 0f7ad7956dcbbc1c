//! Sampled logic-analyzer captures (parsers/_samples.py): sample words reduced to the rows
//! where a mapped probe changes, their bus lines by lookup table, one-sample pulses and
//! REQ/ACK same-sample edges counted on the way.
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

const SKIP: usize = 32; // samples compared at once while nothing changes
const MAX_BITS: usize = 64;
const N_EX: usize = 5; // glitch examples kept per probe (parsers/_samples.py MAX_GLITCH_EXAMPLES)

/// The reduction's tables, read by name from parsers/_samples.py `ProbeBus`: the mapped
/// probes' mask, the bytes of a word they use, per byte a 256-entry table of its bits'
/// lines (bits 0-15), DB (16-23) and DBP (24), the active-low inversions (same layout), and
/// the REQ and ACK probes (0 when one is not mapped).
#[derive(FromPyObject)]
struct ProbeTables<'py> {
    #[pyo3(attribute)]
    mask: u64,
    #[pyo3(attribute)]
    used_bytes: PyReadonlyArray1<'py, u64>,
    #[pyo3(attribute)]
    lut: PyReadonlyArray2<'py, u32>,
    #[pyo3(attribute)]
    inv: u32,
    #[pyo3(attribute)]
    both: u64,
}

impl ProbeTables<'_> {
    fn tables<'a>(&'a self, pos: &'a [i64], use_pos: bool, base: i64) -> PyResult<Tables<'a>> {
        let tb = Tables { pos, use_pos, base, mask: self.mask, used_bytes: self.used_bytes.as_slice()?,
                          lut: self.lut.as_slice()?, inv: self.inv, both: self.both };
        if tb.lut.len() != 8 * 256 || tb.used_bytes.iter().any(|&j| j >= 8) {
            return Err(err("array shapes"));
        }
        Ok(tb)
    }
}

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
    last: &'a mut [u64; 2],
    st: &'a mut [i64; 4],
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

/// One block reduced on its own (parsers/_samples.py `reduce_block`): its rows (positions
/// in the block, lines, DB, DBP; with a whole-ns sample period, their times from the block's
/// start), the last masked word, the probes changed at the last row, REQ/ACK same-sample
/// edges, and its one-sample pulses per probe with the first few starts (block-local).
#[pyclass(get_all)]
struct BlockPass {
    at: Py<PyArray1<i64>>,
    lines: Py<PyArray1<u16>>,
    db: Py<PyArray1<u8>>,
    dbp: Py<PyArray1<u8>>,
    t_local: Option<Py<PyArray1<i64>>>,
    last_v: u64,
    last_f: u64,
    same: i64,
    glitches: Py<PyArray1<i64>>,
    examples: Py<PyArray2<i64>>,
}

/// Glitch examples as a (probe, example) array.
fn examples_array(py: Python, examples: Vec<i64>) -> PyResult<Py<PyArray2<i64>>> {
    Ok(examples.into_pyarray_bound(py).reshape([MAX_BITS, N_EX])?.unbind())
}

/// parsers/_samples.py `reduce_block`: a block of sample words (uint8, uint16, uint32 or
/// uint64) reduced on its own in two passes (the change positions, then their rows), GIL
/// released; `period_ns`: the rows' times too.
#[pyfunction]
#[pyo3(signature = (words, tables, period_ns=None))]
fn samples_block(py: Python, words: &Bound<PyAny>, tables: ProbeTables, period_ns: Option<i64>)
                 -> PyResult<BlockPass> {
    let empty: [i64; 0] = [];
    let tb = tables.tables(&empty, false, 0)?;
    let (mut g, mut ex) = (vec![0i64; MAX_BITS], vec![0i64; MAX_BITS * N_EX]);
    macro_rules! run {
        ($t:ty) => {
            if let Ok(w) = words.downcast::<PyArray1<$t>>() {
                let w = w.readonly();
                let w = w.as_slice()?;
                let (at, t, r) = py.allow_threads(|| {
                    let mut at = Vec::with_capacity(w.len() / 4 + 16);
                    change_positions(w, <$t as Word>::of(tb.mask), &mut at);
                    let r = block_rows(w, &at, &tb, &mut g, &mut ex, N_EX);
                    let t = period_ns.map(|p| at.iter().map(|&a| a * p).collect::<Vec<i64>>());
                    (at, t, r)
                });
                return Ok(BlockPass {
                    at: at.into_pyarray_bound(py).unbind(), lines: r.lines.into_pyarray_bound(py).unbind(),
                    db: r.db.into_pyarray_bound(py).unbind(), dbp: r.dbp.into_pyarray_bound(py).unbind(),
                    t_local: t.map(|t| t.into_pyarray_bound(py).unbind()), last_v: r.last_v, last_f: r.last_f,
                    same: r.same, glitches: g.into_pyarray_bound(py).unbind(), examples: examples_array(py, ex)?,
                });
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
    pyo3::exceptions::PyValueError::new_err(format!("samples: {what}"))
}

/// Rows of the serial reduction (parsers/_samples.py `ProbeBus.rows`): their positions in
/// the words, lines, DB and DBP.
#[pyclass(get_all)]
struct Rows {
    at: Py<PyArray1<i64>>,
    lines: Py<PyArray1<u16>>,
    db: Py<PyArray1<u8>>,
    dbp: Py<PyArray1<u8>>,
}

/// The serial reduction of a stream of sample words (parsers/_samples.py `ProbeBus.rows`):
/// the state it carries from block to block (the last row's word and changed probes, its
/// sample, REQ/ACK same-sample edges, one-sample pulses per probe and their first starts).
#[pyclass]
struct SampleStream {
    last: [u64; 2],
    st: [i64; 4], // started, resume position, REQ/ACK same-sample edges, last row's sample
    glitches: Vec<i64>,
    examples: Vec<i64>,
    vals: Vec<u64>,
    out_i: Vec<i64>,
    lines: Vec<u16>,
    db: Vec<u8>,
    dbp: Vec<u8>,
}

#[pymethods]
impl SampleStream {
    /// At most `rows` rows handed over at a time.
    #[new]
    fn new(rows: usize) -> PyResult<Self> {
        if rows < 2 {
            return Err(err("at least 2 rows at a time"));
        }
        Ok(SampleStream { last: [0; 2], st: [0; 4], glitches: vec![0; MAX_BITS], examples: vec![0; MAX_BITS * N_EX],
                          vals: vec![0; rows + SKIP], out_i: vec![0; rows + SKIP], lines: vec![0; rows],
                          db: vec![0; rows], dbp: vec![0; rows] })
    }

    /// Start on a new block of words (after the previous one).
    fn start_block(&mut self) {
        self.st[1] = 0;
    }

    /// Words of the current block left to reduce (of `n`).
    fn pending(&self, n: usize) -> bool {
        (self.st[1] as usize) < n
    }

    /// The next rows of the current block: the samples where a mapped probe changes, at
    /// most `rows` at a time. A sample's number is pos[i] (the rows of a changes-only
    /// export) when `pos` is given, else base + i.
    #[pyo3(signature = (words, tables, base, pos=None))]
    fn reduce(&mut self, py: Python, words: &Bound<PyAny>, tables: ProbeTables, base: i64,
              pos: Option<PyReadonlyArray1<i64>>) -> PyResult<Rows> {
        let pos_slice = match &pos {
            Some(p) => p.as_slice()?,
            None => &[],
        };
        let tb = tables.tables(pos_slice, pos.is_some(), base)?;
        let mut s = State { last: &mut self.last, st: &mut self.st, glitches: &mut self.glitches,
                            examples: &mut self.examples, n_ex: N_EX };
        let mut o = Outs { vals: &mut self.vals, out_i: &mut self.out_i, lines: &mut self.lines, db: &mut self.db,
                           dbp: &mut self.dbp };
        macro_rules! run {
            ($t:ty) => {
                if let Ok(w) = words.downcast::<PyArray1<$t>>() {
                    let w = w.readonly();
                    let w = w.as_slice()?;
                    if tb.use_pos && tb.pos.len() < w.len() {
                        return Err(err("positions shorter than the words"));
                    }
                    let k = py.allow_threads(|| reduce(w, &tb, &mut s, &mut o));
                    return Ok(Rows {
                        at: o.out_i[..k].to_vec().into_pyarray_bound(py).unbind(),
                        lines: o.lines[..k].to_vec().into_pyarray_bound(py).unbind(),
                        db: o.db[..k].to_vec().into_pyarray_bound(py).unbind(),
                        dbp: o.dbp[..k].to_vec().into_pyarray_bound(py).unbind(),
                    });
                }
            };
        }
        run!(u8);
        run!(u16);
        run!(u32);
        run!(u64);
        Err(err("sample words must be a uint8, uint16, uint32 or uint64 array"))
    }

    /// One-sample pulses per probe bit.
    #[getter]
    fn glitches<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        self.glitches.clone().into_pyarray_bound(py)
    }

    /// The first starts of each probe's one-sample pulses, (probe, example).
    #[getter]
    fn examples(&self, py: Python) -> PyResult<Py<PyArray2<i64>>> {
        examples_array(py, self.examples.clone())
    }

    /// Samples where REQ and ACK both changed.
    #[getter]
    fn same(&self) -> i64 {
        self.st[2]
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(samples_block, m)?)?;
    m.add_class::<SampleStream>()?;
    Ok(())
}
