//! Dense ids of integer keys (scsitrace/_keys.py `dense_ids`, `distinct`): ids 0, 1, ... in
//! order of first appearance, through an open-addressing table grown at half full; a run of
//! one key costs one compare a row.
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::arrow::{ints, Columns};
use crate::hash::mix;

/// The slot of key `k` in a table of `mask + 1` slots: the high half of the core's integer
/// hash (keys that differ in high bits only, as device numbers do, still spread).
#[inline(always)]
fn slot(k: i64, mask: usize) -> usize {
    (mix(k as u64) >> 32) as usize & mask
}

/// (per-row ids (empty unless `with_ids`), the row where each id first appears).
pub fn numbered(key: &[i64], with_ids: bool) -> (Vec<i64>, Vec<i64>) {
    let mut slots: Vec<(i64, i64)> = vec![(0, -1); 64]; // (key, id); id -1: free
    let mut mask = slots.len() - 1;
    let mut first: Vec<i64> = Vec::new();
    let mut out: Vec<i64> = Vec::with_capacity(if with_ids { key.len() } else { 0 });
    let (mut last_key, mut last_id) = (0i64, -1i64);
    for (r, &k) in key.iter().enumerate() {
        if last_id >= 0 && k == last_key {
            if with_ids {
                out.push(last_id);
            }
            continue;
        }
        let mut s = slot(k, mask);
        while slots[s].1 >= 0 && slots[s].0 != k {
            s = (s + 1) & mask;
        }
        if slots[s].1 < 0 {
            let id = first.len() as i64;
            first.push(r as i64);
            slots[s] = (k, id);
            if 2 * first.len() > slots.len() {
                let old = std::mem::replace(&mut slots, vec![(0, -1); 2 * (mask + 1)]);
                mask = slots.len() - 1;
                for (ok, oid) in old.into_iter().filter(|e| e.1 >= 0) {
                    let mut t = slot(ok, mask);
                    while slots[t].1 >= 0 {
                        t = (t + 1) & mask;
                    }
                    slots[t] = (ok, oid);
                }
            }
            last_id = id;
        } else {
            last_id = slots[s].1;
        }
        last_key = k;
        if with_ids {
            out.push(last_id);
        }
    }
    (out, first)
}

/// The numbering of a column of keys: `ids` (column `id`: each row's id; no rows unless
/// asked for) and `first` (column `row`: the row where each id first appears).
#[pyclass(get_all)]
struct Numbered {
    ids: Py<Columns>,
    first: Py<Columns>,
}

/// dense_ids of int64 keys (Python casts other integer types; uint64 as its bits).
#[pyfunction]
fn dense_ids(py: Python, key: PyReadonlyArray1<i64>, with_ids: bool) -> PyResult<Numbered> {
    let key = key.as_slice()?;
    let (ids, first) = py.allow_threads(|| numbered(key, with_ids));
    Ok(Numbered { ids: Py::new(py, Columns::new(vec![("id", ints(ids))])?)?,
                  first: Py::new(py, Columns::new(vec![("row", ints(first))])?)? })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dense_ids, m)?)?;
    Ok(())
}
