//! sg3_utils programs' verbose output (parsers/_sg3_verbose.py) read without regex, a block's
//! lines on every core. A line is taken only when it is certain what every pattern of the
//! Python reader makes of it: a clean CDB line (`NAME cdb: [hex]`, `Name(N) [hex]`), an `open
//! DEV with flags=0x..` line, a `duration=N ms` line, or a line none of the patterns can match
//! (printable ASCII without any of their words, not a line of hex bytes). Every other line (a
//! line of sense data, bytes requested and got, a malformed CDB, a tab, a CR, non-ASCII or NUL
//! bytes, a number past 32 bits) goes back by position to the Python patterns.
use std::sync::Arc;

use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, LargeBinaryArray, LargeStringArray};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use memchr::memmem;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use super::{on_parts, part_count, uint};
use crate::arrow::{ints, values_or_null, Columns};

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

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sg3_block, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_taken_only_when_certain() {
        assert!(matches!(read(b"Read(10) [28 00 00 00 00 08 00 00 08 00]"), Some(Line::Cdb(b)) if b.len() == 10));
        assert!(matches!(read(b"    inquiry cdb: [12 00 00 00 24 00]"), Some(Line::Cdb(b)) if b == [0x12, 0, 0, 0, 0x24, 0]));
        assert!(matches!(read(b"    inquiry cdb: 12 00 00 00 24 00]  "), Some(Line::Cdb(_))));
        assert!(read(b"    inquiry cdb: [12 0g 00]").is_none());
        assert!(read(b"Read(10) [28 00").is_none());
        assert!(matches!(read(b"open /dev/sg0 with flags=0x800"), Some(Line::Open(b"/dev/sg0"))));
        assert!(matches!(read(b"open /dev/sg0 with flags=0xG"), Some(Line::Plain)));
        assert!(matches!(read(b"      duration=20 ms"), Some(Line::Duration(20))));
        assert!(read(b"      duration=99999999999 ms").is_none());
        assert!(read(b"        70 00 05 00").is_none());
        assert!(matches!(read(b"standard INQUIRY:"), Some(Line::Plain)));
        assert!(read(b"Fixed format, current; Sense key: Illegal Request").is_none());
    }
}
