//! Fixed-width unsigned integers at any offset of a byte buffer, either byte order: what the
//! binary readers (blktrace, pcap, usbmon) read every field with.
use pyo3::prelude::*;

#[inline(always)]
#[allow(dead_code)]
pub fn u16_at(b: &[u8], pos: usize, big: bool) -> u64 {
    let v = u16::from_le_bytes(b[pos..pos + 2].try_into().unwrap()); // one bounds check, not one per byte
    (if big { v.swap_bytes() } else { v }) as u64
}

#[inline(always)]
#[allow(dead_code)]
pub fn u32_at(b: &[u8], pos: usize, big: bool) -> u64 {
    let v = u32::from_le_bytes(b[pos..pos + 4].try_into().unwrap());
    (if big { v.swap_bytes() } else { v }) as u64
}

#[inline(always)]
#[allow(dead_code)]
pub fn u64_at(b: &[u8], pos: usize, big: bool) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[pos..pos + 8]);
    let v = u64::from_le_bytes(a);
    if big { v.swap_bytes() } else { v }
}

pub fn register(_m: &Bound<PyModule>) -> PyResult<()> {
    Ok(())
}
