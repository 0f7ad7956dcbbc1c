//! Saleae Logic 2 digital CSV (parsers/saleae.py): a block of whole lines scanned in one pass
//! when every line is clean (a plain decimal time, the header's number of fields, each
//! mapped channel exactly 0, 1, X or x, time never backwards): each row's time in ns and its
//! sample word, X holding the channel's previous state. Any other line makes the caller read
//! the block with its general (polars) path, which says what is wrong.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

const MAX_ABS_S: f64 = 4e9; // parsers/saleae.py MAX_ABS_S

/// `-?digits[.digits][(e|E)[+-]digits]`: the times Logic 2 writes (a subset of what the
/// general path's float cast reads, and read to the same value: both round correctly).
fn plain_decimal(s: &[u8]) -> bool {
    let mut i = usize::from(s.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < s.len() && s[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > start
    };
    if !digits(&mut i) {
        return false;
    }
    if i < s.len() && s[i] == b'.' {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if i < s.len() && (s[i] == b'e' || s[i] == b'E') {
        i += 1;
        if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == s.len()
}

/// Round half to even (polars' `round()`); f64::round_ties_even needs a newer Rust.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// 10^k for the times' fast path (exact in f64 up to 10^22).
const POW10: [f64; 23] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                          1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22];

/// A plain decimal time in seconds, read to the f64 that `str::parse` gives: digits
/// without an exponent and at most 15 of them are exact as an integer m, and m / 10^k is
/// then correctly rounded (one IEEE division of two exact values); anything else is parsed.
fn time_s(time: &[u8]) -> Option<f64> {
    if !plain_decimal(time) {
        return None;
    }
    let neg = time[0] == b'-';
    let (mut m, mut digits, mut frac, mut in_frac) = (0u64, 0u32, 0usize, false);
    for &c in &time[usize::from(neg)..] {
        match c {
            b'.' => in_frac = true,
            b'0'..=b'9' => {
                m = m.wrapping_mul(10).wrapping_add((c - b'0') as u64);
                digits += u32::from(m != 0);
                frac += usize::from(in_frac);
            }
            _ => return std::str::from_utf8(time).ok()?.parse().ok(), // an exponent
        }
    }
    if digits > 15 || frac > 22 {
        return std::str::from_utf8(time).ok()?.parse().ok();
    }
    let t = m as f64 / POW10[frac];
    Some(if neg { -t } else { t })
}

/// The rows of one part of a block, scanned from an unknown state: `words` hold the bits
/// set in the part, `first_set[b]` is the row where bit b is first given (0 or 1; the rows
/// before it hold the state the part starts with), `state` each bit's state after the part
/// (`UNSET` where never given).
struct PartRows {
    t_ns: Vec<i64>,
    words: Vec<u64>,
    x_values: i64,
    first_set: Vec<usize>,
    state: Vec<u8>,
    lines: usize,
}

const UNSET: u8 = 2;

/// One part's rows, or None when a line is not clean. `col_bit[j]`: the word bit of field
/// j + 1, -1 when unmapped; `bits`: how many word bits there are.
fn scan_part(a: &[u8], ncol: usize, col_bit: &[i64], bits: usize) -> Option<PartRows> {
    if std::str::from_utf8(a).is_err() {
        return None; // (the general path names the undecodable line)
    }
    let rows = a.len() / 16;
    let mut out = PartRows { t_ns: Vec::with_capacity(rows), words: Vec::with_capacity(rows), x_values: 0,
                             first_set: vec![usize::MAX; bits], state: vec![UNSET; bits], lines: 0 };
    let mut run_max = i64::MIN;
    let mut word = 0u64;
    let mut start = 0usize;
    while start < a.len() {
        let end = memchr::memchr(b'\n', &a[start..]).map_or(a.len(), |i| start + i);
        out.lines += usize::from(end < a.len());
        let mut line = &a[start..end];
        start = end + 1;
        while let [rest @ .., b'\r'] = line {
            line = rest;
        }
        if line.is_empty() {
            continue;
        }
        let comma = memchr::memchr(b',', line).unwrap_or(line.len());
        let t = time_s(&line[..comma])?;
        if !t.is_finite() || t.abs() > MAX_ABS_S {
            return None;
        }
        let t_ns = round_half_even(t * 1e9) as i64;
        if t_ns < run_max {
            return None;
        }
        run_max = t_ns;
        let row = out.t_ns.len();
        // the channels: a mapped one is one character, an unmapped one anything up to its comma
        let (mut i, mut n) = (comma, 1usize);
        while i < line.len() {
            i += 1; // past the comma
            let Some(&bit) = col_bit.get(n - 1) else { return None };
            n += 1;
            if bit < 0 {
                i = memchr::memchr(b',', &line[i..]).map_or(line.len(), |k| i + k);
                continue;
            }
            if i + 1 < line.len() && line[i + 1] != b',' {
                return None;
            }
            let b = bit as usize;
            let c = line.get(i).copied().unwrap_or(b',');
            i += 1;
            let v = c.wrapping_sub(b'0'); // 0 or 1 without a branch on which (the states are noise)
            if v > 1 {
                if c == b'X' || c == b'x' {
                    out.x_values += 1;
                    continue;
                }
                return None;
            }
            if out.state[b] == UNSET {
                out.first_set[b] = row;
            }
            out.state[b] = v;
            word = (word & !(1u64 << b)) | ((v as u64) << b);
        }
        if n != ncol {
            return None;
        }
        out.t_ns.push(t_ns);
        out.words.push(word);
    }
    Some(out)
}

/// Rows of one block, or None when a line is not clean: its parts scanned on the cores,
/// then joined in order, each part's leading rows given the state the part before left
/// (X holds a channel's previous state). `last_t`: the last row's time (i64::MIN: none,
/// inside this file only); `held`: each word bit's last state, updated.
fn scan(a: &[u8], ncol: usize, col_bit: &[i64], last_t: i64, held: &mut [u8], parts: usize)
        -> Option<(Vec<i64>, Vec<u64>, i64, usize)> {
    let bits = held.len();
    let (parts, _) = crate::text::scan_parts(a, parts, |p| scan_part(p, ncol, col_bit, bits));
    let mut parts: Vec<PartRows> = parts.into_iter().collect::<Option<_>>()?;
    let (mut x_values, mut lines, mut run_max) = (0i64, 0usize, last_t);
    for p in &mut parts {
        if p.t_ns.first().is_some_and(|&t| t < run_max) {
            return None;
        }
        run_max = p.t_ns.last().copied().unwrap_or(run_max);
        for b in 0..bits {
            let before = (held[b] as u64) << b;
            let upto = p.first_set[b].min(p.words.len());
            if before != 0 {
                p.words[..upto].iter_mut().for_each(|w| *w |= before);
            }
            if p.state[b] != UNSET {
                held[b] = p.state[b];
            }
        }
        x_values += p.x_values;
        lines += p.lines;
    }
    let (t, w) = if parts.len() == 1 {
        let p = parts.pop().unwrap();
        (p.t_ns, p.words)
    } else {
        (parts.iter().flat_map(|p| p.t_ns.iter().copied()).collect(),
         parts.iter().flat_map(|p| p.words.iter().copied()).collect())
    };
    Some((t, w, x_values, lines))
}

/// A block of lines and what the scan carries in, read by name (parsers/saleae.py
/// `_Reader._clean_block`).
#[derive(FromPyObject)]
struct CleanBlock<'py> {
    #[pyo3(item)]
    text: PyReadonlyArray1<'py, u8>,
    /// the fields of a line (the time and the channels)
    #[pyo3(item)]
    ncol: usize,
    /// the word bit of field j + 1 (-1: unmapped)
    #[pyo3(item)]
    col_bit: PyReadonlyArray1<'py, i64>,
    /// the last row's time (None before the first row)
    #[pyo3(item)]
    last_t: Option<i64>,
    /// each word bit's state after the previous block (X holds it)
    #[pyo3(item)]
    held: PyReadonlyArray1<'py, u8>,
    /// how many parts the block is scanned in (None: one a core, for a large block)
    #[pyo3(item)]
    parts: Option<usize>,
}

/// The rows of a clean block: times in ns, sample words, X values read, each word bit's
/// state after the block, and its newlines (`lines`: the next block's first line is that
/// many after this one's).
#[pyclass(get_all)]
struct CleanRows {
    t_ns: Py<PyArray1<i64>>,
    words: Py<PyArray1<u64>>,
    x_values: i64,
    held: Py<PyArray1<u8>>,
    lines: usize,
}

/// parsers/saleae.py `_Reader._clean_block`: the rows of a block of clean lines, or None
/// when one is not.
#[pyfunction]
fn saleae_clean_block(py: Python, block: CleanBlock) -> PyResult<Option<CleanRows>> {
    let (a, col_bit, held_in) = (block.text.as_slice()?, block.col_bit.as_slice()?, block.held.as_slice()?);
    let ncol = block.ncol;
    if held_in.len() > 64 || col_bit.iter().any(|&b| b >= held_in.len() as i64) || col_bit.len() + 1 != ncol {
        return Err(pyo3::exceptions::PyValueError::new_err("saleae_clean_block: array shapes"));
    }
    let mut held = held_in.to_vec();
    let last_t = block.last_t.unwrap_or(i64::MIN);
    let parts = block.parts.unwrap_or_else(|| crate::text::part_count(a.len()));
    let done = py.allow_threads(|| scan(a, ncol, col_bit, last_t, &mut held, parts));
    Ok(done.map(|(t, w, x, lines)| CleanRows {
        t_ns: t.into_pyarray_bound(py).unbind(), words: w.into_pyarray_bound(py).unbind(), x_values: x,
        held: held.into_pyarray_bound(py).unbind(), lines,
    }))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(saleae_clean_block, m)?)?;
    Ok(())
}
