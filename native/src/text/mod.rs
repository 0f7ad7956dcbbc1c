//! Line-oriented text formats scanned in Rust (`scsitrace._native.text`): the shared helpers
//! and one module per format (`scsilog.rs` ftrace and dmesg kernel logs, `sgio.rs` strace
//! lines, `usbmon.rs` usbmon text, `blkparse.rs` blkparse text, `qemu.rs` QEMU trace lines,
//! `sg3.rs` sg3_utils verbose output).
//!
//! The helpers every text reader uses (keep this API small; a format's own rules go in its
//! module):
//! - `lines_at(buf)`: the lines of a block (memchr on '\n'), each with its byte offset and
//!   without its '\n'; `lines` and `for_each_line` read the same lines; `line_count(buf)`
//!   counts them as `parsers/_lines.py` numbers them (a last line without '\n' counts);
//! - `parts(buf, n)`: a block cut into about `n` ranges at line boundaries (`part_count`: one a
//!   core); `scan_parts` runs a scan on each range in its own thread (the block's lines on
//!   every core, the GIL released by the caller), results in order with each range's byte
//!   offset; `on_parts` the same with each range's first line index, so line numbers stay
//!   exact whatever the split;
//! - `strip_eol`, `strip_end`, `is_space` (the regex crate's ASCII `\s`), `digits`, `uint`,
//!   `dec`, `hex_digit`, `hex_byte`, `hex_u64`, `seconds_ns` (`SECONDS.FRACTION` as
//!   `_lines.seconds_ns` reads it): fields as checked numbers, None when out of range (the
//!   error contract: never a wrapped or cast value); `Cursor`: one line's fields read in turn;
//! - `Interner`: a small vocabulary of byte strings (devices, names) as dense codes; `StrCol`: a
//!   column of optional strings handed to Python as Arrow lays it out.
use std::sync::Arc;

use arrow_array::{ArrayRef, LargeStringArray};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use pyo3::prelude::*;

use crate::arrow::Columns;

pub mod blkparse;
pub mod qemu;
pub mod scsilog;
pub mod scsilog_engine;
pub mod scsilog_pair;
pub mod sg3;
pub mod sgio;
pub mod usbmon;

/// The lines of `buf`, each with the offset of its first byte and without its '\n' (a last
/// line without one is a line too).
pub fn lines_at(buf: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos >= buf.len() {
            return None;
        }
        let start = pos;
        let end = memchr::memchr(b'\n', &buf[pos..]).map_or(buf.len(), |i| pos + i);
        pos = end + 1;
        Some((start, &buf[start..end]))
    })
}

/// The lines of `buf` (`lines_at` without the offsets).
pub fn lines(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    lines_at(buf).map(|(_, line)| line)
}

/// Calls `each(line index, line start, line)` for every line of `part` (`lines_at`); returns
/// the number of newlines (the lines, less a last one without '\n').
pub fn for_each_line(part: &[u8], mut each: impl FnMut(i64, usize, &[u8])) -> i64 {
    let mut n: i64 = 0;
    for (start, line) in lines_at(part) {
        each(n, start, line);
        n += 1;
    }
    n - i64::from(part.last().is_some_and(|&b| b != b'\n'))
}

/// How many lines `lines(buf)` yields.
pub fn line_count(buf: &[u8]) -> usize {
    let n = memchr::memchr_iter(b'\n', buf).count();
    n + usize::from(buf.last().is_some_and(|&b| b != b'\n'))
}

/// `buf` cut into at most `n` consecutive ranges, each ending after a '\n' (the last at the end).
pub fn parts(buf: &[u8], n: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::with_capacity(n);
    let mut start = 0usize;
    for k in 1..n {
        let aim = buf.len() * k / n;
        if aim <= start {
            continue;
        }
        match memchr::memchr(b'\n', &buf[aim..]) {
            Some(i) => {
                out.push(start..aim + i + 1);
                start = aim + i + 1;
            }
            None => break,
        }
    }
    if start < buf.len() || out.is_empty() {
        out.push(start..buf.len());
    }
    out
}

/// Bytes of a block worth a thread of their own.
pub const PART_BYTES: usize = 1 << 20;

/// How many parts a block of `len` bytes is scanned in: one a core, at least PART_BYTES each.
pub fn part_count(len: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(len / PART_BYTES).max(1)
}

/// The threaded scan every reader shares: `scan(k, range)` for each range of `buf`, the first
/// on this thread, each other on its own; results in order.
fn threaded<T: Send>(buf: &[u8], ranges: &[std::ops::Range<usize>],
                     scan: impl Fn(usize, std::ops::Range<usize>) -> T + Sync) -> Vec<T> {
    if ranges.len() == 1 {
        return vec![scan(0, ranges[0].clone())];
    }
    debug_assert!(ranges.last().is_some_and(|r| r.end == buf.len()));
    std::thread::scope(|s| {
        let scan = &scan;
        let handles: Vec<_> = ranges.iter().enumerate().skip(1)
            .map(|(k, r)| {
                let r = r.clone();
                s.spawn(move || scan(k, r))
            })
            .collect();
        let mut all = vec![scan(0, ranges[0].clone())];
        all.extend(handles.into_iter().map(|h| h.join().expect("text scan thread panicked")));
        all
    })
}

/// `scan` run on each whole-line part of `buf` (`parts`: about `threads` of them, one thread
/// a part): the results in order, with each part's byte offset in `buf`.
pub fn scan_parts<T: Send>(buf: &[u8], threads: usize, scan: impl Fn(&[u8]) -> T + Sync) -> (Vec<T>, Vec<usize>) {
    let ranges = parts(buf, threads.max(1));
    let offsets = ranges.iter().map(|r| r.start).collect();
    (threaded(buf, &ranges, |_, r| scan(&buf[r])), offsets)
}

/// `scan` run on each of `n` parts of `buf` (`parts`; one thread a part), with the index of
/// the part's first line in `buf`; results in order.
pub fn on_parts<T: Send>(buf: &[u8], n: usize, scan: impl Fn(&[u8], usize) -> T + Sync) -> Vec<T> {
    let ranges = parts(buf, n.max(1));
    let firsts: Vec<usize> = ranges.iter().scan(0usize, |acc, r| {
        let first = *acc;
        *acc += line_count(&buf[r.clone()]);
        Some(first)
    }).collect();
    threaded(buf, &ranges, |k, r| scan(&buf[r], firsts[k]))
}

/// `line` without trailing '\r' and '\n' bytes (what `str.strip_chars_end("\r\n")` leaves).
#[inline]
pub fn strip_eol(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r' | b'\n'] = line {
        line = rest;
    }
    line
}

/// The line without trailing `\r`, `\n` and spaces (polars' `strip_chars_end("\r\n ")`).
#[inline]
pub fn strip_end(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r' | b'\n' | b' '] = line {
        line = rest;
    }
    line
}

/// The ASCII bytes the regex crate's `\s` matches.
#[inline]
pub fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// How many ASCII digits `s` starts with.
#[inline]
pub fn digits(s: &[u8]) -> usize {
    s.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// Decimal digits (at least one, nothing else) as a u64; None when empty or over u64.
#[inline]
pub fn uint(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// Decimal digits (at least one, at most 18, nothing else) as an i64; callers check ranges.
#[inline]
pub fn dec(d: &[u8]) -> Option<i64> {
    if d.len() > 18 {
        return None;
    }
    uint(d).map(|v| v as i64)
}

const fn hex_table() -> [u8; 256] {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
}

static HEX_VALUE: [u8; 256] = hex_table();

/// One hex digit's value (either case).
#[inline]
pub fn hex_digit(b: u8) -> Option<u8> {
    let v = HEX_VALUE[b as usize];
    (v != 0xFF).then_some(v)
}

/// Hex digits (checked by the caller, at most 16) as a number.
#[inline]
pub fn hex_u64(d: &[u8]) -> u64 {
    d.iter().fold(0u64, |v, &b| (v << 4) | u64::from(HEX_VALUE[b as usize] & 0x0F))
}

/// Two hex digits as a byte.
#[inline]
pub fn hex_byte(hi: u8, lo: u8) -> Option<u8> {
    Some(hex_digit(hi)? << 4 | hex_digit(lo)?)
}

/// The last whole second an int64 of nanoseconds holds (`_lines.MAX_SECONDS`).
pub const MAX_SECONDS: u64 = (i64::MAX as u64) / 1_000_000_000 - 1;

/// `WHOLE.FRAC` seconds (digits only, WHOLE non-empty) as int64 ns, FRAC cut to 9 digits or
/// padded: `_lines.seconds_ns`. None when WHOLE > MAX_SECONDS.
pub fn seconds_ns(whole: &[u8], frac: &[u8]) -> Option<i64> {
    let sec = uint(whole)?;
    if sec > MAX_SECONDS || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut ns: i64 = 0;
    for k in 0..9 {
        ns = ns * 10 + frac.get(k).map_or(0, |&b| i64::from(b - b'0'));
    }
    Some(sec as i64 * 1_000_000_000 + ns)
}

/// A cursor over one line's bytes; every reader returns None when the field is not there.
pub struct Cursor<'a> {
    pub s: &'a [u8],
    pub i: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(s: &'a [u8]) -> Self {
        Cursor { s, i: 0 }
    }
    pub fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }
    pub fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    pub fn byte(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }
    /// Consumes `b` if it is next.
    pub fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    pub fn expect(&mut self, b: u8) -> Option<()> {
        if self.eat(b) { Some(()) } else { None }
    }
    /// The run of bytes satisfying `f` (None when empty).
    pub fn run(&mut self, f: impl Fn(u8) -> bool) -> Option<&'a [u8]> {
        let start = self.i;
        while self.i < self.s.len() && f(self.s[self.i]) {
            self.i += 1;
        }
        if self.i > start { Some(&self.s[start..self.i]) } else { None }
    }
    pub fn digits(&mut self) -> Option<&'a [u8]> {
        self.run(|b| b.is_ascii_digit())
    }
    pub fn hex(&mut self) -> Option<&'a [u8]> {
        self.run(|b| b.is_ascii_hexdigit())
    }
}

const SMALL: usize = 16;

/// A small vocabulary of byte strings numbered in order of first appearance.
#[derive(Default)]
pub struct Interner {
    pub names: Vec<Vec<u8>>,
    index: std::collections::HashMap<Vec<u8>, u32>,
}

impl Interner {
    pub fn code(&mut self, name: &[u8]) -> u32 {
        // the few first names by a plain look (devices of a log are few), the rest hashed
        if let Some(c) = self.names.iter().take(SMALL).position(|n| n == name) {
            return c as u32;
        }
        if let Some(&c) = self.index.get(name) {
            return c;
        }
        let c = self.names.len() as u32;
        if self.names.len() >= SMALL {
            self.index.insert(name.to_vec(), c);
        }
        self.names.push(name.to_vec());
        c
    }

    /// The names as Python strings (the text was checked to be UTF-8 by the caller).
    pub fn strings(&self) -> Vec<String> {
        self.names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect()
    }
}

/// A column of optional strings built as Arrow lays them out: the bytes one after another,
/// where each ends, whether each is there (`into_py` hands it over as Arrow; `_lines.strings`).
#[derive(Default)]
pub struct StrCol {
    pub data: Vec<u8>,
    pub ends: Vec<i64>,
    pub valid: Vec<bool>,
}

impl StrCol {
    pub fn push(&mut self, s: Option<&[u8]>) {
        if let Some(s) = s {
            self.data.extend_from_slice(s);
        }
        self.ends.push(self.data.len() as i64);
        self.valid.push(s.is_some());
    }

    /// `from`'s strings after these.
    pub fn append(&mut self, from: StrCol) {
        let base = self.data.len() as i64;
        self.data.extend(from.data);
        self.ends.extend(from.ends.into_iter().map(|e| e + base));
        self.valid.extend(from.valid);
    }

    /// The column as Arrow strings (one column `value`; the vectors become its buffers: no
    /// copy), null where absent; an error if the bytes are not UTF-8.
    pub fn into_py(self, py: Python) -> PyResult<Py<Columns>> {
        Py::new(py, Columns::new(vec![("value", self.into_array()?)])?)
    }

    /// The column as an Arrow string array (a column of a wider `Columns`).
    pub fn into_array(self) -> PyResult<ArrayRef> {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(std::iter::once(0).chain(self.ends).collect::<Vec<i64>>()));
        let nulls = NullBuffer::from(self.valid);
        let nulls = (nulls.null_count() > 0).then_some(nulls);
        let column = LargeStringArray::try_new(offsets, Buffer::from_vec(self.data), nulls)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("strings: {e}")))?;
        Ok(Arc::new(column) as ArrayRef)
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    scsilog::register(m)?;
    scsilog_pair::register(m)?;
    scsilog_engine::register(m)?;
    sgio::register(m)?;
    usbmon::register(m)?;
    qemu::register(m)?;
    sg3::register(m)?;
    blkparse::register(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cut_at_line_ends_and_cover_the_block() {
        let buf = b"a\nbb\nccc\ndddd\ne";
        for n in 1..8 {
            let r = parts(buf, n);
            assert_eq!(r.first().unwrap().start, 0);
            assert_eq!(r.last().unwrap().end, buf.len());
            for w in r.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert_eq!(buf[w[0].end - 1], b'\n');
            }
        }
        assert_eq!(line_count(buf), 5);
        assert_eq!(lines(buf).count(), 5);
        assert_eq!(for_each_line(buf, |_, _, _| {}), 4);
        assert_eq!(for_each_line(b"a\n\nb\n", |_, _, _| {}), 3);
        let starts: Vec<usize> = lines_at(buf).map(|(s, _)| s).collect();
        assert_eq!(starts, vec![0, 2, 5, 9, 14]);
    }

    #[test]
    fn seconds_follow_the_python_rule() {
        assert_eq!(seconds_ns(b"1", b"5"), Some(1_500_000_000));
        assert_eq!(seconds_ns(b"0", b"1234567891"), Some(123_456_789));
        assert_eq!(seconds_ns(b"9223372036", b"0"), None);
        assert_eq!(seconds_ns(b"9223372035", b"0"), Some(9_223_372_035_000_000_000));
    }
}
