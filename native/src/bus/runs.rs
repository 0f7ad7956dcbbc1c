//! Stage 1 of the bus machine (scsitrace/bus/runs.py): runs of equal phase key and the
//! handshakes summed per run.
use std::sync::Arc;

use arrow_array::types::{UInt16Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{ints, ints_or_null, options_of, values_of, Columns, NULL};

/// A piece of transitions as bus/runs.py `_Piece` holds it, read by name: times, lines, and
/// the data bus (`db` None when not sampled; else `has_db` says where it was).
#[derive(FromPyObject)]
struct Piece<'py> {
    t: PyReadonlyArray1<'py, i64>,
    lines: PyReadonlyArray1<'py, u16>,
    db: Option<PyReadonlyArray1<'py, u8>>,
    has_db: Option<PyReadonlyArray1<'py, bool>>,
}

/// The line bits a run's handshakes are counted on (bus/runs.py `HANDSHAKE_BITS`), by name.
#[derive(FromPyObject)]
struct HandshakeBits {
    req: i64,
    ack: i64,
    atn: i64,
}

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("runs: {what}"))
}

/// Each run of equal phase key (before skew folding): `first`, the index of its first
/// transition, and its `key`.
#[pyfunction]
fn raw_runs(py: Python, piece: Piece, key_table: PyReadonlyArray1<u16>) -> PyResult<Columns> {
    let (lines, table) = (piece.lines.as_slice()?, key_table.as_slice()?);
    if table.len() < 1 << 16 {
        return Err(err("key table of 65536 entries"));
    }
    let (idx, keys) = py.allow_threads(|| {
        let (mut idx, mut keys) = (Vec::new(), Vec::new());
        let mut prev = -1i64;
        for (i, &l) in lines.iter().enumerate() {
            let k = table[l as usize];
            if k as i64 != prev {
                idx.push(i as i64);
                keys.push(k);
                prev = k as i64;
            }
        }
        (idx, keys)
    });
    Columns::new(vec![("first", ints(idx)), ("key", values_of::<UInt16Type>(keys))])
}

/// Per run (transitions first[r] up to first[r+1]; `prev_lines` the lines before the
/// piece): `n_req`, `n_ack` (assertions), `atn` (asserted at all), `first_req_ns` (the first
/// REQ assertion, null: none), `db_last` (the last sampled data-bus byte, null: none).
#[pyfunction]
fn run_sums(py: Python, piece: Piece, first: PyReadonlyArray1<i64>, prev_lines: i64, bits: HandshakeBits)
            -> PyResult<Columns> {
    let (t, lines, first) = (piece.t.as_slice()?, piece.lines.as_slice()?, first.as_slice()?);
    let db = match (&piece.db, &piece.has_db) {
        (Some(db), Some(has)) => Some((db.as_slice()?, has.as_slice()?)),
        _ => None,
    };
    if lines.len() != t.len() || db.is_some_and(|(d, h)| d.len() != t.len() || h.len() != t.len())
        || first.iter().any(|&f| f < 0 || f as usize > t.len()) {
        return Err(err("array shapes"));
    }
    let HandshakeBits { req, ack, atn: atn_bit } = bits;
    let (n_req, n_ack, atn, first_req, db_last) = py.allow_threads(|| {
        let n = first.len();
        let (mut n_req, mut n_ack) = (vec![0i64; n], vec![0i64; n]);
        let (mut atn, mut first_req) = (vec![false; n], vec![NULL; n]);
        let mut db_last: Vec<Option<u8>> = vec![None; if db.is_some() { n } else { 0 }];
        let mut prev = prev_lines;
        for r in 0..n {
            let stop = if r + 1 < n { first[r + 1] as usize } else { t.len() };
            for i in first[r] as usize..stop {
                let ln = lines[i] as i64;
                let rising = ln & !prev;
                if rising & req != 0 {
                    n_req[r] += 1;
                    if first_req[r] == NULL {
                        first_req[r] = t[i];
                    }
                }
                if rising & ack != 0 {
                    n_ack[r] += 1;
                }
                if ln & atn_bit != 0 {
                    atn[r] = true;
                }
                prev = ln;
            }
            if let Some((db, has)) = db {
                db_last[r] = (first[r] as usize..stop).rev().find(|&i| has[i]).map(|i| db[i]);
            }
        }
        (n_req, n_ack, atn, first_req, db_last)
    });
    let db_last = if db.is_some() { db_last } else { vec![None; first.len()] };
    Columns::new(vec![
        ("n_req", ints(n_req)),
        ("n_ack", ints(n_ack)),
        ("atn", Arc::new(BooleanArray::from(atn)) as ArrayRef),
        ("first_req_ns", ints_or_null(first_req)),
        ("db_last", options_of::<UInt8Type>(db_last)),
    ])
}

/// The runs of a piece of complete runs (scsitrace/bus/runs.py `_aggregate`), read by name.
#[derive(FromPyObject)]
struct RunKeys<'py> {
    /// each run's first transition (the first is 0) and phase key
    #[pyo3(item)]
    first: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    keys: PyReadonlyArray1<'py, u16>,
    /// the lines before the piece's first transition
    #[pyo3(item)]
    prev_lines: u16,
    #[pyo3(item)]
    has_req: bool,
    #[pyo3(item)]
    has_ack: bool,
}

const BSY: u16 = 1;
const SEL: u16 = 1 << 1;
const RST: u16 = 1 << 3;
const MSG: u16 = 1 << 4;
const CD: u16 = 1 << 5;
const IO: u16 = 1 << 6;
const REQ: u16 = 1 << 7;
const ACK: u16 = 1 << 8;

/// A run whose handshakes carry message, command or status bytes (BSY, no SEL nor RST;
/// MSG C/D I/O not a data phase nor a reserved code).
fn info_run(key: u16) -> bool {
    let code = (key & (MSG | CD | IO)) >> 4;
    key & BSY != 0 && key & (SEL | RST) == 0 && matches!(code, 0b010 | 0b011 | 0b110 | 0b111)
}

/// Which runs (by phase key) carry message, command or status bytes: `info_run` of each, for
/// scsitrace/bus/runs.py (the rule lives here only).
#[pyfunction]
fn info_runs<'py>(py: Python<'py>, keys: PyReadonlyArray1<'py, u16>) -> PyResult<Bound<'py, PyArray1<bool>>> {
    Ok(keys.as_slice()?.iter().map(|&k| info_run(k)).collect::<Vec<bool>>().into_pyarray_bound(py))
}

/// The handshake bytes of a piece's runs (`run_bytes`): `n_bytes` per run, then `bytes`
/// in order.
#[pyclass(get_all)]
struct RunBytes {
    n_bytes: Py<PyArray1<i64>>,
    bytes: Py<PyArray1<u8>>,
}

/// Per run, the byte of each handshake in COMMAND, STATUS and MESSAGE runs (IN phases at REQ
/// assertion, OUT at ACK; with one of them not captured, REQ's two edges or ACK's assertion;
/// an IN run with fewer REQ than ACK assertions, a REQ pulse lost between two samples, at
/// ACK, where the target still holds the byte).
#[pyfunction]
fn run_bytes(py: Python, piece: Piece, runs: RunKeys) -> PyResult<RunBytes> {
    let lines = piece.lines.as_slice()?;
    let db = match (&piece.db, &piece.has_db) {
        (Some(db), Some(has)) => Some((db.as_slice()?, has.as_slice()?)),
        _ => None,
    };
    let (first, keys) = (runs.first.as_slice()?, runs.keys.as_slice()?);
    let n = lines.len();
    if db.is_some_and(|(d, h)| d.len() != n || h.len() != n) || keys.len() != first.len()
        || first.first().is_some_and(|&f| f != 0) || first.windows(2).any(|w| w[0] > w[1])
        || first.last().is_some_and(|&f| f as usize > n) {
        return Err(err("array shapes"));
    }
    let (has_req, has_ack, prev_lines) = (runs.has_req, runs.has_ack, runs.prev_lines);
    let (counts, values) = py.allow_threads(|| {
        let n_runs = first.len();
        let mut counts = vec![0i64; n_runs];
        let mut values = Vec::new();
        let Some((db, has_db)) = db else { return (counts, values) };
        for r in 0..n_runs {
            let (start, stop) = (first[r] as usize, if r + 1 < n_runs { first[r + 1] as usize } else { n });
            if !info_run(keys[r]) {
                continue;
            }
            let inbound = keys[r] & IO != 0;
            let mut prev = if start > 0 { lines[start - 1] } else { prev_lines };
            let unresolved = inbound && has_req && has_ack && {
                let (mut reqs, mut acks) = (0usize, 0usize);
                for &ln in &lines[start..stop] {
                    let rising = ln & !prev;
                    reqs += (rising & REQ != 0) as usize;
                    acks += (rising & ACK != 0) as usize;
                    prev = ln;
                }
                prev = if start > 0 { lines[start - 1] } else { prev_lines };
                acks > reqs
            };
            let before = values.len();
            for i in start..stop {
                let ln = lines[i];
                if has_db[i] {
                    let rising = ln & !prev;
                    let at = if has_req && has_ack {
                        if inbound && !unresolved { rising & REQ } else { rising & ACK }
                    } else if has_req {
                        if inbound { rising & REQ } else { prev & !ln & REQ }
                    } else {
                        rising & ACK
                    };
                    if at != 0 {
                        values.push(db[i]);
                    }
                }
                prev = ln;
            }
            counts[r] = (values.len() - before) as i64;
        }
        (counts, values)
    });
    Ok(RunBytes { n_bytes: counts.into_pyarray_bound(py).unbind(), bytes: values.into_pyarray_bound(py).unbind() })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(raw_runs, m)?)?;
    m.add_function(wrap_pyfunction!(run_sums, m)?)?;
    m.add_function(wrap_pyfunction!(run_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(info_runs, m)?)?;
    Ok(())
}
