//! The CDB decode of scsitrace/scsi.py `decode_cdb_matrix`: one loop over the CDB rows, the
//! opcode groups as 256-entry lookup tables built in scsi.py and handed over once
//! (`CdbDecoder`).
use numpy::ndarray::ArrayView2;
use arrow_array::types::Int64Type;
use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{ints, options_of, Columns};

/// The LUN of a SCSI-1 style CDB (`len` bytes, opcode `op`, byte 1 `byte1`): bits 7-5 of
/// byte 1 when the opcode's group carries one there (`lun_groups`, scsi.py `_lun_groups`:
/// groups 0-2, the 6- and 10-byte CDBs) and the CDB has that byte. The one LUN rule of CDBs
/// (the bulk decode below, the bus walker).
#[inline]
pub(crate) fn cdb_lun(op: u8, byte1: u8, len: i64, lun_groups: &[bool]) -> Option<i16> {
    (len >= 2 && lun_groups[op as usize]).then_some((byte1 >> 5) as i16)
}

fn be(m: &[u8; 16], start: usize, width: usize) -> i64 {
    (start..start + width).fold(0i64, |v, b| (v << 8) | m[b] as i64)
}

fn table<const N: usize, T: Copy + numpy::Element>(a: &PyReadonlyArray1<T>, what: &str) -> PyResult<[T; N]> {
    a.as_slice()?.try_into().map_err(|_| PyValueError::new_err(format!("CdbDecoder: {} needs {} entries", what, N)))
}

/// The CDB rules' tables, given once: which opcodes are READ/WRITE(6), (10), (12), (16),
/// which carry a LUN in byte 1, the name index of each SERVICE ACTION IN(16) service action
/// (-1: the opcode's own), the name index of a CDB without an opcode.
#[pyclass(module = "scsitrace._native.bus", frozen)]
#[derive(Clone)]
pub(crate) struct CdbDecoder {
    rw6: [bool; 256],
    rw10: [bool; 256],
    rw12: [bool; 256],
    rw16: [bool; 256],
    lun_groups: [bool; 256],
    sa_name: [i64; 32],
    no_name: i64,
}

/// One decoded CDB (fields that a CDB lacks: None).
pub(crate) struct Decoded {
    pub opcode: Option<i64>,
    pub name_at: i64,
    pub lba: Option<i64>,
    blocks: Option<i64>,
    lun: Option<i16>,
}

impl CdbDecoder {
    /// Row `i` of `m`, a CDB of `k` bytes (-1: none).
    fn row(&self, m: &ArrayView2<u8>, i: usize, k: i64) -> Decoded {
        let mut r = [0u8; 16];
        for (b, v) in r.iter_mut().enumerate() {
            *v = m[[i, b]];
        }
        self.first16(&r, k)
    }

    /// A CDB's bytes (None: null), as `decode` reads its first 16.
    pub(crate) fn bytes(&self, cdb: Option<&[u8]>) -> Decoded {
        let mut r = [0u8; 16];
        let k = cdb.map_or(-1, |c| {
            let n = c.len().min(16);
            r[..n].copy_from_slice(&c[..n]);
            c.len() as i64
        });
        self.first16(&r, k)
    }

    /// A CDB of `k` bytes (-1: none) whose first 16 (zero-padded) are `m`.
    fn first16(&self, m: &[u8; 16], k: i64) -> Decoded {
        let op = m[0] as usize;
        let sa = (m[1] & 0x1F) as usize;
        if k < 1 {
            return Decoded { opcode: None, name_at: self.no_name, lba: None, blocks: None, lun: None };
        }
        let name_at = if op == 0x9E && k >= 2 && self.sa_name[sa] >= 0 { self.sa_name[sa] } else { op as i64 };
        let (lba, blocks) = if self.rw6[op] && k >= 6 {
            let b4 = m[4] as i64;
            (Some(((sa as i64) << 16) | be(m, 2, 2)), Some(if b4 != 0 { b4 } else if op == 0x0B { 0 } else { 256 }))
        } else if self.rw10[op] && k >= 10 {
            (Some(be(m, 2, 4)), Some(be(m, 7, 2)))
        } else if self.rw12[op] && k >= 12 {
            (Some(be(m, 2, 4)), Some(be(m, 6, 4)))
        } else if self.rw16[op] && k >= 16 {
            // the 64-bit LBA only where it fits an int64
            ((m[2] < 0x80).then(|| be(m, 2, 8)), Some(be(m, 10, 4)))
        } else {
            (None, None)
        };
        Decoded { opcode: Some(op as i64), name_at, lba, blocks, lun: cdb_lun(op as u8, m[1], k, &self.lun_groups) }
    }
}

#[pymethods]
impl CdbDecoder {
    #[new]
    fn new(rw6: PyReadonlyArray1<bool>, rw10: PyReadonlyArray1<bool>, rw12: PyReadonlyArray1<bool>,
           rw16: PyReadonlyArray1<bool>, lun_groups: PyReadonlyArray1<bool>, sa_name: PyReadonlyArray1<i64>,
           no_name: i64) -> PyResult<Self> {
        Ok(CdbDecoder { rw6: table(&rw6, "rw6")?, rw10: table(&rw10, "rw10")?, rw12: table(&rw12, "rw12")?,
                        rw16: table(&rw16, "rw16")?, lun_groups: table(&lun_groups, "lun_groups")?,
                        sa_name: table(&sa_name, "sa_name")?, no_name })
    }

    /// CDBs as rows of `m` (at least 16 bytes) and their lengths `n` (-1: none) -> columns
    /// opcode, name_at (the name index), lba, blocks, cdb_lun; null where the CDB has no such
    /// field.
    fn decode(&self, py: Python, m: PyReadonlyArray2<u8>, n: PyReadonlyArray1<i64>) -> PyResult<Columns> {
        let m = m.as_array();
        let n = n.as_slice()?;
        let rows = m.shape()[0];
        if m.shape()[1] < 16 || n.len() != rows {
            return Err(PyValueError::new_err("CdbDecoder.decode: array shapes"));
        }
        let decoded: Vec<Decoded> = py.allow_threads(|| (0..rows).map(|i| self.row(&m, i, n[i])).collect());
        let column = |get: &dyn Fn(&Decoded) -> Option<i64>| options_of::<Int64Type>(decoded.iter().map(get));
        Columns::new(vec![
            ("opcode", column(&|d| d.opcode)),
            ("name_at", ints(decoded.iter().map(|d| d.name_at).collect())),
            ("lba", column(&|d| d.lba)),
            ("blocks", column(&|d| d.blocks)),
            ("cdb_lun", column(&|d| d.lun.map(|v| v as i64))),
        ])
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<CdbDecoder>()?;
    Ok(())
}
