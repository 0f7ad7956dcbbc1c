//! Stage 1 of the bus machine (scsitrace/bus/runs.py): runs of equal phase key and the
//! handshakes summed per run.
use arrow_array::types::UInt8Type;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::arrow::{ints, options_of, Columns};

/// First transition and phase key of each run of equal key (before skew folding).
#[pyfunction]
fn raw_runs<'py>(py: Python<'py>, lines: PyReadonlyArray1<'py, u16>, key_table: PyReadonlyArray1<'py, u16>)
                 -> PyResult<(Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<u16>>)> {
    let (lines, table) = (lines.as_slice()?, key_table.as_slice()?);
    if table.len() < 1 << 16 {
        return Err(pyo3::exceptions::PyValueError::new_err("raw_runs: key table of 65536 entries"));
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
    Ok((idx.into_pyarray_bound(py), keys.into_pyarray_bound(py)))
}

type Sums<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<bool>>,
                  Bound<'py, PyArray1<i64>>);

/// Per run (transitions first[r] up to first[r+1]): REQ and ACK assertions, whether ATN was
/// asserted, time of the first REQ assertion (-1: none).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn run_sums<'py>(py: Python<'py>, t: PyReadonlyArray1<'py, i64>, lines: PyReadonlyArray1<'py, u16>, prev_lines: i64,
                 first: PyReadonlyArray1<'py, i64>, req_bit: i64, ack_bit: i64, atn_bit: i64) -> PyResult<Sums<'py>> {
    let (t, lines, first) = (t.as_slice()?, lines.as_slice()?, first.as_slice()?);
    if lines.len() != t.len() || first.iter().any(|&f| f < 0 || f as usize > t.len()) {
        return Err(pyo3::exceptions::PyValueError::new_err("run_sums: array shapes"));
    }
    let (n_req, n_ack, atn, first_req) = py.allow_threads(|| {
        let n = first.len();
        let (mut n_req, mut n_ack) = (vec![0i64; n], vec![0i64; n]);
        let (mut atn, mut first_req) = (vec![false; n], vec![-1i64; n]);
        let mut prev = prev_lines;
        for r in 0..n {
            let stop = if r + 1 < n { first[r + 1] as usize } else { t.len() };
            for i in first[r] as usize..stop {
                let ln = lines[i] as i64;
                let rising = ln & !prev;
                if rising & req_bit != 0 {
                    n_req[r] += 1;
                    if first_req[r] < 0 {
                        first_req[r] = t[i];
                    }
                }
                if rising & ack_bit != 0 {
                    n_ack[r] += 1;
                }
                if ln & atn_bit != 0 {
                    atn[r] = true;
                }
                prev = ln;
            }
        }
        (n_req, n_ack, atn, first_req)
    });
    Ok((n_req.into_pyarray_bound(py), n_ack.into_pyarray_bound(py), atn.into_pyarray_bound(py),
        first_req.into_pyarray_bound(py)))
}


/// The transitions of complete runs, the columns `run_bytes` reads by name
/// (scsitrace/bus/runs.py `_aggregate`). `db`/`has_db` are empty when no data bus is sampled.
#[derive(FromPyObject)]
struct RunPiece<'py> {
    #[pyo3(item)]
    lines: PyReadonlyArray1<'py, u16>,
    #[pyo3(item)]
    db: PyReadonlyArray1<'py, u8>,
    #[pyo3(item)]
    has_db: PyReadonlyArray1<'py, bool>,
    /// the lines before the first transition
    #[pyo3(item)]
    prev_lines: u16,
    /// each run's first transition (the first is 0) and phase key
    #[pyo3(item)]
    first: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    keys: PyReadonlyArray1<'py, u16>,
    /// per run: fewer REQ than ACK assertions (an IN run is then read at ACK)
    #[pyo3(item)]
    req_unresolved: PyReadonlyArray1<'py, bool>,
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

/// The data-bus bytes of a piece's runs (`run_bytes`).
#[pyclass(get_all)]
struct RunBytes {
    /// per run: `db_last` (the last data-bus value sampled; null: none) and `n_bytes`
    runs: Py<Columns>,
    /// the runs' handshake bytes in order, n_bytes[r] of run r
    bytes: Py<PyArray1<u8>>,
}

/// Per run: the last data-bus value sampled, and the byte of each handshake in COMMAND,
/// STATUS and MESSAGE runs (IN phases at REQ assertion, OUT at ACK; with one of them not
/// captured, REQ's two edges or ACK's assertion).
#[pyfunction]
fn run_bytes(py: Python, piece: RunPiece) -> PyResult<RunBytes> {
    let (lines, db, has_db) = (piece.lines.as_slice()?, piece.db.as_slice()?, piece.has_db.as_slice()?);
    let (first, keys, unresolved) = (piece.first.as_slice()?, piece.keys.as_slice()?, piece.req_unresolved.as_slice()?);
    let n = lines.len();
    let sampled = !db.is_empty();
    if (sampled && (db.len() != n || has_db.len() != n)) || keys.len() != first.len()
        || unresolved.len() != first.len() || first.first().is_some_and(|&f| f != 0)
        || first.windows(2).any(|w| w[0] > w[1]) || first.last().is_some_and(|&f| f as usize > n) {
        return Err(pyo3::exceptions::PyValueError::new_err("run_bytes: array shapes"));
    }
    let (has_req, has_ack, prev_lines) = (piece.has_req, piece.has_ack, piece.prev_lines);
    let (last, counts, values) = py.allow_threads(|| {
        let runs = first.len();
        let mut last = vec![None; runs];
        let mut counts = Vec::with_capacity(runs);
        let mut values = Vec::new();
        let mut prev = prev_lines;
        for r in 0..runs {
            let (start, stop) = (first[r] as usize, if r + 1 < runs { first[r + 1] as usize } else { n });
            if !sampled {
                counts.push(0);
                continue;
            }
            let keep = info_run(keys[r]);
            let before = values.len();
            let inbound = keys[r] & IO != 0;
            for i in start..stop {
                let ln = lines[i];
                if has_db[i] {
                    last[r] = Some(db[i]);
                    if keep {
                        let rising = ln & !prev;
                        let at = if has_req && has_ack {
                            if inbound && !unresolved[r] { rising & REQ } else { rising & ACK }
                        } else if has_req {
                            if inbound { rising & REQ } else { prev & !ln & REQ }
                        } else {
                            rising & ACK
                        };
                        if at != 0 {
                            values.push(db[i]);
                        }
                    }
                }
                prev = ln;
            }
            counts.push((values.len() - before) as i64);
        }
        (last, counts, values)
    });
    let runs = Columns::new(vec![("db_last", options_of::<UInt8Type>(last)), ("n_bytes", ints(counts))])?;
    Ok(RunBytes { runs: Py::new(py, runs)?, bytes: values.into_pyarray_bound(py).unbind() })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(raw_runs, m)?)?;
    m.add_function(wrap_pyfunction!(run_sums, m)?)?;
    m.add_function(wrap_pyfunction!(run_bytes, m)?)?;
    Ok(())
}
