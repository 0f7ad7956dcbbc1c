//! The URB record: one row per usbmon event, declared once (scsitrace/usb/urbs.py `URBS`)
//! and crossing the boundary as an Arrow table in that schema. The readers (the pcap
//! decoder, the text scanner) build it with `UrbRows`; the machines (transfers, bot_pass,
//! BotStream) read it with `Urbs`.
use std::borrow::Cow;

use arrow_array::types::{Int32Type, Int64Type, UInt16Type, UInt64Type, UInt8Type};
use arrow_array::ArrayRef;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{ints, values_of, ByteColumn, Table, Views, INLINE, NULL, VIEW_BUFFER_BYTES};

/// The data bytes a machine reads of a URB (CBW 31, CSW 13, UAS IUs 32): scsitrace/usb/urbs.py
/// DATA_PREFIX. A reader may keep more (the text shows every byte a line has).
pub const DATA_PREFIX: usize = 32;

/// One URB event's fields, as a reader found them.
pub struct Urb {
    pub t_ns: i64,
    pub urb_id: u64,
    pub event: u8, // b'S', b'C', b'E'; 0: none (a row a reader marks bad)
    pub xfer: u8,
    pub ep: u8,
    pub bus: u16,
    pub dev: u8,
    pub status: i32,
    pub length: i64,
    pub setup: Option<[u8; 8]>,
    pub data_len: i64,
    pub pos: i64,
}

/// The URB table being built: rows pushed one by one, each with the data bytes appended to
/// `data` just before it (`push`), handed over as Arrow columns (`arrays`). The string and
/// binary columns are built as Arrow views while pushing (a value of at most 12 bytes inline
/// in its view, a longer one left in `data`), so handing them over copies nothing.
#[derive(Default)]
pub struct UrbRows {
    t_ns: Vec<i64>,
    urb_id: Vec<u64>,
    event: Views,
    xfer: Vec<u8>,
    ep: Vec<u8>,
    bus: Vec<u16>,
    dev: Vec<u8>,
    status: Vec<i32>,
    length: Vec<i64>,
    setup: Views,
    data_len: Vec<i64>,
    pos: Vec<i64>,
    /// the data bytes of the rows since the last full buffer (append a row's before pushing it)
    pub data: Vec<u8>,
    data_mark: usize, // where the next row's data starts in `data`
    full: Vec<Vec<u8>>, // earlier data buffers (each below VIEW_BUFFER_BYTES)
    data_views: Views,
    captured_short: usize,
}

impl UrbRows {
    /// Room for `rows` more rows and `bytes` more data bytes.
    pub fn reserve(&mut self, rows: usize, bytes: usize) {
        for v in [&mut self.t_ns, &mut self.length, &mut self.data_len, &mut self.pos] {
            v.reserve(rows);
        }
        for v in [&mut self.xfer, &mut self.ep, &mut self.dev] {
            v.reserve(rows);
        }
        self.urb_id.reserve(rows);
        self.bus.reserve(rows);
        self.status.reserve(rows);
        for v in [&mut self.event, &mut self.setup, &mut self.data_views] {
            v.reserve(rows);
        }
        self.data.reserve(bytes);
    }

    pub fn len(&self) -> usize {
        self.t_ns.len()
    }

    /// Appends a row; its data are the bytes appended to `data` since the previous row
    /// (`has_data` false: no data, a null).
    #[inline(always)]
    pub fn push(&mut self, u: &Urb, has_data: bool) {
        self.t_ns.push(u.t_ns);
        self.urb_id.push(u.urb_id);
        self.event.push_byte((u.event != 0).then_some(u.event));
        self.xfer.push(u.xfer);
        self.ep.push(u.ep);
        self.bus.push(u.bus);
        self.dev.push(u.dev);
        self.status.push(u.status);
        self.length.push(u.length);
        self.setup.push_eight(u.setup);
        self.data_len.push(u.data_len);
        self.pos.push(u.pos);
        self.push_data(has_data);
        self.captured_short += (u.event != 0 && is_captured_short(u.event, u.ep, u.xfer, u.data_len, u.length)) as usize;
    }

    /// How many of the rows (with an event) were captured short (`is_captured_short`).
    pub fn captured_short(&self) -> usize {
        self.captured_short
    }

    /// The view of the data appended since the last row: inline (and dropped from `data`)
    /// when short, else left in the current buffer (a new one started past VIEW_BUFFER_BYTES).
    #[inline(always)]
    fn push_data(&mut self, has_data: bool) {
        let start = self.data_mark;
        let len = self.data.len() - start;
        if !has_data || len <= INLINE {
            self.data_views.push_inline(has_data.then_some(&self.data[start..]));
            self.data.truncate(start);
            return;
        }
        if self.data.len() > VIEW_BUFFER_BYTES {
            let this = self.data.split_off(start);
            self.full.push(std::mem::replace(&mut self.data, this));
        }
        let start = self.data.len() - len;
        self.data_views.push_long(&self.data[start..], self.full.len(), start);
        self.data_mark = self.data.len();
    }

    /// The rows of `other` after these, its positions shifted by `pos_shift`.
    pub fn append(&mut self, other: UrbRows, pos_shift: i64) {
        self.t_ns.extend(other.t_ns);
        self.urb_id.extend(other.urb_id);
        self.event.append(other.event, 0);
        self.xfer.extend(other.xfer);
        self.ep.extend(other.ep);
        self.bus.extend(other.bus);
        self.dev.extend(other.dev);
        self.status.extend(other.status);
        self.length.extend(other.length);
        self.setup.append(other.setup, 0);
        self.data_len.extend(other.data_len);
        self.pos.extend(other.pos.iter().map(|p| p + pos_shift));
        self.captured_short += other.captured_short;
        // the other's buffers follow these: its views' buffer numbers shift by as many
        let mine = std::mem::take(&mut self.data);
        if !mine.is_empty() || !self.full.is_empty() {
            self.full.push(mine);
        }
        let shift = self.full.len();
        self.full.extend(other.full);
        self.data = other.data;
        self.data_mark = other.data_mark;
        self.data_views.append(other.data_views, shift);
    }

    /// The columns of scsitrace/usb/urbs.py URBS, in its order.
    pub fn arrays(self) -> PyResult<Vec<(&'static str, ArrayRef)>> {
        let mut buffers = self.full;
        buffers.push(self.data);
        Ok(vec![
            ("t_ns", ints(self.t_ns)),
            ("urb_id", values_of::<UInt64Type>(self.urb_id)),
            ("event", self.event.strings(Vec::new())?),
            ("xfer", values_of::<UInt8Type>(self.xfer)),
            ("ep", values_of::<UInt8Type>(self.ep)),
            ("bus", values_of::<UInt16Type>(self.bus)),
            ("dev", values_of::<UInt8Type>(self.dev)),
            ("status", values_of::<Int32Type>(self.status)),
            ("length", ints(self.length)),
            ("setup", self.setup.binaries(Vec::new())?),
            ("data", self.data_views.binaries(buffers)?),
            ("data_len", ints(self.data_len)),
            ("pos", ints(self.pos)),
        ])
    }
}

/// The URB table as the machines read it: integer columns (status and length widened to
/// int64 with `NULL` where the capture does not give them; a null elsewhere, a field tshark
/// did not show on the pyshark route, reads as 0), setup and data row by row.
pub struct Urbs<'a> {
    pub t_ns: Cow<'a, [i64]>,
    pub urb_id: Cow<'a, [u64]>,
    event: ByteColumn<'a>,
    pub xfer: Cow<'a, [u8]>,
    pub ep: Cow<'a, [u8]>,
    pub bus: Cow<'a, [u16]>,
    pub dev: Cow<'a, [u8]>,
    status: Cow<'a, [i32]>,
    status_known: Option<Vec<bool>>, // None: every status known
    pub length: Cow<'a, [i64]>,
    pub data_len: Cow<'a, [i64]>,
    pub pos: Cow<'a, [i64]>,
    setup: ByteColumn<'a>,
    data: ByteColumn<'a>,
}

impl<'a> Urbs<'a> {
    /// The columns of `table` (schema URBS, by name).
    pub fn read(table: &'a Table) -> PyResult<Self> {
        let urbs = Urbs {
            t_ns: table.values_or_zero::<Int64Type>("t_ns")?, urb_id: table.values_or_zero::<UInt64Type>("urb_id")?,
            event: table.bytes("event")?, xfer: table.values_or_zero::<UInt8Type>("xfer")?, ep: table.values_or_zero::<UInt8Type>("ep")?,
            bus: table.values_or_zero::<UInt16Type>("bus")?, dev: table.values_or_zero::<UInt8Type>("dev")?,
            status: table.values_or_zero::<Int32Type>("status")?, status_known: table.valid("status")?,
            length: lengths(table)?, data_len: table.values_or_zero::<Int64Type>("data_len")?,
            pos: table.values_or_zero::<Int64Type>("pos")?, setup: table.bytes("setup")?, data: table.bytes("data")?,
        };
        let n = urbs.t_ns.len();
        if [urbs.urb_id.len(), urbs.xfer.len(), urbs.ep.len(), urbs.bus.len(), urbs.dev.len(), urbs.pos.len()]
            .iter().any(|&m| m != n) {
            return Err(PyValueError::new_err("URB columns of unequal lengths"));
        }
        Ok(urbs)
    }

    /// Row `r`'s event letter (b'S', b'C', b'E'; 0 for a null).
    #[inline]
    pub fn event(&self, r: usize) -> u8 {
        self.event.first_byte(r)
    }

    /// Row `r`'s status (`NULL`: not known).
    #[inline]
    pub fn status(&self, r: usize) -> i64 {
        match &self.status_known {
            Some(known) if !known[r] => NULL,
            _ => self.status[r] as i64,
        }
    }

    /// Row `r`'s setup packet (a control submission's; zero after its bytes), if any.
    #[inline]
    pub fn setup(&self, r: usize) -> Option<[u8; 8]> {
        self.setup.get(r).map(|s| {
            let mut packet = [0; 8];
            let n = s.len().min(8);
            packet[..n].copy_from_slice(&s[..n]);
            packet
        })
    }

    /// Row `r`'s data bytes a machine reads (at most DATA_PREFIX; None: no data).
    #[inline]
    pub fn data(&self, r: usize) -> Option<&'a [u8]> {
        self.data.get(r).map(|d| &d[..d.len().min(DATA_PREFIX)])
    }
}

/// How many URBs of the table were captured short: an OUT submission or an IN completion
/// with some data captured, less than the URB's length (the snap length, or usbmon's
/// per-event limit: a fifth of its buffer, 61,440 bytes by default). Isochronous URBs are
/// left out (their length counts every packet of the frame).
#[pyfunction]
pub fn captured_short(py: Python, urbs: Table) -> PyResult<usize> {
    let u = Urbs::read(&urbs)?;
    let u = &u;
    Ok(py.allow_threads(|| (0..u.t_ns.len()).filter(|&r| {
        u.length[r] != NULL && is_captured_short(u.event(r), u.ep[r], u.xfer[r], u.data_len[r], u.length[r])
    }).count()))
}

/// The rule of `captured_short` for one URB (its length known); the readers count it as
/// they decode.
#[inline]
fn is_captured_short(event: u8, ep: u8, xfer: u8, captured: i64, length: i64) -> bool {
    let dir_in = ep & 0x80 != 0;
    let carries = if event == b'S' { !dir_in } else { dir_in };
    carries && xfer != 0 && captured > 0 && captured < length
}

/// The `length` column, `NULL` where unknown (borrowed when every length is known).
fn lengths(table: &Table) -> PyResult<Cow<'_, [i64]>> {
    match table.values::<Int64Type>("length") {
        Ok(known) => Ok(known),
        Err(_) => Ok(Cow::Owned(table.i64s_or_null("length")?)),
    }
}

/// The bytes kept (-1: no data) and the first 4 bytes as a little-endian u32 (0 if fewer) of
/// a URB's data: what the Bulk-Only rules look at.
#[inline]
pub fn size_and_head(data: Option<&[u8]>) -> (i64, u32) {
    match data {
        None => (-1, 0),
        Some(d) if d.len() >= 4 => (d.len() as i64, u32::from_le_bytes([d[0], d[1], d[2], d[3]])),
        Some(d) => (d.len() as i64, 0),
    }
}
