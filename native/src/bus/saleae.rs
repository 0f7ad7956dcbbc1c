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

/// Rows of one block, or None when a line is not clean. `col_bit[j]`: the word bit of field
/// j (j >= 1), -1 when unmapped; `last_t`: the last row's time (i64::MIN: none, inside
/// this file only); `held`: each word bit's last state, updated.
fn scan(a: &[u8], ncol: usize, col_bit: &[i64], last_t: i64, held: &mut [u8])
        -> Option<(Vec<i64>, Vec<u64>, i64)> {
    if std::str::from_utf8(a).is_err() {
        return None; // (the general path names the undecodable line)
    }
    let mut t_out = Vec::with_capacity(a.len() / 16);
    let mut w_out = Vec::with_capacity(a.len() / 16);
    let mut x_values = 0i64;
    let mut state = held.to_vec();
    let mut run_max = last_t;
    for raw in a.split(|&c| c == b'\n') {
        let mut line = raw;
        while let [rest @ .., b'\r'] = line {
            line = rest;
        }
        if line.is_empty() {
            continue;
        }
        let mut fields = line.split(|&c| c == b',');
        let time = fields.next()?;
        if !plain_decimal(time) {
            return None;
        }
        let t: f64 = std::str::from_utf8(time).ok()?.parse().ok()?;
        if !t.is_finite() || t.abs() > MAX_ABS_S {
            return None;
        }
        let t_ns = round_half_even(t * 1e9) as i64;
        if t_ns < run_max {
            return None;
        }
        run_max = t_ns;
        let mut n = 1usize;
        for (j, f) in fields.enumerate() {
            n += 1;
            let Some(&bit) = col_bit.get(j) else { return None };
            if bit < 0 {
                continue;
            }
            match f {
                b"0" => state[bit as usize] = 0,
                b"1" => state[bit as usize] = 1,
                b"X" | b"x" => x_values += 1,
                _ => return None,
            }
        }
        if n != ncol {
            return None;
        }
        let mut word = 0u64;
        for (b, &s) in state.iter().enumerate() {
            word |= (s as u64) << b;
        }
        t_out.push(t_ns);
        w_out.push(word);
    }
    held.copy_from_slice(&state);
    Some((t_out, w_out, x_values))
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
}

/// The rows of a clean block: times in ns, sample words, X values read, and each word bit's
/// state after the block.
#[pyclass(get_all)]
struct CleanRows {
    t_ns: Py<PyArray1<i64>>,
    words: Py<PyArray1<u64>>,
    x_values: i64,
    held: Py<PyArray1<u8>>,
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
    let done = py.allow_threads(|| scan(a, ncol, col_bit, last_t, &mut held));
    Ok(done.map(|(t, w, x)| CleanRows {
        t_ns: t.into_pyarray_bound(py).unbind(), words: w.into_pyarray_bound(py).unbind(), x_values: x,
        held: held.into_pyarray_bound(py).unbind(),
    }))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(saleae_clean_block, m)?)?;
    Ok(())
}
