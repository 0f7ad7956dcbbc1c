//! Attribution's one pass over the bus transitions (reports/_handshakes.py): runs of equal
//! phase key, and per REQ/ACK edge the wait before it, summed per run or kept individually.
use arrow_array::types::{Int64Type, Int8Type, UInt16Type};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::arrow::{ints, values_of, Columns, Table};

// columns of the per-run table (`Handshakes.runs`)
const START: usize = 0;
const RUN_KEY: usize = 1;
const G: usize = 2;
const UP: usize = 3;
const TARGET_NS: usize = 4;
const INITIATOR_NS: usize = 5;
const EDGES: usize = 6;
const LAST: usize = 7;
const RUN_COLUMNS: [&str; 8] = ["start", "key", "g", "up", "target_ns", "initiator_ns", "edges", "last"];

fn err(what: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("handshakes: {what}"))
}

/// What the pass reads once (reports/_handshakes.py `Rules`), by name: the phase key of each
/// lines value (65536 entries), the REQ and ACK bits, the keys of DATA runs, the histogram's
/// width (ordinary DATA waits below it are counted per ns) and the DATA wait kept
/// individually above `min_long_ns`.
#[derive(FromPyObject)]
struct Rules<'py> {
    key_table: PyReadonlyArray1<'py, u16>,
    req_bit: i64,
    ack_bit: i64,
    data_keys: (i64, i64),
    hist_ns: i64,
    min_long_ns: i64,
}

/// The pass, fed transitions frames in time order (any chunks: runs and waits carry over).
#[pyclass(module = "scsitrace._native.bus")]
struct Handshakes {
    key_table: Vec<u16>,
    req_bit: i64,
    ack_bit: i64,
    data_keys: (i64, i64),
    hist_ns: i64,
    min_long_ns: i64,
    prev_t: i64,
    prev_lines: i64,
    key: i64,
    req_seen: i64,
    runs: Vec<[i64; 8]>,
    hist: Vec<[i64; 2]>,
}

#[pymethods]
impl Handshakes {
    #[new]
    fn new(rules: Rules) -> PyResult<Self> {
        let key_table = rules.key_table.as_slice()?.to_vec();
        if key_table.len() < 1 << 16 || rules.hist_ns < 0 {
            return Err(err("key table of 65536 entries, a histogram of 0 or more ns"));
        }
        Ok(Handshakes { key_table, req_bit: rules.req_bit, ack_bit: rules.ack_bit, data_keys: rules.data_keys,
                        hist_ns: rules.hist_ns, min_long_ns: rules.min_long_ns,
                        prev_t: -(1 << 62), // "long before" the first edge (clipped at the body start later)
                        prev_lines: 0, key: -1, req_seen: 0, runs: Vec::new(),
                        hist: vec![[0; 2]; rules.hist_ns as usize] })
    }

    /// One transitions frame (columns t_ns, lines) -> the edges kept individually: t_ns,
    /// code (0 REQ up, 1 ACK up, 2 REQ down, 3 ACK down), dur_ns (the wait before it), g
    /// (REQ-ups so far), run.
    fn feed(&mut self, py: Python, chunk: Table) -> PyResult<Columns> {
        let (t, lines) = (chunk.i64s("t_ns")?, chunk.values::<UInt16Type>("lines")?);
        let kept = py.allow_threads(|| self.collect(&t, &lines))?;
        let [kt, code, dur, g, run] = kept;
        Columns::new(vec![("t_ns", ints(kt)), ("code", values_of::<Int8Type>(code.into_iter().map(|c| c as i8).collect())),
                          ("dur_ns", ints(dur)), ("g", ints(g)), ("run", ints(run))])
    }

    /// The runs so far: start, key, g (REQ-ups before it), up (REQ-ups in it), target_ns and
    /// initiator_ns (the waits before the target's and the initiator's edges), edges, last
    /// (the time of its last edge; -1: none).
    fn runs(&self) -> PyResult<Columns> {
        Columns::new(RUN_COLUMNS.iter().enumerate()
            .map(|(c, &name)| (name, values_of::<Int64Type>(self.runs.iter().map(|r| r[c]).collect())))
            .collect())
    }

    /// The ordinary DATA waits below `hist_ns`, counted per ns: target (before REQ edges),
    /// initiator (before ACK edges).
    fn hist(&self) -> PyResult<Columns> {
        Columns::new(vec![("target", ints(self.hist.iter().map(|h| h[0]).collect())),
                          ("initiator", ints(self.hist.iter().map(|h| h[1]).collect()))])
    }

    #[getter]
    fn n_runs(&self) -> usize {
        self.runs.len()
    }

    /// REQ assertions so far.
    #[getter]
    fn req_seen(&self) -> i64 {
        self.req_seen
    }
}

impl Handshakes {
    /// The edges of one chunk, folded into the runs and the histogram; the kept ones returned.
    fn collect(&mut self, t: &[i64], lines: &[u16]) -> PyResult<[Vec<i64>; 5]> {
        let mut kept: [Vec<i64>; 5] = Default::default();
        let n_hist = self.hist.len() as i64;
        for (&tt, &l) in t.iter().zip(lines) {
            let ln = l as i64;
            let k = self.key_table[l as usize] as i64;
            if k != self.key {
                let mut row = [0i64; 8];
                row[START] = tt;
                row[RUN_KEY] = k;
                row[G] = self.req_seen;
                row[LAST] = -1;
                self.runs.push(row);
                self.key = k;
            }
            let changed = ln ^ self.prev_lines;
            self.prev_lines = ln;
            let req_changed = changed & self.req_bit != 0;
            let ack_changed = changed & self.ack_bit != 0;
            if !(req_changed || ack_changed) {
                continue;
            }
            let req_up = ln & self.req_bit != 0;
            let ack_up = ln & self.ack_bit != 0;
            let ack_first = req_changed && ack_changed && req_up && !ack_up;
            let run = self.runs.len() - 1; // a run opened at the first transition
            let row = &mut self.runs[run];
            let data = row[RUN_KEY] == self.data_keys.0 || row[RUN_KEY] == self.data_keys.1;
            for e in 0..2 {
                let is_ack = (e == 0) == ack_first;
                if (is_ack && !ack_changed) || (!is_ack && !req_changed) {
                    continue;
                }
                let up = if is_ack { ack_up } else { req_up };
                let code = is_ack as i64 + if up { 0 } else { 2 };
                let dur = tt.wrapping_sub(self.prev_t);
                self.prev_t = tt;
                if code == 0 {
                    self.req_seen += 1;
                    row[UP] += 1;
                }
                if is_ack {
                    row[INITIATOR_NS] = row[INITIATOR_NS].wrapping_add(dur);
                } else {
                    row[TARGET_NS] = row[TARGET_NS].wrapping_add(dur);
                }
                row[EDGES] += 1;
                row[LAST] = tt;
                let first_bytes = self.req_seen <= row[G] + 1; // up to the run's first REQ-up's handshake
                if data && !first_bytes && dur < self.hist_ns {
                    // a negative wait (time going back) counts from the end, as numpy indexes
                    let at = if dur < 0 { n_hist + dur } else { dur };
                    if at < 0 {
                        return Err(err("wait out of the histogram"));
                    }
                    self.hist[at as usize][(code & 1) as usize] += 1;
                }
                if !data || first_bytes || dur > self.min_long_ns {
                    for (c, v) in [tt, code, dur, self.req_seen, run as i64].into_iter().enumerate() {
                        kept[c].push(v);
                    }
                }
            }
        }
        Ok(kept)
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<Handshakes>()?;
    Ok(())
}
