//! sg3_utils programs' verbose output (parsers/_sg3_verbose.py) read without regex, a block's
//! lines on every core. A line is taken only when it is certain what every pattern of the
//! Python reader makes of it: a clean CDB line (`NAME cdb: [hex]`, `Name(N) [hex]`), an `open
//! DEV with flags=0x..` line, a `duration=N ms` line, or a line none of the patterns can match
//! (printable ASCII without any of their words, not a line of hex bytes). Every other line (a
//! line of sense data, bytes requested and got, a malformed CDB, a tab, a CR, non-ASCII or NUL
//! bytes, a number past 32 bits) goes back by position to the Python patterns.
use std::sync::Arc;

use arrow_array::types::Int64Type;
use arrow_array::builder::{BinaryViewBuilder, StringViewBuilder};
use arrow_array::{ArrayRef, LargeBinaryArray, LargeStringArray, StringViewArray};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use memchr::memmem;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use super::{on_parts, part_count, strip_eol, uint};
use crate::arrow::{ints, options_of, values_or_null, Columns, Table};

/// Words only the lines the Python reader reads fields from contain (sense key, raw sense
/// data, duration, bytes requested and got, data direction, a CDB line's `cdb: `).
const WORDS: [&[u8]; 6] = [b"Sense key: ", b"Raw sense data", b"duration=", b"requested ", b"(data-", b"cdb: "];

/// What a taken line is.
enum Line<'a> {
    Plain,
    Cdb(Vec<u8>),
    Open(&'a [u8]),
    Duration(i64),
}

/// `HH( HH)*` then an optional `]` (`bracket`: required) and spaces to the end: the bytes.
fn hex_bytes(s: &[u8], bracket: bool) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        out.push(super::hex_byte(*s.get(i)?, *s.get(i + 1)?)?);
        i += 2;
        if s.get(i) == Some(&b' ') && s.get(i + 1).is_some_and(u8::is_ascii_hexdigit) {
            i += 1;
            continue;
        }
        break;
    }
    let rest = &s[i..];
    let rest = match rest.strip_prefix(b"]") {
        Some(r) => r,
        None if bracket => return None,
        None => rest,
    };
    rest.iter().all(|&b| b == b' ').then_some(out)
}

/// `\s*[A-Z][A-Za-z ]*\(\d+\) \[`: where the bytes begin, if the line starts so (sg_dd's
/// `Read(10) [..]`).
fn named_cdb_start(line: &[u8]) -> Option<usize> {
    let mut i = line.iter().take_while(|&&b| b == b' ').count();
    if !line.get(i)?.is_ascii_uppercase() {
        return None;
    }
    i += 1;
    i += line[i..].iter().take_while(|&&b| b.is_ascii_alphabetic() || b == b' ').count();
    let rest = line[i..].strip_prefix(b"(")?;
    let d = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if d == 0 {
        return None;
    }
    rest[d..].strip_prefix(b") [")?;
    Some(line.len() - rest.len() + d + 3)
}

/// `\s+\S.*? cdb: \[?HH( HH)*\]?\s*$` with one ` cdb: ` only: the bytes. None: not certain.
fn cdb_line(line: &[u8]) -> Option<Vec<u8>> {
    let f = line.iter().take_while(|&&b| b == b' ').count();
    if f == 0 || f == line.len() {
        return None;
    }
    let mut at = memmem::find_iter(&line[f..], b" cdb: ");
    let p = f + at.next()?;
    if at.next().is_some() {
        return None;
    }
    let rest = &line[p + 6..];
    hex_bytes(rest.strip_prefix(b"[").unwrap_or(rest), false)
}

/// `^open (\S+) with flags=0x[0-9a-f]+`: the device.
fn open_line(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"open ")?;
    let n = rest.iter().take_while(|&&b| b != b' ').count();
    let after = rest[n..].strip_prefix(b" with flags=0x")?;
    (n > 0 && after.first().is_some_and(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(&rest[..n])
}

/// `^ *duration=(\d+) ms *$`, the number within 32 bits.
fn duration_line(line: &[u8]) -> Option<i64> {
    let s = &line[line.iter().take_while(|&&b| b == b' ').count()..];
    let s = s.strip_prefix(b"duration=")?;
    let d = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if d == 0 || d > 10 || !s[d..].strip_prefix(b" ms")?.iter().all(|&b| b == b' ') {
        return None;
    }
    uint(&s[..d]).filter(|&v| v <= u64::from(u32::MAX)).map(|v| v as i64)
}

/// A line of hex bytes and spaces only (Raw sense data's): the Python pattern decides.
fn hex_like(line: &[u8]) -> bool {
    line.iter().any(|&b| b != b' ') && line.iter().all(|&b| b == b' ' || matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What the Python reader makes of `line`, when that is certain.
fn read(line: &[u8]) -> Option<Line<'_>> {
    if !line.iter().all(|&b| (0x20..0x7F).contains(&b)) || hex_like(line) {
        return None;
    }
    if let Some(at) = named_cdb_start(line) {
        if memmem::find(line, b"cdb: ").is_some() {
            return None;
        }
        return hex_bytes(&line[at..], true).map(Line::Cdb);
    }
    let words = WORDS.iter().filter(|w| memmem::find(line, w).is_some()).count();
    if words == 0 {
        return Some(match open_line(line) {
            Some(dev) => Line::Open(dev),
            None => Line::Plain,
        });
    }
    if words > 1 || line.starts_with(b"open ") {
        return None;
    }
    if let Some(ms) = duration_line(line) {
        return Some(Line::Duration(ms));
    }
    cdb_line(line).map(Line::Cdb)
}

/// Optional byte strings one after another (Arrow's layout: the bytes, where each ends,
/// whether each is there).
#[derive(Default)]
struct Packed {
    data: Vec<u8>,
    ends: Vec<i64>,
    valid: Vec<bool>,
}

impl Packed {
    fn push(&mut self, s: Option<&[u8]>) {
        self.data.extend_from_slice(s.unwrap_or_default());
        self.ends.push(self.data.len() as i64);
        self.valid.push(s.is_some());
    }
    fn append(&mut self, o: Packed) {
        let base = self.data.len() as i64;
        self.data.extend(o.data);
        self.ends.extend(o.ends.into_iter().map(|e| e + base));
        self.valid.extend(o.valid);
    }
    fn parts(self) -> (OffsetBuffer<i64>, Buffer, Option<NullBuffer>) {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(std::iter::once(0).chain(self.ends).collect::<Vec<i64>>()));
        let nulls = NullBuffer::from(self.valid);
        (offsets, Buffer::from_vec(self.data), (nulls.null_count() > 0).then_some(nulls))
    }
    fn binary(self) -> PyResult<ArrayRef> {
        let (offsets, data, nulls) = self.parts();
        Ok(Arc::new(LargeBinaryArray::try_new(offsets, data, nulls).map_err(arrow_err)?))
    }
    /// The strings (checked to be UTF-8 here: the lines taken are ASCII).
    fn strings(self) -> PyResult<ArrayRef> {
        let (offsets, data, nulls) = self.parts();
        Ok(Arc::new(LargeStringArray::try_new(offsets, data, nulls).map_err(arrow_err)?))
    }
}

fn arrow_err(e: arrow_schema::ArrowError) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("sg3_block: {e}"))
}

#[derive(Default)]
struct Part {
    line: Vec<i64>,
    cdb: Packed,
    dev: Packed,
    ms: Vec<i64>,
    ms_ok: Vec<bool>,
    other_line: Vec<i64>,
    other_start: Vec<i64>,
    other_end: Vec<i64>,
}

fn scan_part(part: &[u8], first: usize, offset: usize) -> Part {
    let mut p = Part::default();
    for (k, (start, line)) in super::lines_at(part).enumerate() {
        let idx = (first + k) as i64;
        let ends_inside = start + line.len() == part.len() && part.last().is_some_and(|&b| b != b'\n');
        match read(line).filter(|_| !ends_inside) {
            Some(l) => {
                p.line.push(idx);
                let (cdb, dev, ms) = match l {
                    Line::Plain => (None, None, None),
                    Line::Cdb(b) => (Some(b), None, None),
                    Line::Open(d) => (None, Some(d), None),
                    Line::Duration(ms) => (None, None, Some(ms)),
                };
                p.cdb.push(cdb.as_deref());
                p.dev.push(dev);
                p.ms.push(ms.unwrap_or(0));
                p.ms_ok.push(ms.is_some());
            }
            None => {
                p.other_line.push(idx);
                p.other_start.push((offset + start) as i64);
                p.other_end.push((offset + start + line.len()) as i64);
            }
        }
    }
    p
}

/// What `sg3_block` read of a block: the lines taken (`lines`: `line`, its index in the
/// block; `cdb` the CDB of a CDB line, `dev` the device an open line names, `duration_ms`,
/// each null where the line has none) and the others (`other`: `line`, `start`, `end`, byte
/// offsets in the block) for the Python patterns.
#[pyclass(get_all)]
struct Sg3Scan {
    lines: Py<Columns>,
    other: Py<Columns>,
}

/// The sg3_utils output lines of a block of whole lines (its last line may lack its '\n').
/// `parts`: how many parts to cut the block in (the tests; default: one a core).
#[pyfunction]
#[pyo3(signature = (buf, parts=None))]
fn sg3_block(py: Python, buf: PyReadonlyArray1<u8>, parts: Option<usize>) -> PyResult<Sg3Scan> {
    let data = buf.as_slice()?;
    let n = parts.unwrap_or_else(|| part_count(data.len()));
    let all = py.allow_threads(|| {
        // a part is a slice of the block: its offset is where it starts in it
        on_parts(data, n, |part, first| scan_part(part, first, part.as_ptr() as usize - data.as_ptr() as usize))
    });
    let mut m = Part::default();
    for p in all {
        m.line.extend(p.line);
        m.cdb.append(p.cdb);
        m.dev.append(p.dev);
        m.ms.extend(p.ms);
        m.ms_ok.extend(p.ms_ok);
        m.other_line.extend(p.other_line);
        m.other_start.extend(p.other_start);
        m.other_end.extend(p.other_end);
    }
    Ok(Sg3Scan {
        lines: Py::new(py, Columns::new(vec![
            ("line", ints(m.line)), ("cdb", m.cdb.binary()?), ("dev", m.dev.strings()?),
            ("duration_ms", values_or_null::<Int64Type>(m.ms, m.ms_ok))])?)?,
        other: Py::new(py, Columns::new(vec![("line", ints(m.other_line)), ("start", ints(m.other_start)),
                                             ("end", ints(m.other_end))])?)?,
    })
}

// ---- The whole reader in one pass: each line's fields, then the commands they make ----
//
// `Sg3Reader.block` reads every line of an ASCII block (no NUL) as `_sg3_verbose.fields`'
// patterns do (polars runs them with the regex crate: on ASCII text `\s` is `is_space`, `\d`
// an ASCII digit, `.` any byte but '\n'), then folds the lines into commands as
// `_sg3_verbose.commands` does: each part of the block on its own core, the parts joined in
// order. A block with another byte goes to the patterns (`Sg3Reader.fields` folds their rows).

const BROKEN: &str = "a duration or byte count beyond 32 bits";
const MALFORMED: &str = "malformed sg3_utils cdb line (expected NAME cdb: [hex bytes])";

/// What one line holds (`_sg3_verbose.FIELDS`), its strings as slices of the line.
#[derive(Default)]
struct Fields<'a> {
    broken: bool,
    /// why a broken line is (None: a number past 32 bits)
    why: Option<Box<[u8]>>,
    hint: bool,
    cdb: Option<Cdb>,
    dev: Option<&'a [u8]>,
    raw_header: bool,
    /// the hex digits of a line of sense bytes (its white space left out)
    sense: Option<Vec<u8>>,
    sense_key: Option<&'a [u8]>,
    duration_ms: Option<i64>,
    requested: Option<i64>,
    got: Option<i64>,
    dir: Option<&'static [u8]>,
}

impl Fields<'_> {
    fn is_plain(&self) -> bool {
        !self.broken && !self.hint && self.cdb.is_none() && self.dev.is_none() && !self.raw_header
            && self.sense.is_none() && self.sense_key.is_none() && self.duration_ms.is_none()
            && self.requested.is_none() && self.got.is_none() && self.dir.is_none()
    }
}

/// A CDB's bytes (most fit 16 inline).
#[derive(Clone)]
enum Cdb {
    Short([u8; 16], u8),
    Long(Vec<u8>),
}

impl Cdb {
    fn of(bytes: impl Iterator<Item = u8>) -> Cdb {
        let mut short = [0u8; 16];
        let mut n = 0usize;
        let mut long = Vec::new();
        for b in bytes {
            if n < 16 {
                short[n] = b;
            } else {
                if long.is_empty() {
                    long.extend_from_slice(&short);
                }
                long.push(b);
            }
            n += 1;
        }
        if n <= 16 { Cdb::Short(short, n as u8) } else { Cdb::Long(long) }
    }
    fn bytes(&self) -> &[u8] {
        match self {
            Cdb::Short(b, n) => &b[..*n as usize],
            Cdb::Long(v) => v,
        }
    }
}

fn spaces_at(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| super::is_space(b)).count()
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

/// `[0-9a-fA-F]{2}(?: [0-9a-fA-F]{2})*` at the start of `s`: its length (0: none).
fn hex_run(s: &[u8]) -> usize {
    if !(s.len() >= 2 && is_hex(s[0]) && is_hex(s[1])) {
        return 0;
    }
    let mut i = 2;
    while s.len() >= i + 3 && s[i] == b' ' && is_hex(s[i + 1]) && is_hex(s[i + 2]) {
        i += 3;
    }
    i
}

/// The bytes of a run of hex pairs (`hex_run`).
fn run_bytes(run: &[u8]) -> Cdb {
    Cdb::of(run.chunks(3).map(|p| super::hex_byte(p[0], p[1]).unwrap_or(0)))
}

/// `\[?HEX(?: HEX)*\]?\s*$` on all of `s` (CDB's first form, after ` cdb: `): the bytes.
fn cdb_tail(s: &[u8]) -> Option<Cdb> {
    let s = s.strip_prefix(b"[").unwrap_or(s);
    let n = hex_run(s);
    if n == 0 {
        return None;
    }
    let rest = &s[n..];
    let rest = rest.strip_prefix(b"]").unwrap_or(rest);
    rest.iter().all(|&b| super::is_space(b)).then(|| run_bytes(&s[..n]))
}

/// `\s*[A-Z][A-Za-z ]*\(\d+\) \[` at the start of `t`: where its bytes begin.
fn named_start(t: &[u8]) -> Option<usize> {
    let mut i = spaces_at(t);
    if !t.get(i)?.is_ascii_uppercase() {
        return None;
    }
    i += 1;
    i += t[i..].iter().take_while(|&&b| b.is_ascii_alphabetic() || b == b' ').count();
    let rest = t[i..].strip_prefix(b"(")?;
    let d = super::digits(rest);
    if d == 0 {
        return None;
    }
    rest[d..].strip_prefix(b") [")?;
    Some(i + 1 + d + 3)
}

/// CDB_HINT and CDB (`_sg3_verbose.py`) on `t`: (hint, the CDB's bytes).
fn cdb_of(t: &[u8]) -> (bool, Option<Cdb>) {
    let f = spaces_at(t);
    let mut hint = false;
    if f >= 1 && f < t.len() {
        for p in memmem::find_iter(&t[f + 1..], b" cdb: ") {
            hint = true;
            if let Some(c) = cdb_tail(&t[f + 1 + p + 6..]) {
                return (true, Some(c));
            }
        }
    }
    let Some(at) = named_start(t) else { return (hint, None) };
    let s = &t[at..];
    let n = hex_run(s);
    let ok = n > 0 && s[n..].strip_prefix(b"]").is_some_and(|r| r.iter().all(|&b| super::is_space(b)));
    (true, ok.then(|| run_bytes(&s[..n])))
}

/// `^open (\S+) with flags=0x[0-9a-f]+`: the device.
fn open_of(t: &[u8]) -> Option<&[u8]> {
    let rest = t.strip_prefix(b"open ")?;
    let n = rest.iter().take_while(|&&b| !super::is_space(b)).count();
    let after = rest[n..].strip_prefix(b" with flags=0x")?;
    (n > 0 && after.first().is_some_and(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(&rest[..n])
}

/// `^\s+((?:[0-9a-f]{2}\s+){3,}[0-9a-f]{2})\s*$`: the hex digits, white space left out.
fn sense_line(t: &[u8]) -> Option<Vec<u8>> {
    let f = spaces_at(t);
    if f == 0 {
        return None;
    }
    let lower = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
    let mut out = Vec::new();
    for token in t[f..].split(|&b| super::is_space(b)).filter(|w| !w.is_empty()) {
        if token.len() != 2 || !lower(token[0]) || !lower(token[1]) {
            return None;
        }
        out.extend_from_slice(token);
    }
    (out.len() >= 8).then_some(out)
}

/// The number of `\d+` at the start of `s` followed by `after`: (digits, within 32 bits).
fn number_then<'a>(s: &'a [u8], after: &[u8]) -> Option<(&'a [u8], usize)> {
    let d = super::digits(s);
    (d > 0 && s[d..].starts_with(after)).then(|| (&s[..d], d + after.len()))
}

/// A `\d+` read as polars' checked cast does: Some(value) within 32 bits, None beyond (broken).
fn u32_of(d: &[u8]) -> Option<i64> {
    uint(d).filter(|&v| v <= u64::from(u32::MAX)).map(|v| v as i64)
}

/// The first `WORD(\d+)AFTER` of `t` (`str.extract`: the leftmost match).
fn word_number<'a>(t: &'a [u8], word: &[u8], after: &[u8]) -> Option<&'a [u8]> {
    memmem::find_iter(t, word).find_map(|p| number_then(&t[p + word.len()..], after).map(|(d, _)| d))
}

/// `requested \d+ bytes .*?but got (\d+) bytes`: the bytes got.
fn got_of(t: &[u8]) -> Option<&[u8]> {
    memmem::find_iter(t, b"requested ").find_map(|p| {
        let (_, n) = number_then(&t[p + 10..], b" bytes ")?;
        let from = p + 10 + n;
        memmem::find_iter(&t[from..], b"but got ").find_map(|q| number_then(&t[from + q + 8..], b" bytes").map(|(d, _)| d))
    })
}

/// `Sense key: ([A-Za-z ]+?)\s*$`: the sense key's name.
fn sense_key_of(t: &[u8]) -> Option<&[u8]> {
    memmem::find_iter(t, b"Sense key: ").find_map(|p| {
        let rest = &t[p + 11..];
        let run = rest.iter().take_while(|&&b| b.is_ascii_alphabetic() || b == b' ').count();
        if run == 0 || !rest[run..].iter().all(|&b| super::is_space(b)) {
            return None;
        }
        let trimmed = rest[..run].iter().rposition(|&b| b != b' ').map_or(0, |k| k + 1);
        Some(&rest[..trimmed.max(1)])
    })
}

/// `\(data-(in|out)\)`: the direction.
fn dir_of(t: &[u8]) -> Option<&'static [u8]> {
    memmem::find_iter(t, b"(data-").find_map(|p| {
        let rest = &t[p + 6..];
        if rest.starts_with(b"in)") {
            Some(&b"in"[..])
        } else if rest.starts_with(b"out)") {
            Some(&b"out"[..])
        } else {
            None
        }
    })
}

/// Bytes that any pattern's match needs (a line without them is read no further for it).
const COLON: u8 = 1;
const EQUALS: u8 = 2;
const Q: u8 = 4;
const PAREN: u8 = 8;
const R: u8 = 16;

static CLASS: [u8; 256] = {
    let mut c = [0u8; 256];
    c[b':' as usize] = COLON;
    c[b'=' as usize] = EQUALS;
    c[b'q' as usize] = Q;
    c[b'(' as usize] = PAREN;
    c[b'R' as usize] = R;
    c
};

/// `_sg3_verbose.fields` of one ASCII line (its '\r's at the end taken off).
fn fields_of(t: &[u8]) -> Fields<'_> {
    let mut f = Fields::default();
    let mask = t.iter().fold(0u8, |m, &b| m | CLASS[b as usize]);
    if mask & (COLON | PAREN) != 0 {
        let (hint, cdb) = cdb_of(t);
        f.hint = hint;
        f.cdb = cdb;
    }
    if mask & COLON != 0 {
        f.sense_key = sense_key_of(t);
    }
    if mask & EQUALS != 0 {
        f.dev = open_of(t);
        if let Some(d) = word_number(t, b"duration=", b" ms") {
            f.duration_ms = u32_of(d);
            f.broken |= f.duration_ms.is_none();
        }
    }
    if mask & Q != 0 {
        if let Some(d) = word_number(t, b"requested ", b" bytes") {
            f.requested = u32_of(d);
            f.broken |= f.requested.is_none();
        }
        if let Some(d) = got_of(t) {
            f.got = u32_of(d);
            f.broken |= f.got.is_none();
        }
    }
    if mask & PAREN != 0 {
        f.dir = dir_of(t);
    }
    if mask & R != 0 {
        let s = spaces_at(t);
        f.raw_header = s > 0 && t[s..].starts_with(b"Raw sense data (in hex)");
    }
    if t.first().is_some_and(|&b| super::is_space(b)) {
        f.sense = sense_line(t);
    }
    f
}

/// The note fields a command takes from its lines: each field's first value.
#[derive(Default, Clone)]
struct Notes {
    sense_key: Option<Box<[u8]>>,
    duration_ms: Option<i64>,
    requested: Option<i64>,
    got: Option<i64>,
    dir: Option<&'static [u8]>,
    sense: Option<Box<[u8]>>,
}

impl Notes {
    /// The fields still empty taken from `o` (later lines).
    fn fill(&mut self, o: Notes) {
        self.sense_key = self.sense_key.take().or(o.sense_key);
        self.duration_ms = self.duration_ms.or(o.duration_ms);
        self.requested = self.requested.or(o.requested);
        self.got = self.got.or(o.got);
        self.dir = self.dir.or(o.dir);
        self.sense = self.sense.take().or(o.sense);
    }
    fn of_line(f: &Fields, sense: Option<Vec<u8>>) -> Notes {
        Notes { sense_key: f.sense_key.map(Box::from), duration_ms: f.duration_ms, requested: f.requested,
                got: f.got, dir: f.dir, sense: sense.map(Vec::into_boxed_slice) }
    }
    fn is_empty(&self) -> bool {
        self.sense_key.is_none() && self.duration_ms.is_none() && self.requested.is_none() && self.got.is_none()
            && self.dir.is_none() && self.sense.is_none()
    }
}

/// One command (the last of a block, held until its notes end).
struct Command {
    line: i64,
    cdb: Vec<u8>,
    dev: Option<Arc<[u8]>>,
    notes: Notes,
}

/// Commands column by column (a part's, a block's); the last row's notes still fill.
#[derive(Default)]
struct Out {
    line: Vec<i64>,
    cdb: Vec<u8>,
    cdb_end: Vec<usize>,
    dev: Vec<Option<Arc<[u8]>>>,
    ms: Vec<Option<i64>>,
    requested: Vec<Option<i64>>,
    got: Vec<Option<i64>>,
    dir: Vec<Option<&'static [u8]>>,
    /// the rare notes (sense key text, sense bytes), by row
    rare: Vec<(usize, Box<[u8]>, bool)>,
}

impl Out {
    fn len(&self) -> usize {
        self.line.len()
    }
    fn push(&mut self, line: i64, cdb: &[u8], dev: Option<Arc<[u8]>>) {
        self.line.push(line);
        self.cdb.extend_from_slice(cdb);
        self.cdb_end.push(self.cdb.len());
        self.dev.push(dev);
        self.ms.push(None);
        self.requested.push(None);
        self.got.push(None);
        self.dir.push(None);
    }
    fn has_rare(&self, row: usize, sense: bool) -> bool {
        self.rare.iter().rev().take_while(|r| r.0 == row).any(|r| r.2 == sense)
    }
    /// The last row's empty notes taken from `n`.
    fn fill_last(&mut self, n: Notes) {
        let k = self.len() - 1;
        fill(&mut self.ms[k], n.duration_ms);
        fill(&mut self.requested[k], n.requested);
        fill(&mut self.got[k], n.got);
        if self.dir[k].is_none() {
            self.dir[k] = n.dir;
        }
        for (v, sense) in [(n.sense_key, false), (n.sense, true)] {
            if let Some(v) = v {
                if !self.has_rare(k, sense) {
                    self.rare.push((k, v, sense));
                }
            }
        }
    }
    fn push_command(&mut self, c: Command) {
        self.push(c.line, &c.cdb, c.dev);
        self.fill_last(c.notes);
    }
    /// The last row taken out.
    fn pop(&mut self) -> Option<Command> {
        let line = self.line.pop()?;
        let end = self.cdb_end.pop().unwrap_or(0);
        let start = self.cdb_end.last().copied().unwrap_or(0);
        let cdb = self.cdb[start..end].to_vec();
        self.cdb.truncate(start);
        let k = self.line.len();
        let mut notes = Notes { duration_ms: self.ms.pop().flatten(), requested: self.requested.pop().flatten(),
                                got: self.got.pop().flatten(), dir: self.dir.pop().flatten(), ..Notes::default() };
        while self.rare.last().is_some_and(|r| r.0 == k) {
            let (_, v, sense) = self.rare.pop().unwrap_or_default();
            if sense { notes.sense = Some(v) } else { notes.sense_key = Some(v) }
        }
        Some(Command { line, cdb, dev: self.dev.pop().flatten(), notes })
    }
    fn append(&mut self, o: Out) {
        let (rows, bytes) = (self.len(), self.cdb.len());
        self.line.extend(o.line);
        self.cdb.extend(o.cdb);
        self.cdb_end.extend(o.cdb_end.into_iter().map(|e| e + bytes));
        self.dev.extend(o.dev);
        self.ms.extend(o.ms);
        self.requested.extend(o.requested);
        self.got.extend(o.got);
        self.dir.extend(o.dir);
        self.rare.extend(o.rare.into_iter().map(|(k, v, s)| (k + rows, v, s)));
    }
}

fn fill(to: &mut Option<i64>, v: Option<i64>) {
    if to.is_none() {
        *to = v;
    }
}

struct Bad {
    line: i64,
    text: Box<[u8]>,
    /// why (a broken line's own reason, where the patterns gave one)
    why: Option<Box<[u8]>>,
    broken: bool,
}

/// One part's lines folded, without what came before it.
#[derive(Default)]
struct Folded {
    first_line: i64,
    lines: i64,
    /// notes before the part's first command (the command open when the part began takes them)
    lead: Notes,
    commands: Out,
    /// the rows before the part's first open (their device is the one opened before the part)
    unopened: usize,
    /// the part's last open
    opened: Option<Arc<[u8]>>,
    /// the first line's sense bytes (raw sense data whose header ended the part before), and
    /// whether that line is a command's
    head_sense: Option<Vec<u8>>,
    head_is_cdb: bool,
    /// the last raw sense header line (not broken)
    header: Option<i64>,
    last_cdb: Option<i64>,
    bad: Vec<Bad>,
    other: i64,
}

fn fold_part(part: &[u8], first: i64) -> Folded {
    let mut o = Folded { first_line: first, ..Folded::default() };
    for (k, line) in super::lines(part).enumerate() {
        o.lines += 1;
        let t = strip_eol(line);
        let f = fields_of(t);
        if f.is_plain() {
            o.other += 1;
            continue;
        }
        fold_line(&mut o, first + k as i64, t, f);
    }
    o
}

/// One line of a part into its fold.
fn fold_line(o: &mut Folded, idx: i64, t: &[u8], mut f: Fields) {
    if f.cdb.is_some() {
        o.last_cdb = Some(idx);
    }
    if f.broken {
        o.bad.push(Bad { line: idx, text: t.into(), why: f.why.take(), broken: true });
        return;
    }
    let head = idx == o.first_line;
    let sense = if head {
        o.head_sense = f.sense.take();
        None
    } else if o.header == Some(idx - 1) {
        f.sense.take()
    } else {
        None
    };
    if f.raw_header {
        o.header = Some(idx);
    }
    if let Some(d) = f.dev {
        if o.opened.is_none() {
            o.unopened = o.commands.len();
        }
        o.opened = Some(Arc::from(d));
    }
    match f.cdb.take() {
        Some(cdb) => {
            o.commands.push(idx, cdb.bytes(), o.opened.clone());
            o.head_is_cdb |= head;
        }
        None if f.hint => o.bad.push(Bad { line: idx, text: t.into(), why: None, broken: false }),
        None => o.other += 1,
    }
    let notes = Notes::of_line(&f, sense);
    if notes.is_empty() {
        return;
    }
    if o.commands.len() > 0 {
        o.commands.fill_last(notes);
    } else {
        o.lead.fill(notes);
    }
}

/// Folded lines of the rows `_sg3_verbose.fields` made (a block the scan declines).
fn fold_rows(t: &Table) -> PyResult<Folded> {
    let n = t.len();
    let line = t.i64s("line_no")?;
    let text = t.bytes("t")?;
    let why = t.bytes("why")?;
    let cdb = t.bytes("cdb")?;
    let dev = t.bytes("dev")?;
    let sense_hex = t.bytes("sense_hex")?;
    let sense_key = t.bytes("sense_key")?;
    let dir = t.bytes("dir")?;
    let flag = |name: &str| -> PyResult<Vec<bool>> {
        Ok(t.values_or_zero::<Int64Type>(name)?.iter().map(|&v| v != 0).collect())
    };
    let (hint, raw) = (flag("hint")?, flag("raw_header")?);
    let num = |name: &str| -> PyResult<Vec<Option<i64>>> {
        let v = t.values_or_zero::<Int64Type>(name)?;
        let ok = t.valid(name)?;
        Ok(v.iter().enumerate().map(|(k, &x)| ok.as_ref().map_or(true, |o| o[k]).then_some(x)).collect())
    };
    let (ms, req, got) = (num("duration_ms")?, num("requested")?, num("got")?);
    let first = line.first().copied().unwrap_or(0);
    let mut o = Folded { first_line: first, ..Folded::default() };
    for k in 0..n {
        o.lines += 1;
        let f = Fields {
            broken: why.get(k).is_some(), why: why.get(k).map(Box::from), hint: hint[k], cdb: cdb.get(k).map(|b| Cdb::of(b.iter().copied())),
            dev: dev.get(k), raw_header: raw[k], sense: sense_hex.get(k).map(<[u8]>::to_vec),
            sense_key: sense_key.get(k), duration_ms: ms[k], requested: req[k], got: got[k],
            dir: dir.get(k).and_then(|d| match d { b"in" => Some(&b"in"[..]), b"out" => Some(&b"out"[..]), _ => None }),
        };
        if f.is_plain() {
            o.other += 1;
            continue;
        }
        fold_line(&mut o, line[k], text.get(k).unwrap_or_default(), f);
    }
    Ok(o)
}

/// sg3_utils output read block by block: what spans blocks (and parts) is kept here.
#[pyclass]
struct Sg3Reader {
    line: i64,
    held: Option<Command>,
    dev: Option<Arc<[u8]>>,
    header: Option<i64>,
    last_cdb: Option<i64>,
    waiting: Vec<Bad>,
    /// the names of the 16 sense keys, and of CHECK CONDITION (`scsitrace.scsi`)
    key_names: Vec<String>,
    check: String,
}

/// What one block gave (`Sg3Reader`): its `lines`; the `commands` complete now (the columns
/// of `parsers/_sgio_struct.py:COMMANDS`, times from nothing); the `bad` lines to report now
/// (`line_no`, `t`, `why`, `broken`: a number past 32 bits, else a malformed CDB line), those
/// from the last CDB line on waiting as the line reader kept them; `other`: the lines that are
/// the programs' own output.
#[pyclass(get_all)]
struct Sg3Block {
    lines: i64,
    commands: Py<Columns>,
    bad: Py<Columns>,
    other: i64,
}

impl Sg3Reader {
    /// A part's fold after what came before: its commands complete now go to `out`.
    fn join(&mut self, mut p: Folded, out: &mut Out) {
        if self.header.is_some_and(|h| h == p.first_line - 1) {
            if let Some(s) = p.head_sense.take() {
                let s = Some(s.into_boxed_slice());
                if p.head_is_cdb {
                    // the part's first command's own line: its first sense bytes
                    p.commands.rare.retain(|r| !(r.0 == 0 && r.2));
                    p.commands.rare.insert(0, (0, s.unwrap_or_default(), true));
                } else {
                    p.lead.sense = s;
                }
            }
        }
        if let Some(h) = &mut self.held {
            h.notes.fill(std::mem::take(&mut p.lead));
        }
        let unopened = if p.opened.is_some() { p.unopened } else { p.commands.len() };
        for d in &mut p.commands.dev[..unopened] {
            *d = self.dev.clone();
        }
        if let Some(last) = p.commands.pop() {
            out.extend_held(self.held.take());
            out.append(p.commands);
            self.held = Some(last);
        }
        if p.opened.is_some() {
            self.dev = p.opened;
        }
        self.header = p.header.or(self.header.filter(|&h| h == p.first_line - 1 && p.lines == 0));
        self.last_cdb = p.last_cdb.or(self.last_cdb);
        self.waiting.extend(p.bad);
        self.line = p.first_line + p.lines;
    }

    fn result(&mut self, py: Python, lines: i64, other: i64, cmds: Out, all: bool) -> PyResult<Sg3Block> {
        let cut = if all { None } else { self.last_cdb };
        let keep = cut.map_or(0, |c| self.waiting.len() - self.waiting.partition_point(|b| b.line < c));
        let now: Vec<Bad> = self.waiting.drain(..self.waiting.len() - keep).collect();
        let commands = self.columns(cmds)?;
        Ok(Sg3Block { lines, commands: Py::new(py, commands)?, bad: Py::new(py, bad_columns(now)?)?, other })
    }

    /// The commands as `_sg3_verbose.finished` makes them.
    fn columns(&self, c: Out) -> PyResult<Columns> {
        let n = c.len();
        let mut sense_text: Vec<Option<&[u8]>> = vec![None; n];
        let mut sense: Vec<Option<&[u8]>> = vec![None; n];
        for (k, v, is_sense) in &c.rare {
            if *is_sense { sense[*k] = Some(v) } else { sense_text[*k] = Some(v) }
        }
        let mut device = StringViewBuilder::with_capacity(n);
        let mut cdb = BinaryViewBuilder::with_capacity(n);
        let mut status = StringViewBuilder::with_capacity(n);
        let mut key = StringViewBuilder::with_capacity(n);
        let mut direction = StringViewBuilder::with_capacity(n);
        let (mut asc, mut ascq) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut start = 0;
        for k in 0..n {
            let dev = c.dev[k].as_deref().unwrap_or(b"?");
            device.append_value(std::str::from_utf8(dev).unwrap_or("?"));
            cdb.append_value(&c.cdb[start..c.cdb_end[k]]);
            start = c.cdb_end[k];
            status.append_option((sense_text[k].is_some() || sense[k].is_some()).then_some(self.check.as_str()));
            let s = sense[k];
            let byte = |i: usize| s.and_then(|s| s.get(2 * i..2 * i + 2)).and_then(|p| super::hex_byte(p[0], p[1]));
            let fixed = s.is_some_and(|s| matches!(s.get(..2), Some(b"70" | b"71" | b"f0" | b"f1")));
            let (kb, ab, qb) = if fixed { (2, 12, 13) } else { (1, 2, 3) };
            let name = byte(kb).map(|b| self.key_names[usize::from(b & 0x0F)].as_str())
                .or_else(|| sense_text[k].and_then(|t| std::str::from_utf8(t).ok()));
            key.append_option(name);
            asc.push(byte(ab).map(i64::from));
            ascq.push(byte(qb).map(i64::from));
            direction.append_option(c.dir[k].and_then(|d| std::str::from_utf8(d).ok()));
        }
        let none = || options_of::<Int64Type>(std::iter::repeat(None).take(n));
        let ns = || options_of::<Int64Type>(c.ms.iter().map(|m| m.map(|ms| ms * 1_000_000)));
        let text_none = || Arc::new(StringViewArray::new_null(n)) as ArrayRef;
        Columns::new(vec![
            ("device", Arc::new(device.finish()) as ArrayRef), ("tag", none()), ("cdb", Arc::new(cdb.finish())),
            ("pos", ints(c.line)), ("start_ns", none()), ("end_ns", none()),
            ("status", Arc::new(status.finish())), ("host_byte", text_none()), ("reason", text_none()),
            ("response_ns", ns()), ("bytes", options_of::<Int64Type>(c.requested)),
            ("data_bytes", options_of::<Int64Type>(c.got)), ("direction", Arc::new(direction.finish())),
            ("sense_key", Arc::new(key.finish())), ("asc", options_of::<Int64Type>(asc)),
            ("ascq", options_of::<Int64Type>(ascq)), ("syscall_ns", none()), ("driver_ns", ns()), ("pid", none()),
        ])
    }
}

impl Out {
    fn extend_held(&mut self, held: Option<Command>) {
        if let Some(c) = held {
            self.push_command(c);
        }
    }
}

#[pymethods]
impl Sg3Reader {
    /// A reader whose first block starts at line `first_line`; `key_names`: the 16 sense
    /// keys' names, `check`: CHECK CONDITION's (the status of a command with sense data).
    #[new]
    fn new(first_line: i64, key_names: Vec<String>, check: String) -> PyResult<Self> {
        if key_names.len() != 16 {
            return Err(pyo3::exceptions::PyValueError::new_err("Sg3Reader: 16 sense key names expected"));
        }
        Ok(Sg3Reader { line: first_line, held: None, dev: None, header: None, last_cdb: None, waiting: Vec::new(),
                       key_names, check })
    }

    /// The next block of whole lines (its last may lack its '\n'); None: it has a NUL or a
    /// byte that is not ASCII (`fields` then takes its rows). `parts`: how many parts (tests).
    #[pyo3(signature = (buf, parts=None))]
    fn block(&mut self, py: Python, buf: PyReadonlyArray1<u8>, parts: Option<usize>) -> PyResult<Option<Sg3Block>> {
        let data = buf.as_slice()?;
        let n = parts.unwrap_or_else(|| part_count(data.len()));
        let first = self.line;
        let done = py.allow_threads(|| {
            if !data.is_ascii() || memchr::memchr(0, data).is_some() {
                return None;
            }
            let folded = on_parts(data, n, |part, k| fold_part(part, first + k as i64));
            let (lines, other) = folded.iter().fold((0, 0), |(l, o), p| (l + p.lines, o + p.other));
            let mut out = Out::default();
            for p in folded {
                self.join(p, &mut out);
            }
            Some((lines, other, out))
        });
        let Some((lines, other, out)) = done else { return Ok(None) };
        self.result(py, lines, other, out, false).map(Some)
    }

    /// The rows `_sg3_verbose.fields` made of a block this reader declined, in line order
    /// (`hint` and `raw_header` as integers).
    fn fields(&mut self, py: Python, rows: Table) -> PyResult<Sg3Block> {
        let p = fold_rows(&rows)?;
        let (lines, other) = (p.lines, p.other);
        let mut out = Out::default();
        self.join(p, &mut out);
        self.result(py, lines, other, out, false)
    }

    /// The end of the log: the last command and every bad line still waiting.
    fn finish(&mut self, py: Python) -> PyResult<Sg3Block> {
        let mut out = Out::default();
        out.extend_held(self.held.take());
        self.result(py, 0, 0, out, true)
    }
}

fn bad_columns(bad: Vec<Bad>) -> PyResult<Columns> {
    let (mut t, mut why) = (Packed::default(), Packed::default());
    for b in &bad {
        t.push(Some(&b.text));
        why.push(Some(b.why.as_deref().unwrap_or(if b.broken { BROKEN } else { MALFORMED }.as_bytes())));
    }
    Columns::new(vec![
        ("line_no", ints(bad.iter().map(|b| b.line).collect())), ("t", t.strings()?), ("why", why.strings()?),
        ("broken", Arc::new(arrow_array::BooleanArray::from(bad.iter().map(|b| b.broken).collect::<Vec<_>>())) as ArrayRef),
    ])
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sg3_block, m)?)?;
    m.add_class::<Sg3Reader>()?;
    Ok(())
}
