//! The ancot-text record scanner (parsers/_ancot_scan.py): one pass over a block of whole
//! lines, each byte read once, the format's record rules applied in the order the reader
//! reports them (field count, tick, each signal, DB, DBP).
use std::sync::Arc;

use arrow_array::types::{Int16Type, Int32Type, UInt16Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::arrow::{ints, values_of, values_or_null, Columns};

const BAD_COUNT: i16 = 1;
const BAD_TICK: i16 = 2;
const BAD_DB: i16 = 3;
const BAD_DBP: i16 = 4;
const BAD_SIGNAL: i16 = 16; // + index of the signal
const MAX_DIGITS: usize = 18; // any 18-digit tick fits int64

#[inline(always)]
fn blank(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\r'
}

#[inline(always)]
fn hex(c: u8) -> i64 {
    match c {
        b'0'..=b'9' => (c - b'0') as i64,
        b'a'..=b'f' => (c - b'a' + 10) as i64,
        b'A'..=b'F' => (c - b'A' + 10) as i64,
        _ => -1,
    }
}

/// The good-record columns and the bad-record columns of one block.
struct Out {
    line_idx: Vec<i64>,
    tick: Vec<i64>,
    lines: Vec<u16>,
    db: Vec<u8>,
    db_valid: Vec<bool>,
    dbp: Vec<i8>,
    n_data: usize,
    bad_line: Vec<i64>,
    bad_reason: Vec<i16>,
    bad_found: Vec<i32>,
}

impl Out {
    /// Room for `cap` good records (allocated, not written: only the records read are touched).
    fn new(cap: usize, n_data: usize) -> Out {
        let data_cap = |k: usize| if n_data >= k { cap } else { 0 };
        Out { line_idx: Vec::with_capacity(cap), tick: Vec::with_capacity(cap), lines: Vec::with_capacity(cap),
              db: Vec::with_capacity(data_cap(1)), db_valid: Vec::with_capacity(data_cap(1)),
              dbp: Vec::with_capacity(data_cap(2)), n_data, bad_line: Vec::new(), bad_reason: Vec::new(),
              bad_found: Vec::new() }
    }

    /// A good record: its line, tick, lines, DB byte (None: `--`) and DBP (-1: `-`), the
    /// data columns kept when the file has them.
    #[inline(always)]
    fn good(&mut self, line: i64, tick: i64, lines: u16, db: Option<u8>, dbp: i8) {
        self.line_idx.push(line);
        self.tick.push(tick);
        self.lines.push(lines);
        if self.n_data >= 1 {
            self.db.push(db.unwrap_or(0));
            self.db_valid.push(db.is_some());
        }
        if self.n_data == 2 {
            self.dbp.push(dbp);
        }
    }

    fn bad(&mut self, line: i64, why: i16, found: usize) {
        self.bad_line.push(line);
        self.bad_reason.push(why);
        self.bad_found.push(found as i32);
    }

    /// (the good records' line indexes; the good records as columns tick, lines, then db
    /// (null: `--`) with a DB column and dbp (null: `-`) with a DBP column; the bad ones as
    /// line, reason, found).
    fn columns(self) -> PyResult<(Columns, Columns, Columns)> {
        let mut good: Vec<(&str, ArrayRef)> = vec![("tick", ints(self.tick)), ("lines", values_of::<UInt16Type>(self.lines))];
        if self.n_data >= 1 {
            good.push(("db", values_or_null::<UInt8Type>(self.db, self.db_valid)));
        }
        if self.n_data == 2 {
            let dbp: BooleanArray = self.dbp.iter().map(|&p| (p >= 0).then_some(p == 1)).collect();
            good.push(("dbp", Arc::new(dbp)));
        }
        let bad = Columns::new(vec![("line", ints(self.bad_line)),
                                    ("reason", values_of::<Int16Type>(self.bad_reason)),
                                    ("found", values_of::<Int32Type>(self.bad_found))])?;
        Ok((Columns::new(vec![("line_idx", ints(self.line_idx))])?, Columns::new(good)?, bad))
    }
}

/// Returns (lines seen, tick decreases among the good records).
fn scan_into(a: &[u8], sig_bits: &[u16], n_data: usize, o: &mut Out) -> (i64, i64) {
    let n = a.len();
    let n_sig = sig_bits.len();
    let n_fields = 1 + n_sig + n_data;
    let fixed_width = 2 * n_sig + 3 * n_data.min(1) + 2 * n_data.saturating_sub(1); // after the tick
    let (mut i, mut line) = (0usize, 0i64);
    while i < n {
        while i < n && blank(a[i]) {
            i += 1;
        }
        if i >= n {
            break;
        }
        let c = a[i];
        if c == b'\n' || c == b'#' {
            // blank line, or a comment: skip to the next line
            while i < n && a[i] != b'\n' {
                i += 1;
            }
            i += 1;
            line += 1;
            continue;
        }
        // the usual layout (digits, each field after one blank, end of line), read straight through
        let mut j = i;
        let mut t = 0i64;
        let digits_end = n.min(i + MAX_DIGITS);
        while j < digits_end && a[j].is_ascii_digit() {
            t = t * 10 + (a[j] - b'0') as i64;
            j += 1;
        }
        let mut fast = j > i && j + fixed_width <= n;
        let mut ln = 0u16;
        if fast {
            let mut off = 0u8;
            for (f, &bit) in sig_bits.iter().enumerate() {
                // " 0" or " 1" per signal; any other byte sets `off`
                let c = a[j + 2 * f + 1];
                off |= (a[j + 2 * f] ^ b' ') | (c.wrapping_sub(b'0') & 0xFE);
                if c & 1 != 0 {
                    ln |= bit;
                }
            }
            fast = off == 0;
            j += 2 * n_sig;
        }
        let (mut db, mut dbp) = (None, -1i8);
        if fast && n_data >= 1 {
            let (c0, c1) = (a[j + 1], a[j + 2]);
            if a[j] != b' ' {
                fast = false;
            } else if c0 == b'-' && c1 == b'-' {
                db = None;
            } else if hex(c0) >= 0 && hex(c1) >= 0 {
                db = Some((hex(c0) * 16 + hex(c1)) as u8);
            } else {
                fast = false;
            }
            j += 3;
        }
        if fast && n_data == 2 {
            let c0 = a[j + 1];
            if a[j] != b' ' || !(c0 == b'0' || c0 == b'1' || c0 == b'-') {
                fast = false;
            }
            dbp = if c0 != b'-' { c0.wrapping_sub(b'0') as i8 } else { -1 };
            j += 2;
        }
        if fast {
            while j < n && blank(a[j]) {
                j += 1;
            }
            fast = j >= n || a[j] == b'\n';
        }
        if fast {
            o.good(line, t, ln, db, dbp);
            line += 1;
            i = j + 1;
            continue;
        }
        let mut why = 0i16;
        let mut nf = 0usize;
        let (mut t, mut ln, mut d, mut dnull, mut p) = (0i64, 0u16, 0u8, true, -1i8);
        while i < n {
            let c = a[i];
            if c == b'\n' {
                break;
            }
            if blank(c) {
                i += 1;
                continue;
            }
            let s = i;
            while i < n && a[i] != b'\n' && !blank(a[i]) {
                i += 1;
            }
            let f = nf;
            nf += 1;
            if why != 0 || f >= n_fields {
                continue;
            }
            let field = &a[s..i];
            let c0 = field[0];
            if f == 0 {
                if field.len() > MAX_DIGITS {
                    why = BAD_TICK;
                } else {
                    for &c in field {
                        if !c.is_ascii_digit() {
                            why = BAD_TICK;
                            break;
                        }
                        t = t * 10 + (c - b'0') as i64;
                    }
                }
            } else if f <= n_sig {
                if field.len() != 1 || (c0 != b'0' && c0 != b'1') {
                    why = BAD_SIGNAL + f as i16 - 1;
                } else if c0 == b'1' {
                    ln |= sig_bits[f - 1];
                }
            } else if f == n_sig + 1 {
                if field.len() == 2 && c0 == b'-' && field[1] == b'-' {
                    dnull = true;
                } else if field.len() == 2 && hex(c0) >= 0 && hex(field[1]) >= 0 {
                    d = (hex(c0) * 16 + hex(field[1])) as u8;
                    dnull = false;
                } else {
                    why = BAD_DB;
                }
            } else if field.len() == 1 && (c0 == b'0' || c0 == b'1') {
                p = (c0 - b'0') as i8;
            } else if field.len() == 1 && c0 == b'-' {
                p = -1;
            } else {
                why = BAD_DBP;
            }
        }
        if nf != n_fields {
            why = BAD_COUNT;
        }
        if why == 0 {
            o.good(line, t, ln, (!dnull).then_some(d), p);
        } else {
            o.bad(line, why, nf);
        }
        line += 1;
        i += 1;
    }
    let decreases = o.tick.windows(2).filter(|w| w[1] < w[0]).count() as i64;
    (line, decreases)
}

/// Records a block of `n` bytes can hold: a good record is `fields` fields of at least one
/// byte, a blank between each, and its line's end.
fn good_cap(n: usize, fields: usize) -> usize {
    n / (2 * fields) + 1
}

/// The record layout of an ancot-text file (parsers/_ancot_scan.py `Layout`), read by name:
/// the line bit of each signal column, in order, and how many data columns follow them (0;
/// 1: DB; 2: DB DBP).
#[derive(FromPyObject)]
struct Layout<'py> {
    sig_bits: PyReadonlyArray1<'py, u16>,
    n_data: usize,
}

/// One block scanned: the good records and their line indexes, the bad ones (line index,
/// reason code, fields found), the lines read and the tick decreases among the good records.
#[pyclass(get_all)]
struct Scanned {
    line_idx: Py<Columns>,
    good: Py<Columns>,
    bad: Py<Columns>,
    lines: i64,
    decreases: i64,
}

/// See parsers/_ancot_scan.py `scan_block`.
#[pyfunction]
fn ancot_scan(py: Python, block: PyReadonlyArray1<u8>, layout: Layout) -> PyResult<Scanned> {
    let (a, sig_bits, n_data) = (block.as_slice()?, layout.sig_bits.as_slice()?, layout.n_data);
    if n_data > 2 {
        return Err(pyo3::exceptions::PyValueError::new_err("ancot_scan: at most two data columns"));
    }
    let mut o = Out::new(good_cap(a.len(), 1 + sig_bits.len() + n_data), n_data);
    let (lines, decreases) = py.allow_threads(|| scan_into(a, sig_bits, n_data, &mut o));
    let (line_idx, good, bad) = o.columns()?;
    Ok(Scanned { line_idx: Py::new(py, line_idx)?, good: Py::new(py, good)?, bad: Py::new(py, bad)?, lines, decreases })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ancot_scan, m)?)?;
    Ok(())
}
