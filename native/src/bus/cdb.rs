//! The CDB decode of scsitrace/scsi.py `decode_cdb_matrix`: one loop over the CDB rows, the
//! opcode groups as 256-entry lookup tables built in scsi.py.
use numpy::ndarray::ArrayView2;
use numpy::{PyReadonlyArray1, PyReadonlyArray2, PyReadwriteArray2};
use pyo3::prelude::*;

/// The LUN of a SCSI-1 style CDB (`len` bytes, opcode `op`, byte 1 `byte1`): bits 7-5 of
/// byte 1 when the opcode's group carries one there (`lun_groups`, scsi.py `_lun_groups`:
/// groups 0-2, the 6- and 10-byte CDBs) and the CDB has that byte. The one LUN rule of CDBs
/// (the bulk decode below, the bus walker).
#[inline]
pub(crate) fn cdb_lun(op: u8, byte1: u8, len: i64, lun_groups: &[bool]) -> Option<i16> {
    (len >= 2 && lun_groups[op as usize]).then_some((byte1 >> 5) as i16)
}

fn be(m: &ArrayView2<u8>, i: usize, start: usize, width: usize) -> i64 {
    (start..start + width).fold(0i64, |v, b| (v << 8) | m[[i, b]] as i64)
}

/// Per CDB row of `m` (at least 16 bytes) and its length `n` (-1: none): into `ints` rows
/// (opcode, name index, lba, blocks, lun) and `flags` rows (has opcode, lba known, blocks
/// known, has lun). The name index is the opcode, a service action's of SERVICE ACTION
/// IN(16) by `sa_name` where not -1, `no_name` without an opcode.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn decode_cdbs(py: Python, m: PyReadonlyArray2<u8>, n: PyReadonlyArray1<i64>, rw6: PyReadonlyArray1<bool>,
               rw10: PyReadonlyArray1<bool>, rw12: PyReadonlyArray1<bool>, rw16: PyReadonlyArray1<bool>,
               lun_groups: PyReadonlyArray1<bool>, sa_name: PyReadonlyArray1<i64>, no_name: i64,
               mut ints: PyReadwriteArray2<i64>, mut flags: PyReadwriteArray2<bool>) -> PyResult<()> {
    let m = m.as_array();
    let n = n.as_slice()?;
    let (rw6, rw10, rw12, rw16) = (rw6.as_slice()?, rw10.as_slice()?, rw12.as_slice()?, rw16.as_slice()?);
    let (lun_groups, sa_name) = (lun_groups.as_slice()?, sa_name.as_slice()?);
    let rows = m.shape()[0];
    let mut ints = ints.as_array_mut();
    let mut flags = flags.as_array_mut();
    if m.shape()[1] < 16 || n.len() < rows || ints.shape() != [5, rows] || flags.shape() != [4, rows] {
        return Err(pyo3::exceptions::PyValueError::new_err("decode_cdbs: array shapes"));
    }
    py.allow_threads(|| {
        for i in 0..rows {
            let op = m[[i, 0]] as usize;
            let k = n[i];
            let sa = (m[[i, 1]] & 0x1F) as usize;
            let has_op = k >= 1;
            let name_at = if !has_op {
                no_name
            } else if op == 0x9E && k >= 2 && sa_name[sa] >= 0 {
                sa_name[sa]
            } else {
                op as i64
            };
            let is6 = has_op && rw6[op] && k >= 6;
            let is10 = has_op && rw10[op] && k >= 10;
            let is12 = has_op && rw12[op] && k >= 12;
            let is16 = has_op && rw16[op] && k >= 16;
            let (mut lba, mut lba_known, mut blocks) = (0i64, false, 0i64);
            if is6 {
                lba = ((sa as i64) << 16) | be(&m, i, 2, 2);
                lba_known = true;
                let b4 = m[[i, 4]] as i64;
                blocks = if b4 != 0 { b4 } else if op == 0x0B { 0 } else { 256 };
            } else if is10 {
                (lba, lba_known, blocks) = (be(&m, i, 2, 4), true, be(&m, i, 7, 2));
            } else if is12 {
                (lba, lba_known, blocks) = (be(&m, i, 2, 4), true, be(&m, i, 6, 4));
            } else if is16 {
                lba_known = m[[i, 2]] < 0x80; // the 64-bit LBA fits an int64
                lba = if lba_known { be(&m, i, 2, 8) } else { 0 };
                blocks = be(&m, i, 10, 4);
            }
            ints[[0, i]] = op as i64;
            ints[[1, i]] = name_at;
            ints[[2, i]] = lba;
            ints[[3, i]] = blocks;
            let lun = cdb_lun(op as u8, m[[i, 1]], k, lun_groups);
            ints[[4, i]] = lun.unwrap_or(0) as i64;
            flags[[0, i]] = has_op;
            flags[[1, i]] = lba_known;
            flags[[2, i]] = is6 || is10 || is12 || is16;
            flags[[3, i]] = lun.is_some();
        }
    });
    Ok(())
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_cdbs, m)?)?;
    Ok(())
}
