//! Control-line polarity from the capture itself (scsitrace/bus/polarity.py): the time each
//! line reads asserted, added up over the transitions.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

/// A chunk of transitions and the transition before it, the columns `asserted_ns` reads by
/// name.
#[derive(FromPyObject)]
struct HeldLines<'py> {
    #[pyo3(item)]
    t_ns: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    lines: PyReadonlyArray1<'py, u16>,
    /// the time and lines of the transition before the chunk (its state holds until the
    /// chunk's first transition); None in the capture's first chunk
    #[pyo3(item)]
    last: Option<(i64, u16)>,
    /// the lines (bit numbers) whose asserted time is added up
    #[pyo3(item)]
    bits: Vec<u32>,
}

/// Per line of `bits`: the nanoseconds it reads asserted from the transition before the
/// chunk (or its first) to its last (a line's state holds until the next transition).
#[pyfunction]
fn asserted_ns<'py>(py: Python<'py>, chunk: HeldLines<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (t, lines) = (chunk.t_ns.as_slice()?, chunk.lines.as_slice()?);
    if t.len() != lines.len() || chunk.bits.iter().any(|&b| b >= 16) {
        return Err(pyo3::exceptions::PyValueError::new_err("asserted_ns: array shapes"));
    }
    let (last, bits) = (chunk.last, &chunk.bits);
    let sums = py.allow_threads(|| {
        let mut sums = vec![0i64; bits.len()];
        let (mut prev_l, start, from) = match last {
            Some((last_t, last_lines)) => (last_lines, last_t, 0),
            None if t.is_empty() => return sums,
            None => (lines[0], t[0], 1),
        };
        // a line's asserted time adds up its stretches between edges: only the (rare) edges
        // of these lines are visited
        let watched = bits.iter().fold(0u16, |m, &b| m | 1 << b);
        let mut since: Vec<i64> = vec![start; bits.len()];
        for i in from..t.len() {
            let changed = (lines[i] ^ prev_l) & watched;
            if changed != 0 {
                for (k, &b) in bits.iter().enumerate() {
                    if changed >> b & 1 == 0 {
                        continue;
                    }
                    if lines[i] >> b & 1 == 1 {
                        since[k] = t[i];
                    } else {
                        sums[k] = sums[k].wrapping_add(t[i].wrapping_sub(since[k]));
                    }
                }
            }
            prev_l = lines[i];
        }
        let end = t.last().copied().unwrap_or(start);
        for (k, &b) in bits.iter().enumerate() {
            if prev_l >> b & 1 == 1 {
                sums[k] = sums[k].wrapping_add(end.wrapping_sub(since[k]));
            }
        }
        sums
    });
    Ok(sums.into_pyarray_bound(py))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(asserted_ns, m)?)?;
    Ok(())
}
