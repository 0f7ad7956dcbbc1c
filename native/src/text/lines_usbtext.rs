//! Small line-scanning helpers of the usbtext readers (usbmon, blkparse, QEMU text): a block
//! split into whole-line parts for the threads, lines walked with memchr, and a cursor that
//! reads the fields of one line without regex. (The cut into parts is text/mod.rs's; the
//! field readers here and there are still two sets, to be merged.)
use memchr::memchr_iter;

/// `buf` cut into about `parts` pieces, each ending just after a newline (the last one at
/// the end of `buf`): what each thread scans (the cut of `text::parts`, shared).
pub fn line_parts(buf: &[u8], parts: usize) -> Vec<&[u8]> {
    crate::text::parts(buf, parts.max(1)).into_iter().map(|r| &buf[r]).collect()
}

/// `scan` run on each whole-line part of `buf` (`line_parts`: about `threads` of them, the
/// first on this thread, each other on its own): the results in order, with each part's byte
/// offset in `buf`.
pub fn scan_parts<T: Send>(buf: &[u8], threads: usize, scan: fn(&[u8]) -> T) -> (Vec<T>, Vec<usize>) {
    let parts = line_parts(buf, threads.max(1));
    let offsets = parts.iter().map(|p| p.as_ptr() as usize - buf.as_ptr() as usize).collect();
    let scanned = std::thread::scope(|s| {
        let handles: Vec<_> = parts[1..].iter().map(|p| s.spawn(move || scan(p))).collect();
        let mut all = vec![scan(parts[0])];
        all.extend(handles.into_iter().map(|h| h.join().expect("text scan thread")));
        all
    });
    (scanned, offsets)
}

/// Calls `each(line index, line start, line without its newline)` for every line of `part`
/// (a last line without a newline too); returns the number of newlines.
pub fn for_each_line(part: &[u8], mut each: impl FnMut(i64, usize, &[u8])) -> i64 {
    let mut start = 0;
    let mut n: i64 = 0;
    for nl in memchr_iter(b'\n', part) {
        each(n, start, &part[start..nl]);
        n += 1;
        start = nl + 1;
    }
    if start < part.len() {
        each(n, start, &part[start..]);
    }
    n
}

/// The line without trailing `\r`, `\n` and spaces (polars' `strip_chars_end("\r\n ")`).
pub fn strip_end(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\r' | b'\n' | b' ') {
        end -= 1;
    }
    &line[..end]
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

/// Decimal digits as a number; None past 18 digits (a caller's range check rejects those).
pub fn dec(d: &[u8]) -> Option<i64> {
    if d.is_empty() || d.len() > 18 {
        return None;
    }
    Some(d.iter().fold(0i64, |v, &b| v * 10 + (b - b'0') as i64))
}

const fn hex_table() -> [u8; 256] {
    let mut t = [0u8; 256];
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

/// The value of a hex digit (callers have checked that it is one).
#[inline]
pub fn hex_digit(b: u8) -> u8 {
    HEX_VALUE[b as usize]
}

/// Hex digits as a number (at most 16 of them).
pub fn hex_u64(d: &[u8]) -> u64 {
    d.iter().fold(0u64, |v, &b| (v << 4) | hex_digit(b) as u64)
}
