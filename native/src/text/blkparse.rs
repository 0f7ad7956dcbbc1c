//! blkparse's default event lines (parsers/blkparse.py EVENT and REST) read into the block
//! layer's raw events without regex, a block's lines on every core. As for usbmon text, a
//! line is taken only when it is certain to be a good event of exactly the fields the
//! regexes read (the default layout; known actions other than `m`); every other non-blank
//! line (bad, comments, the summary, messages, non-ASCII, a value at a range's edge, an
//! unusual spacing of the details) is handed back by position for the Python reader to decide.
//!
//! The rules from a line's fields to an event live here only, for the lines the scanner takes
//! and for those Python decoded (`blkparse_events`): the action code of a letter, the RWBS
//! back to category and zone bits, the device and byte count, the error in brackets, a
//! remap's and a split's or unplug's details, the process name in brackets. So do blkparse's
//! own counts (`BlkparseTally`): events by CPU, letter and read/write (what its summary
//! prints) and the gaps in each CPU's sequence numbers.
use std::sync::Arc;

use arrow_array::types::{Int16Type, Int32Type, UInt32Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray, StringArray};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{dec, for_each_line, scan_parts, strip_eol, Cursor};
use crate::arrow::{ints, values_of, Columns, Table, NULL};
use crate::hash::IntMap;

const MAX_SECONDS: i64 = (i64::MAX) / 1_000_000_000 - 1;
const U32: i64 = u32::MAX as i64;
const MAX_NSECT: i64 = (u32::MAX as i64) / 512;
/// blkparse's action letters and their __BLK_TA_* codes (scsitrace/block/events.py TA; `UT`,
/// the unplug timer, is T's code). A letter's index here is its `letter` code.
const ACTIONS: [(&[u8], u32); 18] = [(b"Q", 1), (b"M", 2), (b"F", 3), (b"G", 4), (b"S", 5), (b"R", 6), (b"D", 7),
                                     (b"C", 8), (b"P", 9), (b"U", 10), (b"T", 11), (b"I", 12), (b"X", 13),
                                     (b"B", 14), (b"A", 15), (b"ZP", 18), (b"ZU", 19), (b"UT", 11)];
const LETTER_R: u8 = 5;
const LETTER_C: u8 = 7;
const LETTER_A: u8 = 14;
const TC_SHIFT: u32 = 16;
// BLK_TC_* bits (scsitrace/block/events.py TC)
const TC_READ: u32 = 1 << 0;
const TC_WRITE: u32 = 1 << 1;
const TC_FLUSH: u32 = 1 << 2;
const TC_SYNC: u32 = 1 << 3;
const TC_AHEAD: u32 = 1 << 11;
const TC_META: u32 = 1 << 12;
const TC_DISCARD: u32 = 1 << 13;
const TC_FUA: u32 = 1 << 15;
/// RWBS letters of the operation's body and their bits (F is FLUSH first, FUA later).
const RWBS_BITS: [(u8, u32); 6] = [(b'R', TC_READ), (b'W', TC_WRITE), (b'D', TC_DISCARD), (b'A', TC_AHEAD),
                                   (b'S', TC_SYNC), (b'M', TC_META)];
/// v8's zone operations in RWBS (blkparse's fill_rwbs) and their bit among the action's upper
/// 32 bits (TC ZONE_APPEND.. >> 16); ZRA before ZR.
const ZONES: [(&[u8], u32); 6] = [(b"ZRA", 1 << 2), (b"ZA", 1 << 0), (b"ZR", 1 << 1), (b"ZF", 1 << 3),
                                  (b"ZO", 1 << 4), (b"ZC", 1 << 5)];

fn letter_of(act: &[u8]) -> Option<u8> {
    ACTIONS.iter().position(|(a, _)| *a == act).map(|k| k as u8)
}

/// The action's low and high 32 bits for blkparse's letter and RWBS: the letter's code, then
/// the RWBS's categories (<< 16): F first = flush, F later = FUA; a zone operation after the
/// flush's F gives its upper bit, and the rest of the RWBS is read after it.
fn action_of(letter: u8, rwbs: &[u8]) -> (u32, u32) {
    let mut bits = 0u32;
    let mut body = rwbs;
    if body.first() == Some(&b'F') {
        bits |= TC_FLUSH;
        body = &body[1..];
    }
    let mut hi = 0u32;
    let mut rest = body;
    if let Some((z, bit)) = ZONES.iter().find(|(z, _)| body.starts_with(z)) {
        hi = *bit;
        rest = &body[z.len()..]; // the zone's text reads as one letter Z
        if rest.contains(&b'F') {
            bits |= TC_FUA;
        }
    } else if body.len() > 1 && body[1..].contains(&b'F') {
        bits |= TC_FUA;
    }
    for (ch, bit) in RWBS_BITS {
        if rest.contains(&ch) {
            bits |= bit;
        }
    }
    (ACTIONS[letter as usize].1 | bits << TC_SHIFT, hi)
}

/// blkparse's summary counts the event as a write when its RWBS holds W or is a discard.
fn is_write(rwbs: &[u8]) -> bool {
    rwbs.contains(&b'W') || rwbs.strip_prefix(b"F".as_slice()).unwrap_or(rwbs).first() == Some(&b'D')
}

/// The 16-bit error field of `[N]` after a completion or requeue: N as an integer (a sign
/// allowed; anything else is 0), kept to 16 bits as the record holds it (blkparse prints it
/// unsigned, 65531 for -EIO, other tools signed: either way the same).
fn error_of(bracket: Option<&[u8]>) -> i16 {
    bracket.and_then(|b| std::str::from_utf8(b).ok()).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0) as i16
}

fn device(major: i64, minor: i64) -> u32 {
    ((major as u32) << 20).wrapping_add(minor as u32)
}

struct Event<'a> {
    major: i64,
    minor: i64,
    cpu: i64,
    seq: i64,
    sec: i64,
    nsec: i64,
    pid: i64,
    letter: u8,
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
    let letter = letter_of(c.run(|b| b.is_ascii_alphabetic())?)?;
    gap(&mut c)?;
    let rwbs = c.run(|b| b.is_ascii_uppercase())?;
    let mut ev = Event { major, minor, cpu, seq, sec, nsec, pid, letter, rwbs, sector: None, nsect: None,
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

/// The first name in brackets of each pid (not after an error action), in line order.
#[derive(Default)]
struct Names {
    seen: IntMap<i64, ()>,
    pid: Vec<i64>,
    line: Vec<i64>,
    name: Vec<String>,
}

impl Names {
    fn first(&mut self, pid: i64, line: i64, name: &[u8]) {
        if self.seen.insert(pid, ()).is_none() {
            self.pid.push(pid);
            self.line.push(line);
            self.name.push(String::from_utf8_lossy(name).into_owned());
        }
    }

    fn append(&mut self, o: Names) {
        for ((pid, line), name) in o.pid.into_iter().zip(o.line).zip(o.name) {
            self.first(pid, line, name.as_bytes());
        }
    }

    fn columns(self) -> PyResult<Columns> {
        Columns::new(vec![("pid", ints(self.pid)), ("line", ints(self.line)),
                          ("name", Arc::new(StringArray::from(self.name)) as ArrayRef)])
    }
}

/// Raw events (block.RAW_EVENTS) with each event's `letter` (index in ACTIONS) and whether
/// blkparse counts it as a `write`.
#[derive(Default)]
struct Rows {
    time_abs: Vec<i64>,
    seq: Vec<i64>,
    cpu: Vec<i32>,
    action: Vec<u32>,
    device: Vec<u32>,
    sector: Vec<i64>,
    bytes: Vec<i64>,
    pid: Vec<i64>,
    error: Vec<i16>,
    pdu_dev: Vec<u32>,
    pdu_sector: Vec<i64>,
    pdu_int: Vec<i64>,
    has_remap: Vec<bool>,
    has_int: Vec<bool>,
    position: Vec<i64>,
    action_hi: Vec<u32>,
    letter: Vec<u8>,
    write: Vec<bool>,
    names: Names,
}

impl Rows {
    fn push(&mut self, e: &Event, line: i64) {
        let (action, hi) = action_of(e.letter, e.rwbs);
        let is_err = e.letter == LETTER_C || e.letter == LETTER_R;
        let remap = e.from.filter(|_| e.letter == LETTER_A);
        self.time_abs.push(e.sec.wrapping_mul(1_000_000_000).wrapping_add(e.nsec));
        self.seq.push(e.seq);
        self.cpu.push(e.cpu as i32);
        self.action.push(action);
        self.device.push(device(e.major, e.minor));
        self.sector.push(e.sector.unwrap_or(0));
        self.bytes.push(e.nsect.unwrap_or(0).wrapping_mul(512));
        self.pid.push(e.pid);
        self.error.push(if is_err { error_of(e.bracket) } else { 0 });
        self.pdu_dev.push(remap.map_or(0, |f| device(f.0, f.1)));
        self.pdu_sector.push(remap.map_or(0, |f| f.2));
        self.pdu_int.push(e.unplugs.or(e.split_sector).unwrap_or(0));
        self.has_remap.push(remap.is_some());
        self.has_int.push(e.unplugs.is_some() || e.split_sector.is_some());
        self.position.push(line);
        self.action_hi.push(hi);
        self.letter.push(e.letter);
        self.write.push(is_write(e.rwbs));
        if let (false, Some(name)) = (is_err, e.bracket) {
            self.names.first(e.pid, line, name);
        }
    }

    fn reserve(&mut self, n: usize) {
        self.time_abs.reserve(n);
        self.seq.reserve(n);
        self.cpu.reserve(n);
        self.action.reserve(n);
        self.device.reserve(n);
        self.sector.reserve(n);
        self.bytes.reserve(n);
        self.pid.reserve(n);
        self.error.reserve(n);
        self.pdu_dev.reserve(n);
        self.pdu_sector.reserve(n);
        self.pdu_int.reserve(n);
        self.has_remap.reserve(n);
        self.has_int.reserve(n);
        self.position.reserve(n);
        self.action_hi.reserve(n);
        self.letter.reserve(n);
        self.write.reserve(n);
    }

    /// `o`'s rows after these (moved, not copied, when there are none yet).
    fn append(&mut self, o: Rows) {
        if self.time_abs.is_empty() && self.names.pid.is_empty() {
            *self = o;
            return;
        }
        self.time_abs.extend(o.time_abs);
        self.seq.extend(o.seq);
        self.cpu.extend(o.cpu);
        self.action.extend(o.action);
        self.device.extend(o.device);
        self.sector.extend(o.sector);
        self.bytes.extend(o.bytes);
        self.pid.extend(o.pid);
        self.error.extend(o.error);
        self.pdu_dev.extend(o.pdu_dev);
        self.pdu_sector.extend(o.pdu_sector);
        self.pdu_int.extend(o.pdu_int);
        self.has_remap.extend(o.has_remap);
        self.has_int.extend(o.has_int);
        self.position.extend(o.position);
        self.action_hi.extend(o.action_hi);
        self.letter.extend(o.letter);
        self.write.extend(o.write);
        self.names.append(o.names);
    }

    /// (the events, the names) as Arrow.
    fn columns(self) -> PyResult<(Columns, Columns)> {
        let n = self.time_abs.len();
        let bools = |v: Vec<bool>| Arc::new(BooleanArray::from(v)) as ArrayRef;
        let events = Columns::new(vec![
            ("time_abs", ints(self.time_abs)), ("seq", ints(self.seq)), ("cpu", values_of::<Int32Type>(self.cpu)),
            ("action", values_of::<UInt32Type>(self.action)), ("device", values_of::<UInt32Type>(self.device)),
            ("sector", ints(self.sector)), ("bytes", ints(self.bytes)), ("pid", ints(self.pid)),
            ("error", values_of::<Int16Type>(self.error)), ("pdu_dev", values_of::<UInt32Type>(self.pdu_dev)),
            ("pdu_sector", ints(self.pdu_sector)), ("pdu_int", ints(self.pdu_int)),
            ("has_remap", bools(self.has_remap)), ("has_int", bools(self.has_int)),
            ("file", values_of::<Int16Type>(vec![0; n])), ("position", ints(self.position)),
            ("action_hi", values_of::<UInt32Type>(self.action_hi)), ("letter", values_of::<UInt8Type>(self.letter)),
            ("write", bools(self.write))])?;
        Ok((events, self.names.columns()?))
    }
}

/// One part of a block: its events, the lines left to Python, its newlines.
#[derive(Default)]
struct Part {
    rows: Rows,
    other_line: Vec<i64>,
    other_start: Vec<i64>,
    other_end: Vec<i64>,
    newlines: i64,
}

/// Bytes of text a line takes at the least, as far as room is made for events: blkparse's
/// default line is about 70 bytes.
const LINE_BYTES: usize = 56;

/// The events of `part`, with room made for those of `room` bytes of lines (the first part
/// makes room for the whole block: the others are appended to it).
fn scan_part(part: &[u8], room: usize) -> Part {
    let mut out = Part::default();
    out.rows.reserve(room / LINE_BYTES + 16);
    out.newlines = for_each_line(part, |n, start, line| {
        let s = strip_eol(line);
        if s.iter().all(|b| blank(*b)) {
            return; // blank: neither an event nor a bad line
        }
        match parse(s) {
            Some(e) => out.rows.push(&e, n),
            None => {
                out.other_line.push(n);
                out.other_start.push(start as i64);
                out.other_end.push((start + line.len()) as i64);
            }
        }
    });
    out
}

/// The parts joined, line numbers counted from `first_line`, offsets from the block's start.
fn joined(parts: Vec<Part>, offsets: Vec<usize>, first_line: i64) -> Part {
    let mut out = Part::default();
    let mut line0 = first_line;
    for (mut p, off) in parts.into_iter().zip(offsets) {
        p.rows.position.iter_mut().for_each(|l| *l += line0);
        p.rows.names.line.iter_mut().for_each(|l| *l += line0);
        out.rows.append(p.rows);
        out.other_line.extend(p.other_line.iter().map(|l| l + line0));
        out.other_start.extend(p.other_start.iter().map(|s| s + off as i64));
        out.other_end.extend(p.other_end.iter().map(|s| s + off as i64));
        line0 += p.newlines;
    }
    out.newlines = line0 - first_line;
    out
}

/// A block scanned: the events taken (block.RAW_EVENTS, `position` the line number, plus
/// `letter` and `write`), the first name of each pid among them (`pid`, `line`, `name`), the
/// block's `newlines` and the lines left to the Python reader (`other`: `line`, `start`,
/// `end`, byte offsets in the block).
#[pyclass(get_all)]
struct BlkparseScan {
    events: Py<Columns>,
    names: Py<Columns>,
    other: Py<Columns>,
    newlines: i64,
}

/// Scans blkparse event lines of `buf` (whole lines, the first numbered `first_line`) on
/// `threads` threads.
#[pyfunction]
fn scan_blkparse<'py>(py: Python<'py>, buf: PyReadonlyArray1<'py, u8>, threads: usize, first_line: i64)
                      -> PyResult<BlkparseScan> {
    let buf = buf.as_slice()?;
    let p = py.allow_threads(|| {
        let first = buf.as_ptr() as usize;
        let (scanned, offsets) =
            scan_parts(buf, threads, |part| scan_part(part, if part.as_ptr() as usize == first { buf.len() } else { part.len() }));
        joined(scanned, offsets, first_line)
    });
    let (events, names) = p.rows.columns()?;
    let other = Columns::new(vec![("line", ints(p.other_line)), ("start", ints(p.other_start)),
                                  ("end", ints(p.other_end))])?;
    Ok(BlkparseScan { events: Py::new(py, events)?, names: Py::new(py, names)?, other: Py::new(py, other)?,
                      newlines: p.newlines })
}

/// Events and names (as `BlkparseScan`'s) of the lines Python decoded.
#[pyclass(get_all)]
struct BlkparseRows {
    events: Py<Columns>,
    names: Py<Columns>,
}

/// The raw events of decoded event lines: a table of `line_no`, `major`, `minor`, `cpu`, `seq`,
/// `sec`, `nsec`, `pid` (int64), `act`, `rwbs` (strings), `sector`, `nsect`, `split_sector`,
/// `from_major`, `from_minor`, `from_sector`, `unplugs` (int64, null when absent) and
/// `bracket` (string, null when absent).
#[pyfunction]
fn blkparse_events(py: Python, lines: Table) -> PyResult<BlkparseRows> {
    let int = |name| lines.i64s(name);
    let opt = |name| lines.i64s_or_null(name);
    let (line_no, major, minor, cpu, seq) = (int("line_no")?, int("major")?, int("minor")?, int("cpu")?, int("seq")?);
    let (sec, nsec, pid) = (int("sec")?, int("nsec")?, int("pid")?);
    let (sector, nsect, split) = (opt("sector")?, opt("nsect")?, opt("split_sector")?);
    let (from_major, from_minor, from_sector, unplugs) =
        (opt("from_major")?, opt("from_minor")?, opt("from_sector")?, opt("unplugs")?);
    let (act, rwbs, bracket) = (lines.bytes("act")?, lines.bytes("rwbs")?, lines.bytes("bracket")?);
    let some = |v: i64| (v != NULL).then_some(v);
    let rows = py.allow_threads(|| {
        let mut rows = Rows::default();
        for i in 0..lines.len() {
            let a = act.get(i).unwrap_or(b"");
            let letter = letter_of(a).ok_or_else(|| format!("unknown action {:?}", String::from_utf8_lossy(a)))?;
            let from = some(from_sector[i]).map(|s| (some(from_major[i]).unwrap_or(0), some(from_minor[i]).unwrap_or(0), s));
            let ev = Event { major: major[i], minor: minor[i], cpu: cpu[i], seq: seq[i], sec: sec[i], nsec: nsec[i],
                             pid: pid[i], letter, rwbs: rwbs.get(i).unwrap_or(b""), sector: some(sector[i]),
                             nsect: some(nsect[i]), split_sector: some(split[i]), from, bracket: bracket.get(i),
                             unplugs: some(unplugs[i]) };
            rows.push(&ev, line_no[i]);
        }
        Ok::<Rows, String>(rows)
    }).map_err(PyValueError::new_err)?;
    let (events, names) = rows.columns()?;
    Ok(BlkparseRows { events: Py::new(py, events)?, names: Py::new(py, names)? })
}

/// blkparse's letters and their action codes (`letter`, `code`), for the tests.
#[pyfunction]
fn blkparse_actions() -> PyResult<Columns> {
    let letters: Vec<&str> = ACTIONS.iter().map(|(a, _)| std::str::from_utf8(a).unwrap()).collect();
    Columns::new(vec![("letter", Arc::new(StringArray::from(letters)) as ArrayRef),
                      ("code", values_of::<UInt32Type>(ACTIONS.iter().map(|(_, c)| *c).collect()))])
}

#[derive(Default)]
struct CpuTally {
    last: Option<i64>,
    lost: i64,
    by_letter: [[i64; 2]; ACTIONS.len()],
}

/// What blkparse itself counts of the event lines, fed events in line order (`feed`: a table
/// of `cpu`, `seq`, `letter`, `write` as the scanner gives them): per CPU, the events by
/// letter and read/write (`counts`) and the events missing from its sequence numbers (`gaps`:
/// every jump of more than one; a step back is a new session, not a loss).
#[pyclass]
#[derive(Default)]
struct BlkparseTally {
    cpus: IntMap<i64, CpuTally>,
}

#[pymethods]
impl BlkparseTally {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn feed(&mut self, py: Python, events: Table) -> PyResult<()> {
        let cpu = events.values::<Int32Type>("cpu")?;
        let seq = events.i64s("seq")?;
        let letter = events.values::<UInt8Type>("letter")?;
        let write = events.arrays("write")?;
        let write: Vec<bool> = write.iter().map(|a| {
            a.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| PyValueError::new_err("column \"write\" is not boolean"))
        }).collect::<PyResult<Vec<_>>>()?.into_iter().flat_map(|a| a.values().iter()).collect();
        if letter.iter().any(|&l| l as usize >= ACTIONS.len()) {
            return Err(PyValueError::new_err("column \"letter\" holds a code beyond blkparse's letters"));
        }
        py.allow_threads(|| {
            for i in 0..cpu.len() {
                let t = self.cpus.entry(cpu[i] as i64).or_default();
                if let Some(last) = t.last {
                    let step = seq[i].wrapping_sub(last);
                    if step > 1 {
                        t.lost += step - 1;
                    }
                }
                t.last = Some(seq[i]);
                t.by_letter[letter[i] as usize][write[i] as usize] += 1;
            }
        });
        Ok(())
    }

    /// `cpu`, `lost`: the CPUs with events missing, in order.
    fn gaps(&self) -> PyResult<Columns> {
        let mut found: Vec<(i64, i64)> = self.cpus.iter().filter(|(_, t)| t.lost > 0)
            .map(|(c, t)| (*c, t.lost)).collect();
        found.sort_unstable();
        Columns::new(vec![("cpu", ints(found.iter().map(|f| f.0).collect())),
                          ("lost", ints(found.iter().map(|f| f.1).collect()))])
    }

    /// `cpu`, `letter`, `write`, `n`: the events counted, by CPU, letter and read/write.
    fn counts(&self) -> PyResult<Columns> {
        let (mut cpu, mut letter, mut write, mut n) = (vec![], vec![], vec![], vec![]);
        let mut cpus: Vec<&i64> = self.cpus.keys().collect();
        cpus.sort_unstable();
        for c in cpus {
            for (k, by_rw) in self.cpus[c].by_letter.iter().enumerate() {
                for (w, &count) in by_rw.iter().enumerate() {
                    if count > 0 {
                        cpu.push(*c);
                        letter.push(std::str::from_utf8(ACTIONS[k].0).unwrap());
                        write.push(w == 1);
                        n.push(count);
                    }
                }
            }
        }
        Columns::new(vec![("cpu", ints(cpu)), ("letter", Arc::new(StringArray::from(letter)) as ArrayRef),
                          ("write", Arc::new(BooleanArray::from(write)) as ArrayRef), ("n", ints(n))])
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan_blkparse, m)?)?;
    m.add_function(wrap_pyfunction!(blkparse_events, m)?)?;
    m.add_function(wrap_pyfunction!(blkparse_actions, m)?)?;
    m.add_class::<BlkparseTally>()?;
    Ok(())
}
