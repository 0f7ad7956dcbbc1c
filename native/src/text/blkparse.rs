//! blkparse's default event lines (parsers/blkparse.py EVENT and REST) read into columns
//! without regex, a block's lines on every core. As for usbmon text, a line is taken only
//! when it is certain to be a good event of exactly the fields the regexes read (the default
//! layout; known actions other than `m`); every other non-blank line (bad, comments, the
//! summary, messages, non-ASCII, a value at a range's edge, an unusual spacing of the
//! details) is handed back by position for the Python reader to decide.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use arrow_array::types::Int64Type;
use arrow_array::ArrayRef;

use super::{dec, for_each_line, scan_parts, strip_eol, Cursor};
use crate::arrow::{values_or_null, Columns};

const MAX_SECONDS: i64 = (i64::MAX) / 1_000_000_000 - 1;
const U32: i64 = u32::MAX as i64;
const MAX_NSECT: i64 = (u32::MAX as i64) / 512;
const ACTIONS: [&[u8]; 18] = [b"Q", b"M", b"F", b"G", b"S", b"R", b"D", b"C", b"P", b"U", b"T", b"I", b"X", b"B",
                              b"A", b"ZP", b"ZU", b"UT"];

/// Nullable integer column.
#[derive(Default)]
struct Opt {
    v: Vec<i64>,
    ok: Vec<bool>,
}

impl Opt {
    fn push(&mut self, x: Option<i64>) {
        self.v.push(x.unwrap_or(0));
        self.ok.push(x.is_some());
    }
    fn extend(&mut self, o: Opt) {
        self.v.extend(o.v);
        self.ok.extend(o.ok);
    }
    /// The Arrow column, null where the line has no such field.
    fn column(self) -> ArrayRef {
        values_or_null::<Int64Type>(self.v, self.ok)
    }
}

/// Packed strings (offsets into `bytes`).
#[derive(Default)]
struct Strs {
    bytes: Vec<u8>,
    ends: Vec<i64>,
}

impl Strs {
    fn push(&mut self, s: &[u8]) {
        self.bytes.extend_from_slice(s);
        self.ends.push(self.bytes.len() as i64);
    }
    fn extend(&mut self, o: Strs) {
        let base = self.bytes.len() as i64;
        self.bytes.extend(o.bytes);
        self.ends.extend(o.ends.iter().map(|e| e + base));
    }
}

#[derive(Default)]
struct Cols {
    line: Vec<i64>,
    major: Vec<i64>,
    minor: Vec<i64>,
    cpu: Vec<i64>,
    seq: Vec<i64>,
    sec: Vec<i64>,
    nsec: Vec<i64>,
    pid: Vec<i64>,
    act: Strs,
    rwbs: Strs,
    sector: Opt,
    nsect: Opt,
    split_sector: Opt,
    from_major: Opt,
    from_minor: Opt,
    from_sector: Opt,
    unplugs: Opt,
    bracket: Strs,
    has_bracket: Vec<bool>,
    other_line: Vec<i64>,
    other_start: Vec<i64>,
    other_end: Vec<i64>,
    newlines: i64,
}

struct Event<'a> {
    major: i64,
    minor: i64,
    cpu: i64,
    seq: i64,
    sec: i64,
    nsec: i64,
    pid: i64,
    act: &'a [u8],
    rwbs: &'a [u8],
    sector: Option<i64>,
    nsect: Option<i64>,
    split_sector: Option<i64>,
    from: Option<(i64, i64, i64)>,
    bracket: Option<&'a [u8]>,
    unplugs: Option<i64>,
}

fn blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// One or more blanks (spaces or tabs: the separators taken here).
fn gap(c: &mut Cursor) -> Option<()> {
    c.run(blank).map(|_| ())
}

fn ranged(d: &[u8], hi: i64) -> Option<i64> {
    dec(d).filter(|v| *v <= hi)
}

/// REST: `S`, `S + N`, `S / NEW`, `S + N <- (maj,min) S2`, `[comm]`, `[comm] N`, each part
/// optional and in this order, single spaces as blkparse prints them.
fn details<'a>(rest: &'a [u8], ev: &mut Event<'a>) -> Option<()> {
    let mut c = Cursor::new(rest);
    if let Some(d) = c.digits() {
        ev.sector = Some(ranged(d, i64::MAX)?);
        if c.s[c.i..].starts_with(b" + ") {
            c.i += 3;
            ev.nsect = Some(ranged(c.digits()?, MAX_NSECT)?);
        } else if c.s[c.i..].starts_with(b" / ") {
            c.i += 3;
            ev.split_sector = Some(ranged(c.digits()?, i64::MAX)?);
        }
    }
    c.run(blank);
    if c.s[c.i..].starts_with(b"<- (") {
        c.i += 4;
        let maj = ranged(c.digits()?, 4095)?;
        c.expect(b',')?;
        let min = ranged(c.digits()?, (1 << 20) - 1)?;
        c.expect(b')')?;
        c.expect(b' ')?;
        ev.from = Some((maj, min, ranged(c.digits()?, i64::MAX)?));
        c.run(blank);
    }
    if c.peek() == Some(b'[') {
        let close = c.s.iter().rposition(|b| *b == b']')?;
        if close <= c.i {
            return None;
        }
        let inside = &c.s[c.i + 1..close];
        if !inside.iter().all(|b| (1..0x80).contains(b)) {
            return None; // a NUL or non-ASCII byte: Python names the line
        }
        ev.bracket = Some(inside);
        c.i = close + 1;
        c.run(blank);
    }
    if let Some(d) = c.digits() {
        ev.unplugs = Some(ranged(d, U32)?);
        c.run(blank);
    }
    if c.at_end() { Some(()) } else { None }
}

fn parse(s: &[u8]) -> Option<Event<'_>> {
    let mut c = Cursor::new(s);
    c.run(blank);
    let major = ranged(c.digits()?, 4095)?;
    c.expect(b',')?;
    let minor = ranged(c.digits()?, (1 << 20) - 1)?;
    gap(&mut c)?;
    let cpu = ranged(c.digits()?, i32::MAX as i64)?; // RAW_EVENTS.cpu is Int32
    gap(&mut c)?;
    let seq = ranged(c.digits()?, U32)?;
    gap(&mut c)?;
    let sec = ranged(c.digits()?, MAX_SECONDS)?;
    c.expect(b'.')?;
    let frac = c.digits()?;
    if frac.len() != 9 {
        return None;
    }
    let nsec = dec(frac)?;
    gap(&mut c)?;
    let pid = ranged(c.digits()?, U32)?;
    gap(&mut c)?;
    let act = c.run(|b| b.is_ascii_alphabetic())?;
    if !ACTIONS.contains(&act) {
        return None;
    }
    gap(&mut c)?;
    let rwbs = c.run(|b| b.is_ascii_uppercase())?;
    let mut ev = Event { major, minor, cpu, seq, sec, nsec, pid, act, rwbs, sector: None, nsect: None,
                         split_sector: None, from: None, bracket: None, unplugs: None };
    if !c.at_end() {
        gap(&mut c)?;
        let mut end = s.len();
        while end > c.i && blank(s[end - 1]) {
            end -= 1;
        }
        details(&s[c.i..end], &mut ev)?;
    }
    Some(ev)
}

impl Cols {
    fn push(&mut self, e: Event, line: i64) {
        self.line.push(line);
        self.major.push(e.major);
        self.minor.push(e.minor);
        self.cpu.push(e.cpu);
        self.seq.push(e.seq);
        self.sec.push(e.sec);
        self.nsec.push(e.nsec);
        self.pid.push(e.pid);
        self.act.push(e.act);
        self.rwbs.push(e.rwbs);
        self.sector.push(e.sector);
        self.nsect.push(e.nsect);
        self.split_sector.push(e.split_sector);
        self.from_major.push(e.from.map(|f| f.0));
        self.from_minor.push(e.from.map(|f| f.1));
        self.from_sector.push(e.from.map(|f| f.2));
        self.unplugs.push(e.unplugs);
        self.bracket.push(e.bracket.unwrap_or(b""));
        self.has_bracket.push(e.bracket.is_some());
    }
}

fn scan_part(part: &[u8]) -> Cols {
    let mut cols = Cols::default();
    cols.newlines = for_each_line(part, |n, start, line| {
        let s = strip_eol(line);
        if s.iter().all(|b| blank(*b)) {
            return; // blank: neither an event nor a bad line
        }
        match parse(s) {
            Some(e) => cols.push(e, n),
            None => {
                cols.other_line.push(n);
                cols.other_start.push(start as i64);
                cols.other_end.push((start + line.len()) as i64);
            }
        }
    });
    cols
}

fn joined(parts: Vec<Cols>, offsets: Vec<usize>) -> Cols {
    let mut out = Cols::default();
    let mut line0 = 0i64;
    for (p, off) in parts.into_iter().zip(offsets) {
        out.line.extend(p.line.iter().map(|l| l + line0));
        out.major.extend(p.major);
        out.minor.extend(p.minor);
        out.cpu.extend(p.cpu);
        out.seq.extend(p.seq);
        out.sec.extend(p.sec);
        out.nsec.extend(p.nsec);
        out.pid.extend(p.pid);
        out.act.extend(p.act);
        out.rwbs.extend(p.rwbs);
        out.sector.extend(p.sector);
        out.nsect.extend(p.nsect);
        out.split_sector.extend(p.split_sector);
        out.from_major.extend(p.from_major);
        out.from_minor.extend(p.from_minor);
        out.from_sector.extend(p.from_sector);
        out.unplugs.extend(p.unplugs);
        out.bracket.extend(p.bracket);
        out.has_bracket.extend(p.has_bracket);
        out.other_line.extend(p.other_line.iter().map(|l| l + line0));
        out.other_start.extend(p.other_start.iter().map(|s| s + off as i64));
        out.other_end.extend(p.other_end.iter().map(|s| s + off as i64));
        line0 += p.newlines;
    }
    out.newlines = line0;
    out
}

type Ints = Py<PyArray1<i64>>;
type Mask = Py<PyArray1<bool>>;
type Bytes = Py<PyArray1<u8>>;

/// The events the scanner took (one row each: `line`, index in the block, and the fields;
/// an optional field with its mask `NAME_valid`; strings packed: `NAME_bytes`, `NAME_ends`,
/// `bracket` there where `has_bracket`), the block's `newlines` and the lines left to the
/// Python reader (`other_line`, `other_start`, `other_end`: their own length).
#[pyclass(get_all)]
struct BlkparseScan {
    line: Ints,
    major: Ints,
    minor: Ints,
    cpu: Ints,
    seq: Ints,
    sec: Ints,
    nsec: Ints,
    pid: Ints,
    act_bytes: Bytes,
    act_ends: Ints,
    rwbs_bytes: Bytes,
    rwbs_ends: Ints,
    bracket_bytes: Bytes,
    bracket_ends: Ints,
    has_bracket: Mask,
    optional: Py<Columns>,
    newlines: i64,
    other_line: Ints,
    other_start: Ints,
    other_end: Ints,
}

fn np<T: numpy::Element>(py: Python, v: Vec<T>) -> Py<PyArray1<T>> {
    v.into_pyarray_bound(py).unbind()
}

/// Scans blkparse event lines of `buf` (whole lines) on `threads` threads (`BlkparseScan`).
#[pyfunction]
fn scan_blkparse<'py>(py: Python<'py>, buf: PyReadonlyArray1<'py, u8>, threads: usize) -> PyResult<BlkparseScan> {
    let bytes = buf.as_slice()?;
    let c = py.allow_threads(|| {
        let (scanned, offsets) = scan_parts(bytes, threads, scan_part);
        joined(scanned, offsets)
    });
    Ok(BlkparseScan {
        line: np(py, c.line), major: np(py, c.major), minor: np(py, c.minor), cpu: np(py, c.cpu),
        seq: np(py, c.seq), sec: np(py, c.sec), nsec: np(py, c.nsec), pid: np(py, c.pid),
        act_bytes: np(py, c.act.bytes), act_ends: np(py, c.act.ends),
        rwbs_bytes: np(py, c.rwbs.bytes), rwbs_ends: np(py, c.rwbs.ends),
        bracket_bytes: np(py, c.bracket.bytes), bracket_ends: np(py, c.bracket.ends),
        has_bracket: np(py, c.has_bracket),
        optional: Py::new(py, Columns::new(vec![
            ("sector", c.sector.column()), ("nsect", c.nsect.column()), ("split_sector", c.split_sector.column()),
            ("from_major", c.from_major.column()), ("from_minor", c.from_minor.column()),
            ("from_sector", c.from_sector.column()), ("unplugs", c.unplugs.column())])?)?,
        newlines: c.newlines,
        other_line: np(py, c.other_line), other_start: np(py, c.other_start), other_end: np(py, c.other_end),
    })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan_blkparse, m)?)?;
    Ok(())
}
