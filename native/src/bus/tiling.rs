//! The command layers' tiling (scsitrace/tiling.py): stage pieces -> segments tiling each
//! device's time with IDLE.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2,
            PyUntypedArrayMethods};
use pyo3::prelude::*;

const NULL: i64 = i64::MIN; // scsitrace/schema.py NULL
const COLS: usize = 6; // tiling.PIECE_COLUMNS: dev, io, start, end, phase, bytes

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

/// dev * span + start of each piece, span past every time and `elapsed`; whether they ascend.
#[pyfunction]
fn device_start_key<'py>(py: Python<'py>, pieces: PyReadonlyArray2<'py, i64>, elapsed: i64)
                         -> PyResult<(Bound<'py, PyArray1<i64>>, bool)> {
    let p = pieces.as_slice()?;
    if pieces.shape()[1] != COLS {
        return Err(err("pieces need 6 columns"));
    }
    let (key, in_order) = py.allow_threads(|| {
        let span = p.chunks_exact(COLS).fold(elapsed, |s, r| s.max(r[2]).max(r[3])) + 1;
        let key: Vec<i64> = p.chunks_exact(COLS).map(|r| r[0].wrapping_mul(span).wrapping_add(r[2])).collect();
        let in_order = key.windows(2).all(|w| w[1] >= w[0]);
        (key, in_order)
    });
    Ok((key.into_pyarray_bound(py), in_order))
}

/// Pieces taken in `order` (by device, then start) tiled per device with `idle` (a phase code
/// below `n_phases`) -> (the segments as PIECE_COLUMNS arrays when `emit`, else none; time and
/// segment count per phase code; devices with segments).
#[pyfunction]
fn tile<'py>(py: Python<'py>, order: PyReadonlyArray1<'py, i64>, pieces: PyReadonlyArray2<'py, i64>, idle: usize,
             n_phases: usize, elapsed: i64, emit: bool)
             -> PyResult<(Vec<Bound<'py, PyArray1<i64>>>, Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>, i64)> {
    let order = order.as_slice()?;
    let p = pieces.as_slice()?;
    if pieces.shape()[1] != COLS || idle >= n_phases
        || order.iter().any(|&k| k < 0 || k as usize >= pieces.shape()[0])
        || (0..pieces.shape()[0]).any(|k| p[k * COLS + 4] < 0 || p[k * COLS + 4] as usize >= n_phases) {
        return Err(err("array shapes"));
    }
    let (cols, totals, counts, devices) = py.allow_threads(|| {
        let mut cols: [Vec<i64>; COLS] = Default::default();
        let (mut totals, mut counts) = (vec![0i64; n_phases], vec![0i64; n_phases]);
        let mut put = |row: [i64; COLS]| {
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
            let d = p[order[k] as usize * COLS];
            let mut tiling = DeviceTiling::new();
            while k < n && p[order[k] as usize * COLS] == d {
                let r = &p[order[k] as usize * COLS..][..COLS];
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
    let columns = if emit { cols.into_iter().map(|c| PyArray1::from_vec_bound(py, c)).collect() } else { Vec::new() };
    Ok((columns, PyArray1::from_vec_bound(py, totals), PyArray1::from_vec_bound(py, counts), devices))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device_start_key, m)?)?;
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    Ok(())
}
