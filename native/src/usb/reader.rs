//! usbmon records of a pcap or pcapng capture decoded into URB columns (parsers/usbmon.py):
//! each record's usbmon header checked and its fields read at positions handed over from the
//! construct declaration, the first data bytes copied while the record is in cache.
use numpy::{PyReadonlyArray1, PyReadwriteArray1};
use pyo3::prelude::*;

use crate::bytes::{u16_at, u32_at, u64_at};

const SHORT: u8 = 1;
const BAD_TYPE: u8 = 2;
const BAD_XFER: u8 = 3;
const BAD_LEN_CAP: u8 = 4;
const PCAP_RECORD_HEADER: i64 = 16;
const INCL_LEN_AT: i64 = 8;
const ORIG_LEN_AT: i64 = 12;
const END_OF_FILE: i64 = 0;
const TOO_LONG: i64 = 1;
const CUT: i64 = 2;
// field positions, in the order of parsers/usbmon.py FIELDS
const ID: usize = 0;
const TYPE: usize = 1;
const XFER: usize = 2;
const EP: usize = 3;
const DEV: usize = 4;
const BUS: usize = 5;
const FLAG_SETUP: usize = 6;
const FLAG_DATA: usize = 7;
const TS_SEC: usize = 8;
const TS_USEC: usize = 9;
const STATUS: usize = 10;
const LENGTH: usize = 11;
const LEN_CAP: usize = 12;
const SETUP: usize = 13;
const NDESC: usize = 14;

/// Where each decoded column goes (one slot per record).
struct Out<'a> {
    pos: &'a mut [i64],
    bad: &'a mut [u8],
    t_ns: &'a mut [i64],
    urb_id: &'a mut [u64],
    event: &'a mut [u8],
    xfer: &'a mut [u8],
    ep: &'a mut [u8],
    bus: &'a mut [u16],
    dev: &'a mut [u8],
    status: &'a mut [i32],
    length: &'a mut [i64],
    setup: &'a mut [u8],
    has_setup: &'a mut [bool],
    data_at: &'a mut [i64],
    data_size: &'a mut [i64],
    data_head: &'a mut [u32],
    data_len: &'a mut [i64],
    data: &'a mut [u8],
}

/// Decodes one record's usbmon header at `base` (`caplen` bytes captured of `origlen`) into
/// slot `i`; returns the data bytes kept. A record cut by the capture's snap length
/// (`origlen` > `caplen`, its `len_cap` within `origlen`) is good: its data is what was
/// captured (`data_len`), the URB's length stays the header's.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn record(buf: &[u8], base: usize, caplen: i64, origlen: i64, size: i64, mm: bool, at: &[usize], iso_bytes: i64,
          prefix: i64, kept: usize, i: usize, o: &mut Out) -> usize {
    if caplen < size {
        o.bad[i] = SHORT;
        return 0;
    }
    let ev = buf[base + at[TYPE]];
    let xf = buf[base + at[XFER]];
    let len_cap = u32_at(buf, base + at[LEN_CAP], false) as i64;
    let iso = if xf == 0 && mm { u32_at(buf, base + at[NDESC], false) as i64 * iso_bytes } else { 0 };
    let why = if !(ev == b'S' || ev == b'C' || ev == b'E') {
        BAD_TYPE
    } else if xf > 3 {
        BAD_XFER
    } else if size + iso + len_cap > caplen && !(origlen > caplen && size + iso <= caplen && size + iso + len_cap <= origlen) {
        BAD_LEN_CAP
    } else {
        0
    };
    o.bad[i] = why;
    o.event[i] = ev;
    o.xfer[i] = xf;
    o.urb_id[i] = u64_at(buf, base + at[ID], false);
    o.ep[i] = buf[base + at[EP]];
    o.dev[i] = buf[base + at[DEV]];
    o.bus[i] = u16_at(buf, base + at[BUS], false) as u16;
    o.status[i] = u32_at(buf, base + at[STATUS], false) as u32 as i32;
    o.length[i] = u32_at(buf, base + at[LENGTH], false) as i64;
    let usec = u32_at(buf, base + at[TS_USEC], false) as u32 as i32 as i64;
    o.t_ns[i] = (u64_at(buf, base + at[TS_SEC], false) as i64).wrapping_mul(1_000_000_000).wrapping_add(usec * 1000);
    o.setup[i * 8..i * 8 + 8].copy_from_slice(&buf[base + at[SETUP]..base + at[SETUP] + 8]);
    o.has_setup[i] = buf[base + at[FLAG_SETUP]] == 0 && ev == b'S';
    let has_data = buf[base + at[FLAG_DATA]] == 0 && len_cap > 0;
    let captured = len_cap.min((caplen - size - iso).max(0));
    let size_kept = if has_data { captured.min(prefix) } else { -1 };
    o.data_size[i] = size_kept;
    o.data_len[i] = if has_data { captured } else { 0 };
    o.data_at[i] = kept as i64;
    o.data_head[i] = 0;
    if why == 0 && has_data {
        let first = base + (size + iso) as usize;
        let k = size_kept as usize;
        o.data[kept..kept + k].copy_from_slice(&buf[first..first + k]);
        if k >= 4 {
            o.data_head[i] = u32_at(o.data, kept, false) as u32;
        }
        return k;
    }
    0
}

/// Decodes usbmon records: walking the pcap record chain from `start` when `walk` (one
/// header size and link-type-220 flag for all, `pos` filled with the records' offsets;
/// at most `limit` records), else the packets located beforehand (pcapng: data at
/// `data_offset`, `caplens`, per-packet `sizes` and `mmapped`). Returns (records, where a
/// walk stopped, how: 0 end of buffer, 1 a record longer than `max_len`, 2 a record or
/// header cut short by the end of the buffer or the record limit).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn decode(py: Python, buf: PyReadonlyArray1<u8>, walk: bool, start: i64, big_endian: bool, max_len: i64,
          data_offset: PyReadonlyArray1<i64>, caplens: PyReadonlyArray1<i64>, origlens: PyReadonlyArray1<i64>,
          sizes: PyReadonlyArray1<i64>,
          mmapped: PyReadonlyArray1<bool>, at: PyReadonlyArray1<i64>, iso_descriptor_bytes: i64,
          data_prefix: i64, mut pos: PyReadwriteArray1<i64>, mut bad: PyReadwriteArray1<u8>,
          mut t_ns: PyReadwriteArray1<i64>, mut urb_id: PyReadwriteArray1<u64>, mut event: PyReadwriteArray1<u8>,
          mut xfer: PyReadwriteArray1<u8>, mut ep: PyReadwriteArray1<u8>, mut bus: PyReadwriteArray1<u16>,
          mut dev: PyReadwriteArray1<u8>, mut status: PyReadwriteArray1<i32>, mut length: PyReadwriteArray1<i64>,
          mut setup: PyReadwriteArray1<u8>, mut has_setup: PyReadwriteArray1<bool>,
          mut data_at: PyReadwriteArray1<i64>, mut data_size: PyReadwriteArray1<i64>,
          mut data_head: PyReadwriteArray1<u32>, mut data_len: PyReadwriteArray1<i64>,
          mut data: PyReadwriteArray1<u8>) -> PyResult<(i64, i64, i64)> {
    let buf = buf.as_slice()?;
    let (data_offset, caplens, origlens, sizes, mmapped) =
        (data_offset.as_slice()?, caplens.as_slice()?, origlens.as_slice()?, sizes.as_slice()?, mmapped.as_slice()?);
    if !walk && (caplens.len() < data_offset.len() || origlens.len() < data_offset.len()) {
        return Err(pyo3::exceptions::PyValueError::new_err("decode: caplens and origlens must cover data_offset"));
    }
    let at: Vec<usize> = at.as_slice()?.iter().map(|&a| a as usize).collect();
    let mut o = Out {
        pos: pos.as_slice_mut()?, bad: bad.as_slice_mut()?, t_ns: t_ns.as_slice_mut()?,
        urb_id: urb_id.as_slice_mut()?, event: event.as_slice_mut()?, xfer: xfer.as_slice_mut()?,
        ep: ep.as_slice_mut()?, bus: bus.as_slice_mut()?, dev: dev.as_slice_mut()?,
        status: status.as_slice_mut()?, length: length.as_slice_mut()?, setup: setup.as_slice_mut()?,
        has_setup: has_setup.as_slice_mut()?, data_at: data_at.as_slice_mut()?,
        data_size: data_size.as_slice_mut()?, data_head: data_head.as_slice_mut()?,
        data_len: data_len.as_slice_mut()?, data: data.as_slice_mut()?,
    };
    let limit = o.pos.len().min(o.bad.len());
    Ok(py.allow_threads(move || {
        let end = buf.len() as i64;
        let mut n = 0usize;
        let mut kept = 0usize;
        let mut p = start;
        let mut stop = END_OF_FILE;
        loop {
            let (base, caplen, origlen, size, mm);
            if walk {
                if p > end - PCAP_RECORD_HEADER {
                    stop = if p == end { END_OF_FILE } else { CUT };
                    break;
                }
                if n == limit {
                    stop = CUT;
                    break;
                }
                let cl = u32_at(buf, (p + INCL_LEN_AT) as usize, big_endian) as i64;
                if cl > max_len {
                    stop = TOO_LONG;
                    break;
                }
                if p + PCAP_RECORD_HEADER + cl > end {
                    stop = CUT;
                    break;
                }
                o.pos[n] = p;
                base = (p + PCAP_RECORD_HEADER) as usize;
                caplen = cl;
                origlen = u32_at(buf, (p + ORIG_LEN_AT) as usize, big_endian) as i64;
                size = sizes[0];
                mm = mmapped[0];
                p += PCAP_RECORD_HEADER + cl;
            } else {
                if n == data_offset.len() {
                    break;
                }
                base = data_offset[n] as usize;
                caplen = caplens[n];
                origlen = origlens[n];
                size = sizes[n];
                mm = mmapped[n];
            }
            kept += record(buf, base, caplen, origlen, size, mm, &at, iso_descriptor_bytes, data_prefix, kept, n, &mut o);
            n += 1;
        }
        (n as i64, p, stop)
    }))
}

/// Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
/// length of the data that follows) from `start` while a whole header fits, written to
/// `offsets`; returns (their count, the position after the last one).
#[pyfunction]
fn walk_chain(py: Python, buf: PyReadonlyArray1<u8>, start: i64, hdr_size: i64, len_pos: i64, big_endian: bool,
              mut offsets: PyReadwriteArray1<i64>) -> PyResult<(i64, i64)> {
    let buf = buf.as_slice()?;
    let offsets = offsets.as_slice_mut()?;
    Ok(py.allow_threads(move || {
        let end = buf.len() as i64;
        let mut n = 0usize;
        let mut pos = start;
        while pos <= end - hdr_size {
            offsets[n] = pos;
            n += 1;
            pos += hdr_size + u32_at(buf, (pos + len_pos) as usize, big_endian) as i64;
        }
        (n as i64, pos)
    }))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(walk_chain, m)?)?;
    Ok(())
}
