//! Stage 1 of the bus machine (scsitrace/bus/runs.py): runs of equal phase key and the
//! handshakes summed per run.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

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

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(raw_runs, m)?)?;
    m.add_function(wrap_pyfunction!(run_sums, m)?)?;
    Ok(())
}
