//! usbmon records of a pcap or pcapng capture decoded into the URB table (parsers/usbmon.py):
//! each record's usbmon header checked and its fields read at positions handed over from the
//! construct declaration, the first data bytes copied while the record is in cache.
//! A `UsbmonDecoder` appends the records of each read to its URB table; `take` hands it
//! over as Arrow columns (the URB record, usb/urbs.rs, and each record's `bad` code).
use arrow_array::types::UInt8Type;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{values_of, Columns};
use crate::bytes::{u16_at, u32_at, u64_at};

use super::urbs::{Urb, UrbRows};

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

/// The usbmon header layout (parsers/_usbmon_scan.py `Layout`, by name): each field's
/// position (`at`, in the order of FIELDS), the bytes of one isochronous descriptor, the
/// data bytes kept per record.
#[derive(FromPyObject)]
struct Layout {
    #[pyo3(attribute)]
    at: Vec<i64>,
    #[pyo3(attribute)]
    iso_descriptor_bytes: i64,
    #[pyo3(attribute)]
    data_prefix: i64,
}

/// One record to decode: its usbmon header at `base`, `caplen` bytes captured of `origlen`,
/// a header of `size` bytes, link type 220 (`mmapped`), at file offset `pos`.
struct Record {
    base: usize,
    caplen: i64,
    origlen: i64,
    size: i64,
    mmapped: bool,
    pos: i64,
}

/// The decoded records (one row per record): the URB table and each record's `bad` code.
#[derive(Default)]
struct Decoded {
    urbs: UrbRows,
    bad: Vec<u8>,
}

impl Decoded {
    /// Room for `records` more records and their data (pages never written cost nothing).
    fn reserve(&mut self, records: usize, prefix: usize) {
        self.urbs.reserve(records, records * prefix);
        self.bad.reserve(records);
    }

    /// Decodes one record's usbmon header and appends its row. A record cut by the
    /// capture's snap length (`origlen` > `caplen`, its `len_cap` within `origlen`) is good:
    /// its data is what was captured (`data_len`), the URB's length stays the header's.
    #[inline(always)]
    fn record(&mut self, buf: &[u8], r: &Record, layout: &Fields) {
        let (base, caplen, size, at) = (r.base, r.caplen, r.size, &layout.at);
        if caplen < size {
            self.bad.push(SHORT);
            self.urbs.push(&blank(r.pos), false);   // every column but `pos` zero
            return;
        }
        let ev = buf[base + at[TYPE]];
        let xf = buf[base + at[XFER]];
        let len_cap = u32_at(buf, base + at[LEN_CAP], false) as i64;
        let iso = if xf == 0 && r.mmapped { u32_at(buf, base + at[NDESC], false) as i64 * layout.iso } else { 0 };
        let why = if !(ev == b'S' || ev == b'C' || ev == b'E') {
            BAD_TYPE
        } else if xf > 3 {
            BAD_XFER
        } else if size + iso + len_cap > caplen
            && !(r.origlen > caplen && size + iso <= caplen && size + iso + len_cap <= r.origlen) {
            BAD_LEN_CAP
        } else {
            0
        };
        self.bad.push(why);
        let usec = u32_at(buf, base + at[TS_USEC], false) as u32 as i32 as i64;
        let has_setup = buf[base + at[FLAG_SETUP]] == 0 && ev == b'S';
        let mut setup = [0u8; 8];
        setup.copy_from_slice(&buf[base + at[SETUP]..base + at[SETUP] + 8]);
        let has_data = buf[base + at[FLAG_DATA]] == 0 && len_cap > 0;
        let captured = len_cap.min((caplen - size - iso).max(0));
        if why == 0 && has_data {
            let first = base + (size + iso) as usize;
            let k = captured.min(layout.prefix) as usize;
            self.urbs.data.extend_from_slice(&buf[first..first + k]);
        }
        let urb = Urb {
            t_ns: (u64_at(buf, base + at[TS_SEC], false) as i64).wrapping_mul(1_000_000_000).wrapping_add(usec * 1000),
            urb_id: u64_at(buf, base + at[ID], false), event: if why == 0 { ev } else { 0 }, xfer: xf,
            ep: buf[base + at[EP]], bus: u16_at(buf, base + at[BUS], false) as u16, dev: buf[base + at[DEV]],
            status: u32_at(buf, base + at[STATUS], false) as u32 as i32,
            length: u32_at(buf, base + at[LENGTH], false) as i64, setup: has_setup.then_some(setup),
            data_len: if has_data { captured } else { 0 }, pos: r.pos,
        };
        self.urbs.push(&urb, why == 0 && has_data);
    }
}

/// The row of a record too short for its header.
fn blank(pos: i64) -> Urb {
    Urb { t_ns: 0, urb_id: 0, event: 0, xfer: 0, ep: 0, bus: 0, dev: 0, status: 0, length: 0, setup: None,
          data_len: 0, pos }
}

/// Layout as the decoder uses it.
struct Fields {
    at: Vec<usize>,
    iso: i64,
    prefix: i64,
}

/// One read of a pcap file (parsers/_usbmon_scan.py `PcapBatches`, by name): its bytes
/// `buf` (file offset `base`), the record chain walked from `start` (an index into `buf`)
/// in byte order `big_endian`, records longer than `max_len` refused; every record's usbmon
/// header `header_size` bytes, link type 220 (`mmapped`) or not; room reserved for
/// `records` records.
#[derive(FromPyObject)]
struct PcapRead<'py> {
    #[pyo3(attribute)]
    buf: PyReadonlyArray1<'py, u8>,
    #[pyo3(attribute)]
    base: i64,
    #[pyo3(attribute)]
    start: i64,
    #[pyo3(attribute)]
    big_endian: bool,
    #[pyo3(attribute)]
    max_len: i64,
    #[pyo3(attribute)]
    header_size: i64,
    #[pyo3(attribute)]
    mmapped: bool,
    #[pyo3(attribute)]
    records: usize,
}

/// The packets of one read of a pcapng file, located by the block walk (by name): per
/// packet its data offset in `buf` (`data_at`), captured and original length, usbmon
/// header size (`size`), link type 220 (`mmapped`) and block offset in the file (`pos`).
#[derive(FromPyObject)]
struct PcapngPackets<'py> {
    #[pyo3(attribute)]
    buf: PyReadonlyArray1<'py, u8>,
    #[pyo3(attribute)]
    data_at: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    caplen: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    origlen: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    size: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    mmapped: PyReadonlyArray1<'py, bool>,
    #[pyo3(attribute)]
    pos: PyReadonlyArray1<'py, i64>,
}

/// How a pcap read's walk ended: the records decoded, where it stopped (file offset),
/// how: 0 end of buffer, 1 a record longer than `max_len`, 2 a record or header cut
/// short by the end of the buffer.
#[pyclass(get_all)]
struct Walked {
    records: usize,
    stop_at: i64,
    stop: i64,
}

/// The usbmon record decoder: each read's records appended to its columns, handed over by `take`.
#[pyclass]
struct UsbmonDecoder {
    fields: Fields,
    out: Decoded,
}

#[pymethods]
impl UsbmonDecoder {
    #[new]
    fn new(layout: Layout) -> PyResult<Self> {
        if layout.at.len() != NDESC + 1 || layout.at.iter().any(|&a| a < 0) || layout.data_prefix < 0 {
            return Err(PyValueError::new_err("UsbmonDecoder: a position for each usbmon field"));
        }
        let fields = Fields { at: layout.at.iter().map(|&a| a as usize).collect(), iso: layout.iso_descriptor_bytes,
                              prefix: layout.data_prefix };
        Ok(UsbmonDecoder { fields, out: Decoded::default() })
    }

    /// Walks the pcap record chain of one read, decoding each record as it goes.
    fn walk_pcap(&mut self, py: Python, read: PcapRead) -> PyResult<Walked> {
        let buf = read.buf.as_slice()?;
        if read.start < 0 {
            return Err(PyValueError::new_err("walk_pcap: start must not be negative"));
        }
        let (fields, out) = (&self.fields, &mut self.out);
        out.reserve(read.records, fields.prefix.max(0) as usize);
        Ok(py.allow_threads(move || {
            let end = buf.len() as i64;
            let mut n = 0usize;
            let mut p = read.start;
            let stop;
            loop {
                if p > end - PCAP_RECORD_HEADER {
                    stop = if p == end { END_OF_FILE } else { CUT };
                    break;
                }
                let caplen = u32_at(buf, (p + INCL_LEN_AT) as usize, read.big_endian) as i64;
                if caplen > read.max_len {
                    stop = TOO_LONG;
                    break;
                }
                if p + PCAP_RECORD_HEADER + caplen > end {
                    stop = CUT;
                    break;
                }
                let origlen = u32_at(buf, (p + ORIG_LEN_AT) as usize, read.big_endian) as i64;
                let r = Record { base: (p + PCAP_RECORD_HEADER) as usize, caplen, origlen, size: read.header_size,
                                 mmapped: read.mmapped, pos: read.base + p };
                out.record(buf, &r, fields);
                n += 1;
                p += PCAP_RECORD_HEADER + caplen;
            }
            Walked { records: n, stop_at: read.base + p, stop }
        }))
    }

    /// Decodes the packets of one pcapng read at their offsets; returns how many.
    fn decode_packets(&mut self, py: Python, packets: PcapngPackets) -> PyResult<usize> {
        let buf = packets.buf.as_slice()?;
        let (data_at, caplen, origlen, size, mmapped, pos) = (
            packets.data_at.as_slice()?, packets.caplen.as_slice()?, packets.origlen.as_slice()?,
            packets.size.as_slice()?, packets.mmapped.as_slice()?, packets.pos.as_slice()?);
        let n = data_at.len();
        if [caplen.len(), origlen.len(), size.len(), mmapped.len(), pos.len()].iter().any(|&m| m != n) {
            return Err(PyValueError::new_err("decode_packets: columns of unequal lengths"));
        }
        let (fields, out) = (&self.fields, &mut self.out);
        out.reserve(n, fields.prefix.max(0) as usize);
        py.allow_threads(move || {
            for i in 0..n {
                let r = Record { base: data_at[i] as usize, caplen: caplen[i], origlen: origlen[i], size: size[i],
                                 mmapped: mmapped[i], pos: pos[i] };
                out.record(buf, &r, fields);
            }
        });
        Ok(n)
    }

    /// The records decoded since the last `take` (they leave the decoder): the URB table
    /// (scsitrace/usb/urbs.py URBS; `pos` are file offsets, times absolute) with each
    /// record's `bad` code (0 or the first failed check; a bad record's event is null).
    fn take(&mut self, py: Python) -> PyResult<UsbmonRecords> {
        let d = std::mem::take(&mut self.out);
        let captured_short = d.urbs.captured_short();
        let mut columns = d.urbs.arrays()?;
        columns.push(("bad", values_of::<UInt8Type>(d.bad)));
        Ok(UsbmonRecords { urbs: Py::new(py, Columns::new(columns)?)?, captured_short })
    }
}

/// The records `take` hands over: the URB table with each record's `bad` code, and how many
/// good records were captured short (usb/urbs.rs `captured_short`, counted while decoding).
#[pyclass(get_all)]
struct UsbmonRecords {
    urbs: Py<Columns>,
    captured_short: usize,
}

/// Where the records of a chain start (file offsets) and where the chain ends.
#[pyclass(get_all)]
struct Chain {
    offsets: Py<PyArray1<i64>>,
    end: i64,
}

/// The record chain of `buf` (parsers/_pcap_scan.py `walk_chain`): records of a
/// `header_size` header holding, at `length_at`, the u32 length of the data that follows,
/// from `start` while a whole header fits (by name).
#[derive(FromPyObject)]
struct ChainLayout {
    #[pyo3(attribute)]
    start: i64,
    #[pyo3(attribute)]
    header_size: i64,
    #[pyo3(attribute)]
    length_at: i64,
    #[pyo3(attribute)]
    big_endian: bool,
}

/// The offsets of the chain's records and the position after the last one.
#[pyfunction]
fn walk_chain(py: Python, buf: PyReadonlyArray1<u8>, chain: ChainLayout) -> PyResult<Chain> {
    let buf = buf.as_slice()?;
    if chain.start < 0 || chain.header_size <= 0 || chain.length_at < 0 || chain.length_at + 4 > chain.header_size {
        return Err(PyValueError::new_err("walk_chain: a header holding its length field"));
    }
    let (offsets, end) = py.allow_threads(move || {
        let end = buf.len() as i64;
        let mut offsets = Vec::with_capacity(((end - chain.start).max(0) / chain.header_size + 1) as usize);
        let mut pos = chain.start;
        while pos <= end - chain.header_size {
            offsets.push(pos);
            pos += chain.header_size + u32_at(buf, (pos + chain.length_at) as usize, chain.big_endian) as i64;
        }
        (offsets, pos)
    });
    Ok(Chain { offsets: PyArray1::from_vec_bound(py, offsets).unbind(), end })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<UsbmonDecoder>()?;
    m.add_function(wrap_pyfunction!(walk_chain, m)?)?;
    Ok(())
}
