//! Kernel SCSI logs (`parsers/scsilog.py`): the ftrace `scsi_dispatch_cmd_*` lines and the
//! dmesg lines of the kernel's SCSI logging of a block decoded without regex, on every core.
//!
//! Each line is one of four kinds:
//! - an ftrace event in the kernel's own shape (what `FTRACE` in scsilog.py matches, with
//!   every field in range): decoded here into columns;
//! - a dmesg SCSI logging line as `dmesg` prints it (`[  SECONDS] sd H:C:I:L: ...`, what
//!   `DMESG` matches with every field in range, printable ASCII, a `CDB:` line with 6 or more
//!   bytes): cut here into the fields `_dmesg` hands on (the pairing of an event with the CDB
//!   line after it stays the reader's, across blocks);
//! - a line no rule of the Python reader looks at (none of the words its filters look for,
//!   ASCII, no NUL): counted only;
//! - anything else (dmesg SCSI logging, ftrace's counters, a damaged or unusual event line):
//!   handed back whole, with its line index, for the Python reader, which decides it exactly
//!   as before (events, notes, counters, errors).
//!
//! So a line decoded here is one the regex would match with the same groups: the decoder
//! accepts only lines where each part of the pattern can match in one way (one
//! `scsi_dispatch_cmd_`, one `cmnd=(`, one ` driver_tag=`, one `raw=`), and sends the rest back.
use memchr::memmem;
use numpy::PyArray1;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use super::{digits, hex_byte, is_space, on_parts, part_count, seconds_ns, strip_eol, uint, Interner, StrCol};
use crate::arrow::{options_of, values_or_null, Columns};
use arrow_array::types::{Int32Type, Int64Type};

const HINT: &[u8] = b"scsi_dispatch_cmd_";
/// What the Python reader's filters look for besides HINT (ftrace's counters, "scsi scan:",
/// dmesg SCSI logging, its unstamped form): a line with none of them is read and ignored; so
/// is a line starting with '[' with none but the last (only an unstamped line is read for it).
const WORDS: [&[u8]; 10] = [b"entries-written", b"[LOST ", b"scsi scan: ", b"Send:", b"Done:", b"FAILED",
                            b"CDB:", b"timing out command", b"Sense Key", b"Add. Sense:"];
/// What an event line the reader decodes may not hold (each is another rule's).
const EVENT_OTHER: [&[u8]; 3] = [b"entries-written", b"[LOST ", b"scsi scan: "];

pub const KINDS: [&[u8]; 4] = [b"start", b"done", b"error", b"timeout"];
/// The drivers whose SCSI logging `DMESG` reads (`(?:sd|sr|st|scsi|ses|sg|osst|ch) `).
const DRIVERS: [&[u8]; 8] = [b"sd", b"sr", b"st", b"scsi", b"ses", b"sg", b"osst", b"ch"];
/// `DMESG`'s kinds but the last, `Sense Key\s*:`, read apart.
const DMESG_KINDS: [&[u8]; 5] = [b"Send:", b"Done:", b"FAILED", b"CDB:", b"timing out command"];

/// The decoded events and the lines left to Python, of one part of a block.
#[derive(Default)]
struct Part {
    idx: Vec<i64>,
    t_ns: Vec<i64>,
    kind: Vec<u8>,
    device: Vec<u32>,
    tag: Vec<i64>,
    tag_ok: Vec<bool>,
    cdb: Vec<u8>,
    cdb_end: Vec<i64>,
    host: Vec<i32>,
    status: Vec<i32>,
    rtn: Vec<i64>,
    rtn_ok: Vec<bool>,
    devices: Interner,
    names: Interner,
    fb_idx: Vec<i64>,
    fb_text: Vec<u8>,
    fb_end: Vec<i64>,
    lines: usize,
    dmesg: Dmesg,
}

/// The dmesg lines cut here: `_dmesg`'s columns (`kind` as it is written, a code of `kinds`).
#[derive(Default)]
struct Dmesg {
    idx: Vec<i64>,
    t_ns: Vec<i64>,
    kind: Vec<u32>,
    kinds: Interner,
    device: Vec<u32>,
    tag: StrCol,
    cdb_hex: StrCol,
    rest: StrCol,
    host_byte: StrCol,
    word: StrCol,
    timeout: Vec<bool>,
}

/// One dmesg line's fields, as `DMESG`'s groups would give them.
struct DmesgLine<'a> {
    t_ns: i64,
    device: [&'a [u8]; 4],
    tag: Option<&'a [u8]>,
    kind: &'a [u8],
    rest: &'a [u8],
    cdb_hex: Option<&'a [u8]>,
}

/// What `_dmesg_events` reads of a line's rest: `hostbyte=(\w+)`, `^\s*([A-Z_]+)` and whether
/// it holds `TIMEOUT` (as `_dmesg` extracts them for the lines it reads).
fn rest_fields<'a>(rest: &'a [u8], f: &Finders) -> (Option<&'a [u8]>, Option<&'a [u8]>, bool) {
    let lead = rest.iter().take_while(|&&b| b == b' ').count();
    let n = rest[lead..].iter().take_while(|b| b.is_ascii_uppercase() || **b == b'_').count();
    (word_after(rest, &f.hostbyte), (n > 0).then(|| &rest[lead..lead + n]), f.timeout.find(rest).is_some())
}

struct Finders {
    hint: memmem::Finder<'static>,
    words: Vec<memmem::Finder<'static>>,
    other: Vec<memmem::Finder<'static>>,
    host: memmem::Finder<'static>,
    status: memmem::Finder<'static>,
    hostbyte: memmem::Finder<'static>,
    timeout: memmem::Finder<'static>,
}

impl Finders {
    fn new() -> Self {
        Finders {
            hint: memmem::Finder::new(HINT),
            words: WORDS.iter().map(|w| memmem::Finder::new(*w)).collect(),
            other: EVENT_OTHER.iter().map(|w| memmem::Finder::new(*w)).collect(),
            host: memmem::Finder::new(b"host="),
            status: memmem::Finder::new(b"status=SAM_STAT_"),
            hostbyte: memmem::Finder::new(b"hostbyte="),
            timeout: memmem::Finder::new(b"TIMEOUT"),
        }
    }
}

/// One event's fields, as the regex's groups would give them.
struct Event<'a> {
    t_ns: i64,
    kind: u8,
    device: [&'a [u8]; 4],
    tag: Option<i64>,
    raw: &'a [u8],
    rtn: Option<i64>,
    result: Option<&'a [u8]>,
}

fn scan_part(buf: &[u8], first: usize, clean: bool, f: &Finders) -> Part {
    let mut p = Part::default();
    let mut dev = Vec::with_capacity(64);
    // the words of other rules, looked for in each event line only where the part has them
    let other = f.other.iter().any(|w| w.find(buf).is_some());
    for (i, raw_line) in super::lines(buf).enumerate() {
        let line = strip_eol(raw_line);
        let idx = (first + i) as i64;
        p.lines += 1;
        let plain = clean || line.iter().all(|&b| b != 0 && b < 0x80);
        let at = if plain { f.hint.find(line) } else { None };
        let ev = at.and_then(|at| event(line, at, f, other));
        match ev {
            Some(e) => p.push(idx, &e, &mut dev, f),
            // a dmesg line first (it holds one of WORDS, so no line the next arm takes): most
            // lines of a dmesg log are, and the words are each looked for along the whole line
            None if plain && at.is_none() && line.first() == Some(&b'[')
                && dmesg_line(line).is_some_and(|d| printable(line)
                    && !(other && f.other.iter().any(|w| w.find(line).is_some()))
                    && p.push_dmesg(idx, &d, &mut dev, f)) => {}
            None if plain && at.is_none() && !f.words[..words_to_look(line)].iter().any(|w| w.find(line).is_some()) => {}
            None => {
                p.fb_idx.push(idx);
                p.fb_text.extend_from_slice(raw_line);
                p.fb_end.push(p.fb_text.len() as i64);
            }
        }
    }
    p
}

impl Part {
    fn push(&mut self, idx: i64, e: &Event, dev: &mut Vec<u8>, f: &Finders) {
        dev.clear();
        for (k, d) in e.device.iter().enumerate() {
            if k > 0 {
                dev.push(b':');
            }
            dev.extend_from_slice(d);
        }
        self.idx.push(idx);
        self.t_ns.push(e.t_ns);
        self.kind.push(e.kind);
        self.device.push(self.devices.code(dev));
        self.tag.push(e.tag.unwrap_or(0));
        self.tag_ok.push(e.tag.is_some());
        let mut hi = None;
        for &b in e.raw.iter().filter(|&&b| b != b' ') {
            match hi.take() {
                None => hi = Some(b),
                Some(h) => self.cdb.push(hex_byte(h, b).unwrap_or(0)),
            }
        }
        self.cdb_end.push(self.cdb.len() as i64);
        let host = e.result.and_then(|r| word_after(r, &f.host));
        let status = e.result.and_then(|r| word_after(r, &f.status));
        self.host.push(host.map_or(-1, |h| self.names.code(h) as i32));
        self.status.push(status.map_or(-1, |w| {
            dev.clear();
            dev.extend(w.iter().map(|&b| if b == b'_' { b' ' } else { b }));
            self.names.code(dev) as i32
        }));
        self.rtn.push(e.rtn.unwrap_or(0));
        self.rtn_ok.push(e.rtn.is_some());
    }
}

impl Part {
    /// Adds a dmesg line (true), or leaves it (false: a field out of its range).
    fn push_dmesg(&mut self, idx: i64, d: &DmesgLine, dev: &mut Vec<u8>, f: &Finders) -> bool {
        for x in &d.device[..3] {
            if uint(x).map_or(true, |v| v > u64::from(u32::MAX)) {
                return false;
            }
        }
        if uint(d.device[3]).map_or(true, |v| v > i64::MAX as u64) {
            return false;
        }
        if d.tag.is_some_and(|t| uint(t).map_or(true, |v| v > i32::MAX as u64)) {
            return false;
        }
        dev.clear();
        for (k, x) in d.device.iter().enumerate() {
            if k > 0 {
                dev.push(b':');
            }
            dev.extend_from_slice(x);
        }
        let m = &mut self.dmesg;
        m.idx.push(idx);
        m.t_ns.push(d.t_ns);
        m.kind.push(m.kinds.code(d.kind));
        m.device.push(self.devices.code(dev));
        m.tag.push(d.tag);
        m.rest.push(Some(d.rest));
        let (host, word, timeout) = rest_fields(d.rest, f);
        m.host_byte.push(host);
        m.word.push(word);
        m.timeout.push(timeout);
        // the hex pairs with their spaces taken out, as `cdb_hex` is
        if let Some(h) = d.cdb_hex {
            m.cdb_hex.data.extend(h.iter().filter(|&&b| b != b' '));
        }
        m.cdb_hex.ends.push(m.cdb_hex.data.len() as i64);
        m.cdb_hex.valid.push(d.cdb_hex.is_some());
        true
    }
}

/// How many of WORDS decide whether `line` is the Python reader's.
fn words_to_look(line: &[u8]) -> usize {
    WORDS.len() - usize::from(line.first() == Some(&b'['))
}

/// Printable ASCII only (no control byte: `\s` can only be a space).
fn printable(line: &[u8]) -> bool {
    line.iter().all(|&b| (0x20..0x7F).contains(&b))
}

/// The fields of a printable-ASCII line in `DMESG`'s shape with no syslog head
/// (`[  SECONDS] DRIVER H:C:I:L: ([NAME] )? *(tag#N )?KIND REST`), or None: the line is
/// the Python reader's. Each part can match one way only, so these are the regex's groups.
fn dmesg_line(s: &[u8]) -> Option<DmesgLine<'_>> {
    let mut i = 1 + s[1..].iter().take_while(|&&b| b == b' ').count();
    let whole = digits(&s[i..]);
    let dot = i + whole;
    if whole == 0 || s.get(dot) != Some(&b'.') {
        return None;
    }
    let frac = digits(&s[dot + 1..]);
    let close = dot + 1 + frac;
    if frac == 0 || !s[close..].starts_with(b"] ") {
        return None;
    }
    let t_ns = seconds_ns(&s[i..dot], &s[dot + 1..close])?;
    i = close + 2;
    let driver = s[i..].iter().position(|&b| b == b' ')?;
    if !DRIVERS.contains(&&s[i..i + driver]) {
        return None;
    }
    i += driver + 1;
    let mut device: [&[u8]; 4] = [b""; 4];
    for (k, slot) in device.iter_mut().enumerate() {
        let n = digits(&s[i..]);
        if n == 0 || s.get(i + n) != Some(&b':') {
            return None;
        }
        *slot = &s[i..i + n];
        i += n + 1;
        if k == 3 && s.get(i) != Some(&b' ') {
            return None;
        }
    }
    i += 1;
    if s.get(i) == Some(&b'[') {
        let n = s[i + 1..].iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
        if n == 0 || !s[i + 1 + n..].starts_with(b"] ") {
            return None;
        }
        i += n + 3;
    }
    i += s[i..].iter().take_while(|&&b| b == b' ').count();
    let mut tag = None;
    if s[i..].starts_with(b"tag#") {
        let n = digits(&s[i + 4..]);
        if n == 0 || s.get(i + 4 + n) != Some(&b' ') {
            return None;
        }
        tag = Some(&s[i + 4..i + 4 + n]);
        i += 5 + n;
    }
    let kind_len = match DMESG_KINDS.iter().find(|k| s[i..].starts_with(k)) {
        Some(k) => k.len(),
        None if s[i..].starts_with(b"Sense Key") => {
            let sp = s[i + 9..].iter().take_while(|&&b| b == b' ').count();
            if s.get(i + 9 + sp) != Some(&b':') {
                return None;
            }
            10 + sp
        }
        None => return None,
    };
    let kind = &s[i..i + kind_len];
    let rest = &s[i + kind_len..];
    let cdb_hex = trailing_hex(rest);
    if kind == b"CDB:" && cdb_hex.map_or(0, |h| h.len() - h.len() / 3) < 12 {
        return None;
    }
    Some(DmesgLine { t_ns, device, tag, kind, rest, cdb_hex })
}

/// `((?:\s[0-9a-f]{2})+)\s*$` of printable text (`\s` a space): the run of " hh" pairs
/// before the trailing spaces, with their spaces (the leftmost match is the longest run).
fn trailing_hex(rest: &[u8]) -> Option<&[u8]> {
    let end = rest.len() - rest.iter().rev().take_while(|&&b| b == b' ').count();
    let mut start = end;
    while start >= 3 && rest[start - 3] == b' ' && is_lower_hex(rest[start - 2]) && is_lower_hex(rest[start - 1]) {
        start -= 3;
    }
    (start < end).then(|| &rest[start..end])
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// `(\w+)` after the first `key` it follows (`str.extract(key + r"(\w+)")` on ASCII text).
fn word_after<'a>(s: &'a [u8], key: &memmem::Finder) -> Option<&'a [u8]> {
    let mut from = 0;
    while let Some(i) = key.find(&s[from..]) {
        let w = &s[from + i + key.needle().len()..];
        let n = w.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
        if n > 0 {
            return Some(&w[..n]);
        }
        from += i + 1;
    }
    None
}

fn skip_spaces(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_space(s[i]) {
        i += 1;
    }
    i
}

/// The end (exclusive) of `s` after trailing spaces are dropped, if at least one was.
fn before_spaces(s: &[u8], end: usize) -> Option<usize> {
    let mut i = end;
    while i > 0 && is_space(s[i - 1]) {
        i -= 1;
    }
    (i < end).then_some(i)
}

/// Whether `s[..end]` ends with `[DIGITS]`; returns where that token starts.
fn cpu_token(s: &[u8], end: usize) -> Option<usize> {
    if end < 3 || s[end - 1] != b']' {
        return None;
    }
    let mut i = end - 1;
    while i > 0 && s[i - 1].is_ascii_digit() {
        i -= 1;
    }
    (i < end - 1 && i > 0 && s[i - 1] == b'[').then_some(i - 1)
}

/// Whether the text before the timestamp (`pre`, ending in spaces) has the shape
/// `\s*TASK-PID\s+(?:\(\s*[-\d]+\)\s+)?\[CPU\]\s+(?:\S{4,5}\s+)?`.
fn prefix_ok(pre: &[u8]) -> bool {
    let Some(end) = before_spaces(pre, pre.len()) else { return false };
    let cpu = cpu_token(pre, end).or_else(|| {
        let mut i = end;
        while i > 0 && !is_space(pre[i - 1]) {
            i -= 1;
        }
        if !(4..=5).contains(&(end - i)) {
            return None;
        }
        cpu_token(pre, before_spaces(pre, i)?)
    });
    let Some(cpu) = cpu else { return false };
    let Some(mut end) = before_spaces(pre, cpu) else { return false };
    if pre[end - 1] == b')' {
        let mut i = end - 1;
        while i > 0 && (pre[i - 1].is_ascii_digit() || pre[i - 1] == b'-') {
            i -= 1;
        }
        if i == end - 1 {
            return false;
        }
        while i > 0 && is_space(pre[i - 1]) {
            i -= 1;
        }
        if i == 0 || pre[i - 1] != b'(' {
            return false;
        }
        match before_spaces(pre, i - 1) {
            Some(e) => end = e,
            None => return false,
        }
    }
    let mut i = end;
    while i > 0 && pre[i - 1].is_ascii_digit() {
        i -= 1;
    }
    i < end && i >= 2 && pre[i - 1] == b'-'
}

/// A field `NAME=DIGITS` at `s[i..]` followed by `sep`: (digits, index after sep).
fn field<'a>(s: &'a [u8], i: usize, name: &[u8], sep: u8) -> Option<(&'a [u8], usize)> {
    let rest = s.get(i..)?.strip_prefix(name)?;
    let n = digits(rest);
    (n > 0 && rest.get(n) == Some(&sep)).then(|| (&rest[..n], i + name.len() + n + 1))
}

/// `-?\d+` at `s[i..]`: (its text, its length).
fn signed(s: &[u8], i: usize) -> Option<(&[u8], usize)> {
    let rest = s.get(i..)?;
    let sign = usize::from(rest.first() == Some(&b'-'));
    let n = digits(&rest[sign..]);
    (n > 0).then(|| (&rest[..sign + n], sign + n))
}

fn parse_signed(t: &[u8]) -> Option<i64> {
    match t.strip_prefix(b"-") {
        Some(d) => uint(d).and_then(|v| if v <= i64::MAX as u64 + 1 { Some((v as i128).wrapping_neg() as i64) } else { None }),
        None => uint(t).and_then(|v| i64::try_from(v).ok()),
    }
}

/// The event of an ASCII line whose (first) HINT is at `at`, if it has the kernel's shape
/// and every field is in range; None sends the line to the Python reader.
fn event<'a>(line: &'a [u8], at: usize, f: &Finders, other: bool) -> Option<Event<'a>> {
    if other && f.other.iter().any(|w| w.find(line).is_some()) {
        return None;
    }
    // the timestamp: `\s+(\d+\.\d+):\s+` before HINT
    let colon_end = before_spaces(line, at)?;
    if colon_end == 0 || line[colon_end - 1] != b':' {
        return None;
    }
    let ts_end = colon_end - 1;
    let frac_start = ts_end - line[..ts_end].iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if frac_start == ts_end || frac_start == 0 || line[frac_start - 1] != b'.' {
        return None;
    }
    let dot = frac_start - 1;
    let whole_start = dot - line[..dot].iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if whole_start == dot || whole_start == 0 || !is_space(line[whole_start - 1]) {
        return None;
    }
    if !prefix_ok(&line[..whole_start]) {
        return None;
    }
    let t_ns = seconds_ns(&line[whole_start..dot], &line[frac_start..ts_end])?;
    // kind, then the device
    let after = &line[at + HINT.len()..];
    let kind = KINDS.iter().position(|k| after.starts_with(k) && after.get(k.len()) == Some(&b':'))?;
    let mut i = at + HINT.len() + KINDS[kind].len() + 1;
    let j = skip_spaces(line, i);
    if j == i {
        return None;
    }
    let (host, j) = field(line, j, b"host_no=", b' ')?;
    let (channel, j) = field(line, j, b"channel=", b' ')?;
    let (id, j) = field(line, j, b"id=", b' ')?;
    let (lun, j) = field(line, j, b"lun=", b' ')?;
    i = j;
    for d in [host, channel, id] {
        if uint(d)? > u64::from(u32::MAX) {
            return None;
        }
    }
    if uint(lun)? > i64::MAX as u64 {
        return None;
    }
    // ` driver_tag=` (optional, before `cmnd=(`), `cmnd=(NAME`, then `raw=HEX)`: each found
    // at its '=' (every occurrence of each ends in one), a second one of any sends the line back
    let rest = &line[i..];
    if f.hint.find(rest).is_some() {
        return None;
    }
    let (mut c, mut t, mut r) = (None, None, None);
    for e in memchr::memchr_iter(b'=', rest) {
        let (key, slot) = if rest[..e].ends_with(b" driver_tag") {
            (e - 11, &mut t)
        } else if rest[..e].ends_with(b"cmnd") && rest.get(e + 1) == Some(&b'(') {
            (e - 4, &mut c)
        } else if rest[..e].ends_with(b"raw") {
            (e - 3, &mut r)
        } else {
            continue;
        };
        if slot.replace(key).is_some() {
            return None;
        }
    }
    let c = c?;
    let tag = match t {
        None => None,
        Some(t) => {
            if t + 12 > c {
                return None;
            }
            match signed(rest, t + 12) {
                Some((text, _)) => {
                    let v = parse_signed(text)?;
                    if !(i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(&v) {
                        return None;
                    }
                    Some(v)
                }
                None => None,
            }
        }
    };
    let name = rest.get(c + 6)?;
    if !(name.is_ascii_uppercase() || name.is_ascii_digit() || *name == b'_') {
        return None;
    }
    let r = r.filter(|&r| r >= c + 7)?;
    let hex_start = r + 4;
    let n = rest[hex_start..].iter().take_while(|&&b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b' ').count();
    if n == 0 || rest.get(hex_start + n) != Some(&b')') {
        return None;
    }
    let raw = &rest[hex_start..hex_start + n];
    let hexes = raw.iter().filter(|&&b| b != b' ').count();
    if hexes == 0 || hexes % 2 == 1 {
        return None;
    }
    // ` rtn=N`, ` result=(...)`, trailing spaces
    let mut k = hex_start + n + 1;
    let mut rtn = None;
    if rest[k..].starts_with(b" rtn=") {
        let (text, len) = signed(rest, k + 5)?;
        rtn = Some(parse_signed(text)?);
        k += 5 + len;
    }
    let mut result = None;
    if rest[k..].starts_with(b" result=(") {
        let body = &rest[k + 9..];
        let close = memchr::memchr(b')', body)?;
        result = Some(&body[..close]);
        k += 9 + close + 1;
    }
    if !rest[k..].iter().all(|&b| is_space(b)) {
        return None;
    }
    Some(Event { t_ns, kind: kind as u8, device: [host, channel, id, lun], tag, raw, rtn, result })
}

/// The parts of a block put together: codes of the parts' vocabularies renumbered into one.
fn merged(parts: Vec<Part>) -> Part {
    let mut out = Part::default();
    let mut fb_base = 0i64;
    let mut cdb_base = 0i64;
    for p in parts {
        let dev_map: Vec<u32> = p.devices.names.iter().map(|n| out.devices.code(n)).collect();
        let name_map: Vec<i32> = p.names.names.iter().map(|n| out.names.code(n) as i32).collect();
        out.idx.extend(&p.idx);
        out.t_ns.extend(&p.t_ns);
        out.kind.extend(&p.kind);
        out.device.extend(p.device.iter().map(|&d| dev_map[d as usize]));
        out.tag.extend(&p.tag);
        out.tag_ok.extend(&p.tag_ok);
        out.cdb.extend(&p.cdb);
        out.cdb_end.extend(p.cdb_end.iter().map(|&e| e + cdb_base));
        cdb_base += p.cdb.len() as i64;
        out.host.extend(p.host.iter().map(|&h| if h < 0 { h } else { name_map[h as usize] }));
        out.status.extend(p.status.iter().map(|&h| if h < 0 { h } else { name_map[h as usize] }));
        out.rtn.extend(&p.rtn);
        out.rtn_ok.extend(&p.rtn_ok);
        out.fb_idx.extend(&p.fb_idx);
        out.fb_text.extend(&p.fb_text);
        out.fb_end.extend(p.fb_end.iter().map(|&e| e + fb_base));
        fb_base += p.fb_text.len() as i64;
        out.lines += p.lines;
        let d = p.dmesg;
        let kind_map: Vec<u32> = d.kinds.names.iter().map(|n| out.dmesg.kinds.code(n)).collect();
        let m = &mut out.dmesg;
        m.idx.extend(&d.idx);
        m.t_ns.extend(&d.t_ns);
        m.kind.extend(d.kind.iter().map(|&k| kind_map[k as usize]));
        m.device.extend(d.device.iter().map(|&x| dev_map[x as usize]));
        m.tag.append(d.tag);
        m.cdb_hex.append(d.cdb_hex);
        m.rest.append(d.rest);
        m.host_byte.append(d.host_byte);
        m.word.append(d.word);
        m.timeout.extend(&d.timeout);
    }
    out
}

/// The ftrace events of a block of whole lines (`buf`, UTF-8 checked by the caller or not:
/// a block that is not UTF-8 gives None, for the Python reader's own error or replacement),
/// with the lines left to the Python reader. Line indexes count from the block's first line.
/// `parts`: how many parts to cut the block in (the tests; default: one a core).
#[pyfunction]
#[pyo3(signature = (buf, parts=None))]
fn ftrace_block<'py>(py: Python<'py>, buf: PyReadonlyArray1<'py, u8>, parts: Option<usize>)
                     -> PyResult<Option<FtraceScan>> {
    let data = buf.as_slice()?;
    let n = parts.unwrap_or_else(|| part_count(data.len()));
    let out = py.allow_threads(|| {
        if std::str::from_utf8(data).is_err() {
            return None;
        }
        let clean = data.is_ascii() && memchr::memchr(0, data).is_none();
        let f = Finders::new();
        Some(merged(on_parts(data, n, |part, first| scan_part(part, first, clean, &f))))
    });
    let Some(p) = out else { return Ok(None) };
    let m = p.dmesg;
    Ok(Some(FtraceScan {
        lines: p.lines, idx: np(py, p.idx), t_ns: np(py, p.t_ns), kind: np(py, p.kind), device: np(py, p.device),
        devices: p.devices.strings(), cdb: np(py, p.cdb), cdb_end: np(py, p.cdb_end),
        fields: Py::new(py, Columns::new(vec![
            ("tag", values_or_null::<Int64Type>(p.tag, p.tag_ok)),
            ("host_code", options_of::<Int32Type>(p.host.iter().map(|&h| (h >= 0).then_some(h)))),
            ("status_code", options_of::<Int32Type>(p.status.iter().map(|&c| (c >= 0).then_some(c)))),
            ("rtn", values_or_null::<Int64Type>(p.rtn, p.rtn_ok))])?)?,
        names: p.names.strings(), fb_idx: np(py, p.fb_idx), fb_text: np(py, p.fb_text),
        fb_end: np(py, p.fb_end), d_idx: np(py, m.idx), d_t_ns: np(py, m.t_ns), d_kind: np(py, m.kind),
        d_kinds: m.kinds.strings(), d_device: np(py, m.device), d_tag: m.tag.into_py(py)?,
        d_cdb_hex: m.cdb_hex.into_py(py)?, d_rest: m.rest.into_py(py)?, d_host_byte: m.host_byte.into_py(py)?,
        d_word: m.word.into_py(py)?, d_timeout: np(py, m.timeout),
    }))
}

fn np<T: numpy::Element>(py: Python, v: Vec<T>) -> Py<PyArray1<T>> {
    PyArray1::from_vec_bound(py, v).unbind()
}

/// What `ftrace_block` read of a block of `lines` lines, in three parts of their own lengths:
/// the ftrace events decoded (`idx`: line index in the block; `kind` a code of `KINDS`;
/// `device` a code of `devices`; `cdb` packed, `cdb_end`; `fields`: `tag`, `rtn`, and
/// `host_code`, `status_code` (a code of `names`), each null where the line has none), the lines left
/// to the Python reader (`fb_idx`, their text packed: `fb_text`, `fb_end`) and the dmesg
/// lines cut into `_dmesg`'s fields (`d_*`; `d_kind` a code of `d_kinds`).
#[pyclass(get_all)]
struct FtraceScan {
    lines: usize,
    idx: Py<PyArray1<i64>>,
    t_ns: Py<PyArray1<i64>>,
    kind: Py<PyArray1<u8>>,
    device: Py<PyArray1<u32>>,
    devices: Vec<String>,
    cdb: Py<PyArray1<u8>>,
    cdb_end: Py<PyArray1<i64>>,
    fields: Py<Columns>,
    names: Vec<String>,
    fb_idx: Py<PyArray1<i64>>,
    fb_text: Py<PyArray1<u8>>,
    fb_end: Py<PyArray1<i64>>,
    d_idx: Py<PyArray1<i64>>,
    d_t_ns: Py<PyArray1<i64>>,
    d_kind: Py<PyArray1<u32>>,
    d_kinds: Vec<String>,
    d_device: Py<PyArray1<u32>>,
    d_tag: Py<Columns>,
    d_cdb_hex: Py<Columns>,
    d_rest: Py<Columns>,
    d_host_byte: Py<Columns>,
    d_word: Py<Columns>,
    d_timeout: Py<PyArray1<bool>>,
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ftrace_block, m)?)?;
    m.add("KINDS", KINDS.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>())?;
    Ok(())
}
