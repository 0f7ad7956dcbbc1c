//! The blocks of one read of a pcapng file walked (parsers/_pcap.py `PcapngWalk` drives the
//! reads, carries the unconsumed tail and raises or records the faults): section headers
//! switch the byte order and restart the interface table, interface descriptions add to it
//! (link type, if_tsresol), enhanced packet blocks become packet rows. Every read is
//! bounds-checked against the buffer: any input returns, none panics.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{ints, Columns};
use crate::bytes::{u16_at, u32_at};

const SHB: u64 = 0x0A0D_0D0A;
const IDB: u64 = 0x0000_0001;
const EPB: u64 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u64 = 0x1A2B_3C4D;
const BYTE_ORDER_SWAPPED: u64 = 0x4D3C_2B1A;
const OPT_IF_TSRESOL: u64 = 9;
const BLOCK_MIN: usize = 12;
const EPB_HEADER: usize = 28;
// why a walk stopped
const MORE: i64 = 0; // the next block is cut by the buffer's end: read more
const END: i64 = 1; // end of file at a block boundary
const TRUNCATED: i64 = 2; // end of file inside a block (at `fault_at`)
const BAD: i64 = 3; // a bad block (at `fault_at`, `fault`): the walk cannot go on

/// Interfaces as (link type, ns per timestamp tick).
type Interfaces = Vec<(i64, i64)>;

/// Where a walk starts: an index into the read (`start`), the file offset of the read's
/// first byte (`base`), the byte order and interfaces known there, whether the file ends
/// with this read (`eof`), whether a bad enhanced packet block stops the walk (`strict`).
#[derive(FromPyObject)]
struct WalkFrom {
    #[pyo3(attribute)]
    start: i64,
    #[pyo3(attribute)]
    base: i64,
    #[pyo3(attribute)]
    big_endian: bool,
    #[pyo3(attribute)]
    interfaces: Interfaces,
    #[pyo3(attribute)]
    eof: bool,
    #[pyo3(attribute)]
    strict: bool,
}

/// The packet rows of a walk, a column each (see `walk_pcapng`).
#[derive(Default)]
struct Packets {
    linktype: Vec<i64>,
    t_ns: Vec<i64>,
    block: Vec<i64>,
    data_at: Vec<i64>,
    caplen: Vec<i64>,
    origlen: Vec<i64>,
}

struct Walk {
    rows: Packets,
    pos: usize,
    big: bool,
    interfaces: Interfaces,
    bad: Vec<(i64, String)>,
    stop: i64,
    fault_at: i64,
    fault: String,
}

/// Nanoseconds per timestamp tick of an interface from its options in `buf[pos..end]`
/// (if_tsresol; default 1 us).
fn tsresol_ns(buf: &[u8], mut pos: usize, end: usize, big: bool) -> i64 {
    let mut tick = 1000;
    while pos + 4 <= end && end <= buf.len() {
        let code = u16_at(buf, pos, big);
        let length = u16_at(buf, pos + 2, big) as usize;
        if code == 0 {
            break;
        }
        if code == OPT_IF_TSRESOL && length >= 1 {
            let v = buf.get(pos + 4).copied().unwrap_or(0);
            tick = if v & 0x80 != 0 {
                // 1e9 / 2^k rounded half to even, as Python's round() does
                let per = 1e9 / ((1u128 << (v & 0x7F)) as f64);
                (per.round_ties_even() as i64).max(1)
            } else if v <= 9 {
                10i64.pow(9 - v as u32)
            } else {
                1
            };
        }
        pos += 4 + ((length + 3) & !3);
    }
    tick
}

/// Walks the blocks of `buf` from `from.start` (`from.base`: the file offset of `buf[0]`).
fn walk(buf: &[u8], from: WalkFrom) -> Walk {
    let WalkFrom { start, base, big_endian: mut big, mut interfaces, eof, strict } = from;
    let start = start as usize;
    let end = buf.len();
    let mut w = Walk { rows: Packets::default(), pos: start, big, interfaces: Vec::new(), bad: Vec::new(), stop: MORE,
                       fault_at: 0, fault: String::new() };
    let mut pos = start;
    loop {
        if pos.saturating_add(BLOCK_MIN) > end {
            if eof {
                if pos < end {
                    w.stop = TRUNCATED;
                    w.fault_at = base + pos as i64;
                } else {
                    w.stop = END;
                }
            }
            break;
        }
        let mut btype = u32_at(buf, pos, big);
        let mut blen = u32_at(buf, pos + 4, big);
        if btype == SHB {
            match u32_at(buf, pos + 8, false) {
                BYTE_ORDER_MAGIC => big = false,
                BYTE_ORDER_SWAPPED => big = true,
                _ => {}
            }
            btype = u32_at(buf, pos, big);
            blen = u32_at(buf, pos + 4, big);
            interfaces.clear();
        }
        if blen < BLOCK_MIN as u64 || blen % 4 != 0 {
            w.stop = BAD;
            w.fault_at = base + pos as i64;
            w.fault = format!("bad block length {} (block type 0x{:08x})", blen, btype);
            break;
        }
        let blen = blen as usize;
        let need = blen.max(if btype == EPB { EPB_HEADER } else { BLOCK_MIN });
        if pos + need > end {
            if eof {
                w.stop = TRUNCATED;
                w.fault_at = base + pos as i64;
            }
            break;
        }
        if btype == IDB {
            let linktype = u16_at(buf, pos + 8, big) as i64;
            interfaces.push((linktype, tsresol_ns(buf, pos + 16, pos + blen - 4, big)));
        } else if btype == EPB {
            let iface = u32_at(buf, pos + 8, big);
            let ticks = (u32_at(buf, pos + 12, big) << 32) | u32_at(buf, pos + 16, big);
            let caplen = u32_at(buf, pos + 20, big);
            let origlen = u32_at(buf, pos + 24, big);
            let known = (iface as usize) < interfaces.len();
            if !known || EPB_HEADER as u64 + caplen > blen as u64 {
                let why = if !known {
                    format!("enhanced packet block names interface {}, only {} described", iface, interfaces.len())
                } else {
                    format!("captured length {} does not fit its block of {} bytes", caplen, blen)
                };
                if strict {
                    w.stop = BAD;
                    w.fault_at = base + pos as i64;
                    w.fault = why;
                    break;
                }
                w.bad.push((base + pos as i64, why));
            } else {
                let (lt, tick) = interfaces[iface as usize];
                let r = &mut w.rows;
                r.linktype.push(lt);
                r.t_ns.push((ticks as i64).wrapping_mul(tick));
                r.block.push(base + pos as i64);
                r.data_at.push((pos + EPB_HEADER) as i64);
                r.caplen.push(caplen as i64);
                r.origlen.push(origlen as i64);
            }
        }
        pos += blen;
    }
    w.pos = pos;
    w.big = big;
    w.interfaces = interfaces;
    w
}

/// A walk's result: the packets (Columns: `linktype`, `t_ns`, `block` (its offset in the
/// file), `data_at` (the data's offset in the read), `caplen`, `origlen`); where the walk
/// stopped (`pos`, an index into the read); the byte order and interfaces there; the
/// skipped bad blocks as (offset, why); why it stopped (`stop`: 0 more bytes needed, 1 end
/// of file, 2 end of file inside the block at `fault_at`, 3 a bad block at `fault_at`,
/// `fault` saying why).
#[pyclass(get_all)]
struct PcapngWalked {
    packets: Py<Columns>,
    pos: i64,
    big_endian: bool,
    interfaces: Interfaces,
    bad: Vec<(i64, String)>,
    stop: i64,
    fault_at: i64,
    fault: String,
}

/// The blocks of one read `buf` walked from `from` (parsers/_pcap.py `PcapngWalk`).
#[pyfunction]
fn walk_pcapng(py: Python, buf: PyReadonlyArray1<u8>, from: WalkFrom) -> PyResult<PcapngWalked> {
    if from.start < 0 {
        return Err(PyValueError::new_err("walk_pcapng: start must not be negative"));
    }
    let bytes = buf.as_slice()?;
    let w = py.allow_threads(move || walk(bytes, from));
    let r = w.rows;
    let packets = Columns::new(vec![("linktype", ints(r.linktype)), ("t_ns", ints(r.t_ns)), ("block", ints(r.block)),
                                    ("data_at", ints(r.data_at)), ("caplen", ints(r.caplen)),
                                    ("origlen", ints(r.origlen))])?;
    Ok(PcapngWalked { packets: Py::new(py, packets)?, pos: w.pos as i64, big_endian: w.big, interfaces: w.interfaces,
                      bad: w.bad, stop: w.stop, fault_at: w.fault_at, fault: w.fault })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(walk_pcapng, m)?)?;
    Ok(())
}
