//! Attribution's one pass over the bus transitions (reports/_handshakes.py): runs of equal
//! phase key, and per REQ/ACK edge the wait before it, summed per run or kept individually.
use numpy::{PyReadonlyArray1, PyReadwriteArray1, PyReadwriteArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

// slots of the state vector; columns of the per-run table (reports/_handshakes.py)
const PREV_T: usize = 0;
const LINES: usize = 1;
const KEY: usize = 2;
const REQ_SEEN: usize = 3;
const N_RUNS: usize = 4;
const START: usize = 0;
const RUN_KEY: usize = 1;
const G: usize = 2;
const UP: usize = 3;
const TARGET_NS: usize = 4;
const INITIATOR_NS: usize = 5;
const EDGES: usize = 6;
const LAST: usize = 7;
const RUN_COLUMNS: usize = 8;

fn err(what: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("handshakes: {what}"))
}

/// How many runs of equal phase key start in this chunk.
#[pyfunction]
fn new_runs(py: Python, lines: PyReadonlyArray1<u16>, key_table: PyReadonlyArray1<u16>, key_before: i64) -> PyResult<i64> {
    let (lines, table) = (lines.as_slice()?, key_table.as_slice()?);
    if table.len() < 1 << 16 {
        return Err(err("key table of 65536 entries"));
    }
    Ok(py.allow_threads(|| {
        let (mut n, mut prev) = (0i64, key_before);
        for &l in lines {
            let k = table[l as usize] as i64;
            if k != prev {
                n += 1;
                prev = k;
            }
        }
        n
    }))
}

/// One chunk: see reports/_handshakes.py. Returns how many edges were kept.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn collect(py: Python, t: PyReadonlyArray1<i64>, lines: PyReadonlyArray1<u16>, key_table: PyReadonlyArray1<u16>,
           req_bit: i64, ack_bit: i64, mut state: PyReadwriteArray1<i64>, mut runs: PyReadwriteArray2<i64>,
           mut hist: PyReadwriteArray2<i64>, mut kept: PyReadwriteArray2<i64>, data_keys: PyReadonlyArray1<i64>,
           hist_ns: i64, min_long_ns: i64) -> PyResult<usize> {
    let (t, lines, table, data_keys) = (t.as_slice()?, lines.as_slice()?, key_table.as_slice()?, data_keys.as_slice()?);
    let kept_w = kept.shape()[1];
    let (n_hist, hist_w) = (hist.shape()[0] as i64, hist.shape()[1]);
    let state = state.as_slice_mut()?;
    let runs_len = runs.shape()[0];
    let runs = runs.as_slice_mut()?;
    let hist = hist.as_slice_mut()?;
    let kept = kept.as_slice_mut()?;
    if table.len() < 1 << 16 || lines.len() != t.len() || state.len() < 5 || data_keys.len() < 2
        || runs.len() != runs_len * RUN_COLUMNS || kept_w < 2 * t.len() || kept.len() != 5 * kept_w
        || hist_w != 2 || hist_ns > n_hist {
        return Err(err("array shapes"));
    }
    py.allow_threads(|| {
        let mut prev_t = state[PREV_T];
        let mut prev_lines = state[LINES];
        let mut key_prev = state[KEY];
        let mut req_seen = state[REQ_SEEN];
        let mut n_runs = state[N_RUNS] as usize;
        let mut n_kept = 0usize;
        for (&tt, &l) in t.iter().zip(lines) {
            let ln = l as i64;
            let k = table[l as usize] as i64;
            if k != key_prev {
                if n_runs >= runs_len {
                    return Err(err("runs table too small"));
                }
                let row = &mut runs[n_runs * RUN_COLUMNS..][..RUN_COLUMNS];
                row[START] = tt;
                row[RUN_KEY] = k;
                row[G] = req_seen;
                row[LAST] = -1;
                n_runs += 1;
                key_prev = k;
            }
            let changed = ln ^ prev_lines;
            prev_lines = ln;
            let req_changed = changed & req_bit != 0;
            let ack_changed = changed & ack_bit != 0;
            if !(req_changed || ack_changed) {
                continue;
            }
            let req_up = ln & req_bit != 0;
            let ack_up = ln & ack_bit != 0;
            let ack_first = req_changed && ack_changed && req_up && !ack_up;
            let run = n_runs.wrapping_sub(1);
            if run >= runs_len {
                return Err(err("an edge before any run"));
            }
            let row = &mut runs[run * RUN_COLUMNS..][..RUN_COLUMNS];
            let data = row[RUN_KEY] == data_keys[0] || row[RUN_KEY] == data_keys[1];
            for e in 0..2 {
                let is_ack = (e == 0) == ack_first;
                if (is_ack && !ack_changed) || (!is_ack && !req_changed) {
                    continue;
                }
                let up = if is_ack { ack_up } else { req_up };
                let code = is_ack as i64 + if up { 0 } else { 2 };
                let dur = tt.wrapping_sub(prev_t);
                prev_t = tt;
                if code == 0 {
                    req_seen += 1;
                    row[UP] += 1;
                }
                if is_ack {
                    row[INITIATOR_NS] = row[INITIATOR_NS].wrapping_add(dur);
                } else {
                    row[TARGET_NS] = row[TARGET_NS].wrapping_add(dur);
                }
                row[EDGES] += 1;
                row[LAST] = tt;
                let first_bytes = req_seen <= row[G] + 1; // up to the run's first REQ-up's handshake
                if data && !first_bytes && dur < hist_ns {
                    // a negative wait (time going back) counts from the end, as numpy indexes
                    let at = if dur < 0 { n_hist + dur } else { dur };
                    if at < 0 {
                        return Err(err("wait out of the histogram"));
                    }
                    hist[at as usize * 2 + (code & 1) as usize] += 1;
                }
                if !data || first_bytes || dur > min_long_ns {
                    for (c, v) in [tt, code, dur, req_seen, run as i64].into_iter().enumerate() {
                        kept[c * kept_w + n_kept] = v;
                    }
                    n_kept += 1;
                }
            }
        }
        state[PREV_T] = prev_t;
        state[LINES] = prev_lines;
        state[KEY] = key_prev;
        state[REQ_SEEN] = req_seen;
        state[N_RUNS] = n_runs as i64;
        Ok(n_kept)
    })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(new_runs, m)?)?;
    m.add_function(wrap_pyfunction!(collect, m)?)?;
    Ok(())
}
