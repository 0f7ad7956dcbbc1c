//! The command layers' tiling (scsitrace/tiling.py): stage pieces -> segments tiling each
//! device's time with IDLE.
use pyo3::prelude::*;

use crate::arrow::{ints, ints_or_null, Columns, Table, NULL};

/// One device's tiling step (tiling.py's `place`, `add_piece`, `close_device`): a piece gets
/// the part of its time no earlier piece covers; the gap before that part is IDLE. Shared by
/// `tile` and the usb layer's stage totals (native/src/usb/machine.rs).
pub(crate) struct DeviceTiling {
    covered: i64,
    last_end: i64,
}

impl DeviceTiling {
    pub(crate) fn new() -> DeviceTiling {
        DeviceTiling { covered: -1, last_end: -1 }
    }

    /// The piece [start, end) placed: `Some((idle_from, s))`, its IDLE gap [idle_from, s)
    /// (empty when equal) and its own part [s, end); None when earlier pieces cover it.
    #[inline]
    pub(crate) fn place(&mut self, start: i64, end: i64) -> Option<(i64, i64)> {
        let s = start.max(self.covered);
        self.covered = self.covered.max(end);
        if end <= s {
            return None;
        }
        let idle_from = self.last_end.max(0).min(s);
        self.last_end = self.covered;
        Some((idle_from, s))
    }

    /// Where the device's last segment ends (the IDLE up to the end follows), if it has any.
    pub(crate) fn end(&self) -> Option<i64> {
        (self.last_end >= 0).then_some(self.last_end)
    }
}

fn err(what: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("tiling: {what}"))
}

/// A stage piece (tiling.PIECE_COLUMNS): device code, io, start, end, phase code, bytes
/// (io and bytes NULL where none).
type Piece = [i64; 6];

/// The pieces of a `Table` (columns dev, io, start, end, phase, bytes; io and bytes nullable)
/// as rows, which keep each piece in one cache line while the pass visits them in time order.
fn piece_rows(t: &Table, n_phases: usize) -> PyResult<Vec<Piece>> {
    let (dev, start, end, phase) = (t.i64s("dev")?, t.i64s("start")?, t.i64s("end")?, t.i64s("phase")?);
    let (io, bytes) = (t.i64s_or_null("io")?, t.i64s_or_null("bytes")?);
    if phase.iter().any(|&p| p < 0 || p as usize >= n_phases) {
        return Err(err("a piece's phase code is out of range"));
    }
    Ok((0..t.len()).map(|k| [dev[k], io[k], start[k], end[k], phase[k], bytes[k]]).collect())
}

/// The pieces' order by device, then start, then piece order (they often come so already).
fn device_start_order(p: &[Piece]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    if !p.windows(2).all(|w| (w[0][0], w[0][2]) <= (w[1][0], w[1][2])) {
        order.sort_by_key(|&k| (p[k][0], p[k][2]));
    }
    order
}

/// `tile`'s result: the segments (PIECE_COLUMNS, when asked for), time and segment count per
/// phase code (`by_phase`: time, segments), and how many devices have segments.
#[pyclass(get_all)]
struct Tiled {
    segments: Option<Py<Columns>>,
    by_phase: Py<Columns>,
    devices: i64,
}

/// Pieces (a `Table`, see `piece_rows`) tiled per device with `idle` (a phase code below
/// `n_phases`) up to `elapsed`, in (device, start, piece) order.
#[pyfunction]
fn tile(py: Python, pieces: Table, idle: usize, n_phases: usize, elapsed: i64, emit: bool) -> PyResult<Tiled> {
    if idle >= n_phases {
        return Err(err("idle is not a phase code"));
    }
    let p = piece_rows(&pieces, n_phases)?;
    drop(pieces);
    let (cols, totals, counts, devices) = py.allow_threads(|| {
        let order = device_start_order(&p);
        let mut cols: [Vec<i64>; 6] = Default::default();
        let (mut totals, mut counts) = (vec![0i64; n_phases], vec![0i64; n_phases]);
        let mut put = |row: Piece| {
            if emit {
                for (c, v) in row.into_iter().enumerate() {
                    cols[c].push(v);
                }
            }
        };
        let mut devices = 0i64;
        let n = order.len();
        let mut k = 0;
        while k < n {
            let d = p[order[k]][0];
            let mut tiling = DeviceTiling::new();
            while k < n && p[order[k]][0] == d {
                let r = &p[order[k]];
                if let Some((idle_from, s)) = tiling.place(r[2], r[3]) {
                    if idle_from < s {
                        totals[idle] += s - idle_from;
                        counts[idle] += 1;
                        put([d, NULL, idle_from, s, idle as i64, NULL]);
                    }
                    totals[r[4] as usize] += r[3] - s;
                    counts[r[4] as usize] += 1;
                    put([d, r[1], s, r[3], r[4], r[5]]);
                }
                k += 1;
            }
            if let Some(last_end) = tiling.end() {
                if elapsed > last_end {
                    totals[idle] += elapsed - last_end;
                    counts[idle] += 1;
                    put([d, NULL, last_end, elapsed, idle as i64, NULL]);
                }
                devices += 1;
            }
        }
        (cols, totals, counts, devices)
    });
    let segments = if emit {
        let [dev, io, start, end, phase, bytes] = cols;
        let c = Columns::new(vec![("dev", ints(dev)), ("io", ints_or_null(io)), ("start", ints(start)),
                                  ("end", ints(end)), ("phase", ints(phase)), ("bytes", ints_or_null(bytes))])?;
        Some(Py::new(py, c)?)
    } else {
        None
    };
    let by_phase = Py::new(py, Columns::new(vec![("time", ints(totals)), ("segments", ints(counts))])?)?;
    Ok(Tiled { segments, by_phase, devices })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    Ok(())
}
