//! usbmon text lines (`1u`, `1t`; parsers/usbmon.py TEXT_RECORD) read into the URB table
//! without regex: a block's lines split on both cores, each line's fields read by a cursor.
//! A line is taken here only when it is certain to be a good record of exactly the fields
//! the regex would read; every other non-blank line (bad, non-ASCII, isochronous, a value at
//! the edge of its range) is handed back by position for the Python reader to decide, so the
//! error messages and rare forms stay its own.
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::arrow::{ints, Columns};
use crate::usb::urbs::{Urb, UrbRows};

use super::{dec, for_each_line, hex_byte, hex_u64, scan_parts, strip_end, Cursor};

const EINPROGRESS: i32 = -115;
const MAX_SECONDS: i64 = (i64::MAX) / 1_000_000_000 - 1;

/// One record's fields, as the Python reader's columns hold them.
struct Row<'a> {
    t_ns: i64,
    urb_id: u64,
    event: u8,
    xfer: u8,
    ep: u8,
    bus: Option<u16>,
    dev: u8,
    status: i32,
    length: i64,
    setup: Option<[u8; 8]>,
    data: Option<&'a [u8]>, // the hex words (spaces between), when the flag is `=`
}

/// A part's records (the URB table), and what the Python side needs besides.
#[derive(Default)]
struct Cols {
    urbs: UrbRows, // `pos`: line index in the part
    any_bus: bool,
    other_line: Vec<i64>, // lines left to the Python reader: index in the part, byte span
    other_start: Vec<i64>,
    other_end: Vec<i64>,
    newlines: i64,
}

fn timestamp(c: &mut Cursor) -> Option<i64> {
    let start = c.i;
    let whole = c.digits()?;
    let frac = if c.eat(b'.') { Some(c.digits()?) } else { None };
    if c.i - start > 18 {
        return None;
    }
    let sec = dec(whole)?;
    match frac {
        None => sec.checked_mul(1000),
        Some(f) => {
            if sec > MAX_SECONDS {
                return None;
            }
            let mut ns: i64 = 0;
            for k in 0..9 {
                ns = ns * 10 + f.get(k).map_or(0, |b| (b - b'0') as i64);
            }
            Some(sec * 1_000_000_000 + ns)
        }
    }
}

fn ranged(d: &[u8], hi: i64) -> Option<i64> {
    dec(d).filter(|v| *v <= hi)
}

/// `XX XX XXXX XXXX XXXX`: the setup packet's bytes (the 16-bit words little-endian).
fn setup(c: &mut Cursor) -> Option<[u8; 8]> {
    let mut out = [0u8; 8];
    let mut k = 0;
    for (n, width) in [2usize, 2, 4, 4, 4].iter().enumerate() {
        if n > 0 {
            c.expect(b' ')?;
        }
        let h = c.hex()?;
        if h.len() != *width {
            return None;
        }
        let v = hex_u64(h);
        if *width == 2 {
            out[k] = v as u8;
            k += 1;
        } else {
            out[k] = v as u8;
            out[k + 1] = (v >> 8) as u8;
            k += 2;
        }
    }
    Some(out)
}

/// The status field of a non-setup line (`-` or a 32-bit integer, then `:n` fields);
/// None for forms left to Python (isochronous descriptors, `-` on a completion).
fn status(c: &mut Cursor, event: u8) -> Option<i32> {
    let value = if c.eat(b'-') {
        match c.digits() {
            Some(d) => -dec(d)?,
            None if event == b'S' => EINPROGRESS as i64,
            None => return None,
        }
    } else {
        dec(c.digits()?)?
    };
    while c.eat(b':') {
        c.eat(b'-');
        c.digits()?;
    }
    if value < i32::MIN as i64 || value > i32::MAX as i64 {
        return None;
    }
    Some(value as i32)
}

fn words(c: &mut Cursor) -> Option<()> {
    c.hex()?;
    while c.eat(b' ') {
        c.hex()?;
    }
    Some(())
}

fn parse(s: &[u8]) -> Option<Row<'_>> {
    let mut c = Cursor::new(s);
    let tag = c.hex()?;
    if tag.len() > 16 {
        return None;
    }
    c.expect(b' ')?;
    let t_ns = timestamp(&mut c)?;
    c.expect(b' ')?;
    let event = c.byte().filter(|b| matches!(b, b'S' | b'C' | b'E'))?;
    c.expect(b' ')?;
    let xfer = match c.byte()? {
        b'Z' => 0,
        b'I' => 1,
        b'C' => 2,
        b'B' => 3,
        _ => return None,
    };
    let dir_in = match c.byte()? {
        b'i' => true,
        b'o' => false,
        _ => return None,
    };
    c.expect(b':')?;
    let n1 = c.digits()?;
    c.expect(b':')?;
    let n2 = c.digits()?;
    let (bus, dev, ep) = if c.eat(b':') {
        (Some(ranged(n1, 65535)? as u16), n2, c.digits()?)
    } else {
        (None, n1, n2)
    };
    let dev = ranged(dev, 127)? as u8;
    let ep = ranged(ep, 15)? as u8 | if dir_in { 0x80 } else { 0 };
    c.expect(b' ')?;
    let (status, setup) = if c.eat(b's') {
        c.expect(b' ')?;
        (EINPROGRESS, Some(setup(&mut c)?))
    } else {
        (status(&mut c, event)?, None)
    };
    c.expect(b' ')?;
    let length = ranged(c.digits()?, u32::MAX as i64)?;
    let mut data = None;
    if !c.at_end() {
        c.expect(b' ')?;
        let flag = c.byte().filter(|b| (0x21..=0x7e).contains(b))?;
        if !c.at_end() {
            c.expect(b' ')?;
            let start = c.i;
            words(&mut c)?;
            if flag == b'=' {
                data = Some(&s[start..c.i]);
            }
        }
    }
    if !c.at_end() {
        return None; // an isochronous line, or not a record: Python decides
    }
    Some(Row { t_ns, urb_id: hex_u64(tag), event, xfer, ep, bus, dev, status, length, setup, data })
}

/// Appends the bytes of hex words (spaces between) to `out`; None (and nothing appended)
/// for an odd number of digits.
fn data_bytes(words: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let at = out.len();
    let mut hi: Option<u8> = None;
    for &b in words {
        if b == b' ' {
            continue;
        }
        match hi.take() {
            None => hi = Some(b),
            Some(h) => match hex_byte(h, b) {
                Some(v) => out.push(v),
                None => {
                    out.truncate(at);
                    return None;
                }
            },
        }
    }
    if hi.is_some() {
        out.truncate(at);
        return None;
    }
    Some(out.len() - at)
}

impl Cols {
    fn push(&mut self, r: &Row, line: i64) -> bool {
        let data = &mut self.urbs.data;
        let size = match r.data {
            Some(w) => match data_bytes(w, data) {
                Some(n) => n as i64,
                None => return false,
            },
            None => 0,
        };
        self.any_bus |= r.bus.is_some();
        let urb = Urb { t_ns: r.t_ns, urb_id: r.urb_id, event: r.event, xfer: r.xfer, ep: r.ep,
                        bus: r.bus.unwrap_or(0), dev: r.dev, status: r.status, length: r.length, setup: r.setup,
                        data_len: size, pos: line };
        self.urbs.push(&urb, r.data.is_some());
        true
    }

    fn other(&mut self, line: i64, start: usize, len: usize) {
        self.other_line.push(line);
        self.other_start.push(start as i64);
        self.other_end.push((start + len) as i64);
    }

    /// Room for about `lines` records (a record line is 50-120 bytes).
    fn with_capacity(lines: usize) -> Self {
        let mut cols = Cols::default();
        cols.urbs.reserve(lines, lines * 16);
        cols
    }
}

fn scan_part(part: &[u8]) -> Cols {
    let mut cols = Cols::with_capacity(part.len() / 48 + 16);
    cols.newlines = for_each_line(part, |n, start, line| {
        let s = strip_end(line);
        if s.is_empty() {
            return;
        }
        // every byte the parser accepts is ASCII: a non-ASCII line is never taken
        let taken = matches!(parse(s), Some(r) if cols.push(&r, n));
        if !taken {
            cols.other(n, start, line.len());
        }
    });
    cols
}

/// The parts' columns as one (line indexes made block-relative, data offsets shifted).
fn joined(mut parts: Vec<Cols>, offsets: Vec<usize>) -> Cols {
    if parts.len() == 1 {
        return parts.pop().unwrap();
    }
    let mut out = Cols::default();
    let rows: usize = parts.iter().map(|p| p.urbs.len()).sum();
    let bytes: usize = parts.iter().map(|p| p.urbs.data.len()).sum();
    out.urbs.reserve(rows, bytes);
    let mut line0 = 0i64;
    for (p, off) in parts.into_iter().zip(offsets) {
        out.urbs.append(p.urbs, line0);
        out.any_bus |= p.any_bus;
        out.other_line.extend(p.other_line.iter().map(|l| l + line0));
        out.other_start.extend(p.other_start.iter().map(|s| s + off as i64));
        out.other_end.extend(p.other_end.iter().map(|s| s + off as i64));
        line0 += p.newlines;
    }
    out.newlines = line0;
    out
}

/// The records the scanner took (`urbs`: the URB table, scsitrace/usb/urbs.py URBS, with
/// every data byte a line shows, `pos` the line index in the block from 0, times as
/// written), `any_bus`, `newlines`, and the lines left to Python (`other`: `line`, `start`,
/// `end`, the byte span without the newline).
#[pyclass(get_all)]
struct UsbmonScan {
    urbs: Py<Columns>,
    any_bus: bool,
    newlines: i64,
    other: Py<Columns>,
}

/// Scans the usbmon text lines of `buf` (whole lines) on `threads` threads (`UsbmonScan`).
#[pyfunction]
fn scan_usbmon<'py>(py: Python<'py>, buf: PyReadonlyArray1<'py, u8>, threads: usize) -> PyResult<UsbmonScan> {
    let bytes = buf.as_slice()?;
    let c = py.allow_threads(|| {
        let (scanned, offsets) = scan_parts(bytes, threads, scan_part);
        joined(scanned, offsets)
    });
    let other = Columns::new(vec![("line", ints(c.other_line)), ("start", ints(c.other_start)),
                                  ("end", ints(c.other_end))])?;
    Ok(UsbmonScan { urbs: Py::new(py, Columns::new(c.urbs.arrays()?)?)?, any_bus: c.any_bus, newlines: c.newlines,
                    other: Py::new(py, other)? })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan_usbmon, m)?)?;
    Ok(())
}
