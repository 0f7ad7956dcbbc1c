//! strace's lines (`parsers/_strace_lines.py`): each line cut into the parts the patterns
//! `PREFIX`, `FD` and `RET` there capture, without regex, on every core; an SG_IO call's or
//! resumed half's kind (`call_kind`); the SG_IO struct split into its fields (`sgio_fields`)
//! and their values read (`sgio_decode`: `parsers/_sgio_struct.py` joins them to the line).
//!
//! A block with a byte that is not ASCII, or a NUL, is declined (None): the Python reader
//! reads it (its error or its replacement characters, its Unicode classes); so is a block with
//! a line whose parts would overlap (a struct text of negative length) or whose pid or
//! timestamp does not fit an int64 (the Python reader's own failure there is kept).
use memchr::memmem;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use super::{digits, is_space, part_count, scan_parts, strip_eol, uint, StrCol};
use std::sync::Arc;

use arrow_array::builder::StringViewBuilder;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, BooleanArray, StringArray};
use arrow_buffer::Buffer;

use crate::arrow::{options_of, Columns, Table};
use super::scsilog_pair::strings;

const RESUMED: &[u8] = b"<... ioctl resumed>";
const UNFINISHED: &[u8] = b" <unfinished ...>";
const SG_IO: &[u8] = b", SG_IO, ";

/// The columns of one part of a block.
#[derive(Default)]
struct Cols {
    t: ViewCol,
    pre: ViewCol,
    pid_b: ViewCol,
    pid_o: ViewCol,
    ts: ViewCol,
    body: ViewCol,
    fd: ViewCol,
    path: ViewCol,
    ret: ViewCol,
    errno: ViewCol,
    dur: ViewCol,
    arg: ViewCol,
    /// whether the line is an SG_IO call (`ioctl(` with `, SG_IO, ` in its body)
    sg: Vec<bool>,
    /// what an SG_IO call or ioctl resumed half is (`KINDS`), 0 for any other line
    kind: Vec<u8>,
    /// the timestamp as printed in ns (`clock_ns`), whether it is a time of day (-t/-tt), the
    /// -f pid's value (the cut takes no pid past 18 digits: every one is a number in range)
    raw_ns: Vec<Option<i64>>,
    of_day: Vec<bool>,
    pid: Vec<Option<i64>>,
    lines: usize,
}

/// The kinds of the lines `cut` classifies (`parsers/sgio.py:_classify` classifies the rest).
const KINDS: [Option<&str>; 6] = [None, Some("whole"), Some("unfinished"), Some("resumed"), Some("other"), Some("bad")];

/// An SG_IO call's kind (`sg`) or an ioctl resumed half's: whole (fd, return, a struct in
/// braces or an address or NULL), unfinished (fd, a struct opening, ` <unfinished ...>`), bad;
/// resumed (with its return) or other (without). Indexes of `KINDS`.
fn call_kind(sg: bool, fd: bool, ret: bool, arg: &[u8], body: &[u8]) -> u8 {
    let address = arg == b"NULL" || arg.strip_prefix(b"0x")
        .is_some_and(|h| !h.is_empty() && h.iter().all(|&b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    match (sg, ret) {
        (true, _) if fd && ret && ((arg.starts_with(b"{") && arg.ends_with(b"}")) || address) => 1,
        (true, _) if fd && body.ends_with(UNFINISHED) && arg.starts_with(b"{") => 2,
        (true, _) => 5,
        (false, true) => 3,
        (false, false) => 4,
    }
}

/// A column of optional strings of a block as views into it (where each starts in the part
/// cut, how long it is, whether it is there): nothing copied; `into_array` makes the Arrow
/// string views polars reads as its own strings, every column sharing the block's one buffer.
#[derive(Default)]
struct ViewCol {
    at: Vec<u32>,
    len: Vec<u32>,
    valid: Vec<bool>,
}

impl ViewCol {
    /// `s` (a slice of `base`, the part cut) or none.
    fn push(&mut self, base: &[u8], s: Option<&[u8]>) {
        let (at, len) = s.map_or((0, 0), |s| ((s.as_ptr() as usize - base.as_ptr() as usize) as u32, s.len() as u32));
        self.at.push(at);
        self.len.push(len);
        self.valid.push(s.is_some());
    }

    fn reserve(&mut self, n: usize) {
        self.at.reserve(n);
        self.len.reserve(n);
        self.valid.reserve(n);
    }

    /// `from`'s strings after these, its part starting `shift` bytes into the block.
    fn append(&mut self, from: ViewCol, shift: u32) {
        self.at.extend(from.at.into_iter().map(|a| a + shift));
        self.len.extend(from.len);
        self.valid.extend(from.valid);
    }

    /// The column as Arrow string views of `block` (ASCII, checked by the caller).
    fn into_py(self, py: Python, block: &Buffer) -> PyResult<Py<Columns>> {
        let mut b = StringViewBuilder::with_capacity(self.at.len());
        let id = b.append_block(block.clone());
        for k in 0..self.at.len() {
            if self.valid[k] {
                // SAFETY: each view is a range of the block that `push` took from it, and the
                // block is ASCII (valid UTF-8)
                unsafe { b.append_view_unchecked(id, self.at[k], self.len[k]) };
            } else {
                b.append_null();
            }
        }
        Py::new(py, Columns::new(vec![("value", Arc::new(b.finish()) as ArrayRef)])?)
    }
}

fn spaces(s: &[u8], i: usize) -> usize {
    s[i..].iter().take_while(|&&b| is_space(b)).count()
}

/// `\[pid\s+(\d+)\]\s+|(\d+)\s+` at `h[i..]`: (pid_b, pid_o, index after).
fn pid_at(h: &[u8], i: usize) -> (Option<&[u8]>, Option<&[u8]>, usize) {
    if h[i..].starts_with(b"[pid") {
        let j = i + 4;
        let w = spaces(h, j);
        let d = digits(&h[j + w..]);
        let k = j + w + d;
        if w > 0 && d > 0 && h.get(k) == Some(&b']') {
            let w2 = spaces(h, k + 1);
            if w2 > 0 {
                return (Some(&h[j + w..k]), None, k + 1 + w2);
            }
        }
    }
    let d = digits(&h[i..]);
    let w = if d > 0 { spaces(h, i + d) } else { 0 };
    if d > 0 && w > 0 {
        return (None, Some(&h[i..i + d]), i + d + w);
    }
    (None, None, i)
}

/// `(\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+` at `h[i..]`: (ts, index after).
fn ts_at(h: &[u8], i: usize) -> (Option<&[u8]>, usize) {
    let s = &h[i..];
    let dd = |k: usize| s.len() >= k + 2 && s[k].is_ascii_digit() && s[k + 1].is_ascii_digit();
    if dd(0) && s.get(2) == Some(&b':') && dd(3) && s.get(5) == Some(&b':') && dd(6) {
        let mut e = 8;
        if s.get(8) == Some(&b'.') && digits(&s[9..]) > 0 {
            e = 9 + digits(&s[9..]);
        }
        let w = spaces(s, e);
        if w > 0 {
            return (Some(&s[..e]), i + e + w);
        }
    }
    let d = digits(s);
    if d > 0 && s.get(d) == Some(&b'.') {
        let f = digits(&s[d + 1..]);
        let w = if f > 0 { spaces(s, d + 1 + f) } else { 0 };
        if f > 0 && w > 0 {
            return (Some(&s[..d + 1 + f]), i + d + 1 + f + w);
        }
    }
    (None, i)
}

/// `^ioctl\((\d+)(?:<([^<>]*)(?:<[^<>]*>)?>)?, SG_IO, ` on `s`: (fd, path).
fn fd_of(s: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let Some(rest) = s.strip_prefix(b"ioctl(") else { return (None, None) };
    let d = digits(rest);
    if d == 0 {
        return (None, None);
    }
    let fd = &rest[..d];
    let after = &rest[d..];
    if after.starts_with(SG_IO) {
        return (Some(fd), None);
    }
    if after.first() != Some(&b'<') {
        return (None, None);
    }
    let p = after[1..].iter().take_while(|&&b| b != b'<' && b != b'>').count();
    let path = &after[1..1 + p];
    let mut k = 1 + p;
    if after.get(k) == Some(&b'<') {
        let q = after[k + 1..].iter().take_while(|&&b| b != b'<' && b != b'>').count();
        if after.get(k + 1 + q) != Some(&b'>') {
            return (None, None);
        }
        k += 1 + q + 1;
    }
    if after.get(k) == Some(&b'>') && after[k + 1..].starts_with(SG_IO) {
        return (Some(fd), Some(path));
    }
    (None, None)
}

/// The groups of RET when it matches `s` from its start to its end:
/// `\)\s+= (-?\d+|\?)(?: (E[A-Z0-9]+) \([^)]*\))?(?: <(\d+\.\d+)>)?$`: (ret, errno, dur).
fn ret_at(s: &[u8]) -> Option<(&[u8], Option<&[u8]>, Option<&[u8]>)> {
    let w = spaces(s, 1);
    if s.first() != Some(&b')') || w == 0 || !s[1 + w..].starts_with(b"= ") {
        return None;
    }
    let r = &s[1 + w + 2..];
    let n = if r.first() == Some(&b'?') {
        1
    } else {
        let sign = usize::from(r.first() == Some(&b'-'));
        let d = digits(&r[sign..]);
        if d == 0 {
            return None;
        }
        sign + d
    };
    let (ret, rest) = r.split_at(n);
    if let Some((errno, after)) = errno_at(rest) {
        if let Some(dur) = dur_to_end(after) {
            return Some((ret, Some(errno), dur));
        }
    }
    dur_to_end(rest).map(|dur| (ret, None, dur))
}

/// ` (E[A-Z0-9]+) \([^)]*\)` at the start of `s`: (errno, what follows).
fn errno_at(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let e = s.strip_prefix(b" E")?;
    let n = e.iter().take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit()).count();
    if n == 0 || !e[n..].starts_with(b" (") {
        return None;
    }
    let close = memchr::memchr(b')', &e[n + 2..])?;
    Some((&s[1..2 + n], &e[n + 2 + close + 1..]))
}

/// `(?: <(\d+\.\d+)>)?$` on `s`: Some(dur) when it matches all of `s`.
fn dur_to_end(s: &[u8]) -> Option<Option<&[u8]>> {
    if s.is_empty() {
        return Some(None);
    }
    let d = s.strip_prefix(b" <")?.strip_suffix(b">")?;
    let w = digits(d);
    (w > 0 && d.get(w) == Some(&b'.') && digits(&d[w + 1..]) == d.len() - w - 1 && d.len() > w + 1).then_some(Some(d))
}

/// RET's leftmost match in the last 200 bytes of `body`: (retpart length, ret, errno, dur).
fn ret_of(body: &[u8]) -> Option<(usize, &[u8], Option<&[u8]>, Option<&[u8]>)> {
    let tail = &body[body.len().saturating_sub(200)..];
    memchr::memchr_iter(b')', tail).find_map(|p| ret_at(&tail[p..]).map(|(r, e, d)| (tail.len() - p, r, e, d)))
}

/// Cut one line into its columns; None: the block goes to the Python reader.
fn cut(base: &[u8], line: &[u8], c: &mut Cols, sg_io: &memmem::Finder) -> Option<()> {
    let t = strip_eol(line);
    let h = &t[..t.len().min(64)];
    let lead = spaces(h, 0);
    let (pid_b, pid_o, i) = pid_at(h, lead);
    let (ts, i) = ts_at(h, i);
    for d in [pid_b, pid_o].into_iter().flatten() {
        if d.len() > 18 {
            return None;        // the reader's strict cast to int64 may fail: its own error
        }
    }
    if let Some(ts) = ts {
        if ts.len() > 18 + 10 || ts.iter().position(|&b| b == b'.').unwrap_or(ts.len()) > 18 {
            return None;
        }
    }
    let mut end = t.len();
    while end > i && is_space(t[end - 1]) {
        end -= 1;
    }
    let body = &t[i..end.max(i)];
    c.t.push(base, Some(t));
    c.pre.push(base, Some(&t[..i]));
    c.pid_b.push(base, pid_b);
    c.pid_o.push(base, pid_o);
    c.ts.push(base, ts);
    c.body.push(base, Some(body));
    let at = if body.starts_with(b"ioctl(") { sg_io.find(body) } else { None };
    c.sg.push(at.is_some());
    c.raw_ns.push(ts.and_then(clock_ns));
    c.of_day.push(ts.is_some_and(|t| t.contains(&b':')));
    c.pid.push(pid_b.or(pid_o).and_then(|d| super::dec(d)));
    let resumed = body.starts_with(RESUMED);
    if at.is_none() && !resumed {
        c.kind.push(0);
        for col in [&mut c.fd, &mut c.path, &mut c.ret, &mut c.errno, &mut c.dur, &mut c.arg] {
            col.push(base, None);
        }
        return Some(());
    }
    let (fd, path) = fd_of(&body[..body.len().min(300)]);
    let ret = ret_of(body);
    let begin = at.map_or(RESUMED.len(), |a| a + SG_IO.len());
    let trim = match ret {
        Some((n, ..)) => n,
        None if body.ends_with(UNFINISHED) => UNFINISHED.len(),
        None => 0,
    };
    let finish = body.len().checked_sub(trim)?;
    if finish < begin {
        return None;
    }
    c.fd.push(base, fd);
    c.path.push(base, path);
    c.ret.push(base, ret.map(|r| r.1));
    c.errno.push(base, ret.and_then(|r| r.2));
    c.dur.push(base, ret.and_then(|r| r.3));
    c.arg.push(base, Some(&body[begin..finish]));
    c.kind.push(call_kind(at.is_some(), fd.is_some(), ret.is_some(), &body[begin..finish], body));
    Some(())
}

fn cut_part(buf: &[u8]) -> Option<Cols> {
    let sg_io = memmem::Finder::new(SG_IO);
    let mut c = Cols::default();
    let lines = memchr::memchr_iter(b'\n', buf).count() + 1;
    for col in c.columns() {
        col.reserve(lines);
    }
    for line in super::lines(buf) {
        cut(buf, line, &mut c, &sg_io)?;
        c.lines += 1;
    }
    Some(c)
}

impl Cols {
    fn columns(&mut self) -> [&mut ViewCol; 12] {
        [&mut self.t, &mut self.pre, &mut self.pid_b, &mut self.pid_o, &mut self.ts, &mut self.body, &mut self.fd,
         &mut self.path, &mut self.ret, &mut self.errno, &mut self.dur, &mut self.arg]
    }
}

/// The columns of strace's lines in a block (`parts`: how many parts to cut it in, the
/// tests), or None: the block is the Python reader's (see the module's doc).
#[pyfunction]
#[pyo3(signature = (buf, parts=None))]
fn strace_block<'py>(py: Python<'py>, buf: PyReadonlyArray1<'py, u8>, parts: Option<usize>)
                     -> PyResult<Option<StraceLines>> {
    let data = buf.as_slice()?;
    let n = parts.unwrap_or_else(|| part_count(data.len()));
    let out = py.allow_threads(|| {
        if !data.is_ascii() || memchr::memchr(0, data).is_some() {
            return None;
        }
        let (cut, offsets) = scan_parts(data, n, cut_part);
        let mut all = Cols::default();
        for (part, at) in cut.into_iter().zip(offsets) {
            let mut p = part?;
            all.lines += p.lines;
            all.sg.append(&mut p.sg);
            all.kind.append(&mut p.kind);
            all.raw_ns.append(&mut p.raw_ns);
            all.of_day.append(&mut p.of_day);
            all.pid.append(&mut p.pid);
            for (to, from) in all.columns().into_iter().zip(p.columns()) {
                to.append(std::mem::take(from), at as u32);
            }
        }
        Some(all)
    });
    let Some(c) = out else { return Ok(None) };
    let b = Buffer::from_slice_ref(data);     // the block, once: every column's strings are views of it
    Ok(Some(StraceLines {
        lines: c.lines, sg: Py::new(py, Columns::new(vec![("value", Arc::new(BooleanArray::from(c.sg)) as ArrayRef)])?)?,
        raw_ns: Py::new(py, Columns::new(vec![("value", options_of::<Int64Type>(c.raw_ns.iter().copied()))])?)?,
        of_day: Py::new(py, Columns::new(vec![("value", Arc::new(BooleanArray::from(c.of_day.clone())) as ArrayRef)])?)?,
        pid: Py::new(py, Columns::new(vec![("value", options_of::<Int64Type>(c.pid.iter().copied()))])?)?,
        kind: Py::new(py, Columns::new(vec![("value", Arc::new(c.kind.iter().map(|&k| KINDS[k as usize])
            .collect::<StringArray>()) as ArrayRef)])?)?,
        t: c.t.into_py(py, &b)?, pre: c.pre.into_py(py, &b)?, pid_b: c.pid_b.into_py(py, &b)?,
        pid_o: c.pid_o.into_py(py, &b)?, ts: c.ts.into_py(py, &b)?, body: c.body.into_py(py, &b)?,
        fd: c.fd.into_py(py, &b)?, path: c.path.into_py(py, &b)?, ret: c.ret.into_py(py, &b)?,
        errno: c.errno.into_py(py, &b)?, dur: c.dur.into_py(py, &b)?, arg: c.arg.into_py(py, &b)?,
    }))
}

/// The lines of a block (`lines`) cut into the parts `_strace_lines.py`'s patterns capture,
/// one string column each (null where the part is absent).
#[pyclass(get_all)]
struct StraceLines {
    lines: usize,
    /// whether each line is an SG_IO call (bool, no nulls)
    sg: Py<Columns>,
    /// what each SG_IO call or ioctl resumed half is (`KINDS`), null for any other line
    kind: Py<Columns>,
    /// each line's timestamp in ns as printed (null: none, or not a time), whether it is a
    /// time of day (-t/-tt: midnights to count), its -f pid (null: none)
    raw_ns: Py<Columns>,
    of_day: Py<Columns>,
    pid: Py<Columns>,
    t: Py<Columns>,
    pre: Py<Columns>,
    pid_b: Py<Columns>,
    pid_o: Py<Columns>,
    ts: Py<Columns>,
    body: Py<Columns>,
    fd: Py<Columns>,
    path: Py<Columns>,
    ret: Py<Columns>,
    errno: Py<Columns>,
    dur: Py<Columns>,
    arg: Py<Columns>,
}

/// The fields of the SG_IO struct that are read (`parsers/_sgio_struct.py:FIELDS`: sg v3,
/// then sg v4), in that order.
const FIELDS: [&str; 18] = ["dxfer_direction", "cmdp", "dxfer_len", "status", "host_status", "sb_len_wr", "sbp",
                            "resid", "duration", "request", "din_xfer_len", "dout_xfer_len", "din_resid",
                            "dout_resid", "device_status", "transport_status", "response_len", "response"];

/// One struct text (`{name=value, ...}`: one '{' and one '}' taken off) split at ", " into
/// name=value pairs (strace prints buffers as \xNN escapes, so no value holds ", "): each
/// FIELDS entry's value where its name first comes (None: absent, or named without '=').
fn struct_fields<'a>(arg: &'a str, out: &mut [Option<Option<&'a str>>; 18]) {
    *out = [None; 18];
    let arg = arg.strip_prefix('{').unwrap_or(arg);
    let arg = arg.strip_suffix('}').unwrap_or(arg);
    for kv in arg.split(", ") {
        let (k, v) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        };
        if let Some(f) = FIELDS.iter().position(|&n| n == k) {
            out[f].get_or_insert(v);
        }
    }
}

/// The SG_IO struct texts of a table's `arg` column split into one string column per FIELDS
/// entry (null where the struct has no such field, or no value for it; a null `arg` has none).
#[pyfunction]
fn sgio_fields(py: Python, calls: Table) -> PyResult<Py<Columns>> {
    let args = strings(&calls, "arg")?;
    let cols = py.allow_threads(|| {
        let mut cols: Vec<StrCol> = FIELDS.iter().map(|_| StrCol::default()).collect();
        let mut found = [None; 18];
        for arg in &args {
            match arg {
                Some(a) => struct_fields(a, &mut found),
                None => found = [None; 18],
            }
            for (col, v) in cols.iter_mut().zip(found.iter()) {
                col.push(v.flatten().map(str::as_bytes));
            }
        }
        cols
    });
    let arrays = cols.into_iter().zip(FIELDS).map(|(c, name)| Ok((name, c.into_array()?))).collect::<PyResult<Vec<_>>>()?;
    Py::new(py, Columns::new(arrays)?)
}

/// The FIELDS read as numbers (`_sgio_struct.py` reads none of them itself any more), in the
/// order `sgio_decode` names the first that is not one.
const NUMBERS: [usize; 13] = [2, 3, 4, 5, 7, 8, 10, 11, 12, 13, 14, 15, 16];
const DIRECTIONS: [(&str, &str); 5] = [("SG_DXFER_NONE", "none"), ("SG_DXFER_TO_DEV", "out"),
                                       ("SG_DXFER_FROM_DEV", "in"), ("SG_DXFER_TO_FROM_DEV", "bidi"),
                                       ("SG_DXFER_UNKNOWN", "unknown")];

/// A number strace printed: `0x` hex (0 to 2^32-1) or decimal (-2^31 to 2^32-1), with the
/// white space around the digits the reader always allowed; None otherwise (every field of
/// sg_io_hdr and sg_io_v4 read here fits 32 bits).
fn field_number(v: &str) -> Option<i64> {
    match v.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h.trim(), 16).ok().filter(|n| (0..=u32::MAX as i64).contains(n)),
        None => v.trim().parse::<i64>().ok().filter(|n| (-(1i64 << 31)..=u32::MAX as i64).contains(n)),
    }
}

/// A buffer strace printed as "\xNN..." as its hex digits (a truncated one, `"..."...`, keeps
/// its prefix: every '\\', 'x', '"' and '.' taken out); NULL or an address: None.
fn buffer_hex(v: Option<&str>) -> Option<String> {
    v.filter(|v| v.starts_with('"')).map(|v| v.chars().filter(|c| !matches!(c, '\\' | 'x' | '"' | '.')).collect())
}

/// The `k`th byte of a sense buffer's hex digits, read as the two characters there (fewer at
/// its end: what they read as); None when they are no hex number.
fn sense_byte(hex: &str, k: usize) -> Option<i64> {
    let two: String = hex.chars().skip(2 * k).take(2).collect();
    i64::from_str_radix(&two, 16).ok()
}

/// What one SG_IO struct text decodes to (`sgio_decode`'s columns).
#[derive(Default)]
struct Decoded {
    cdb: Option<Vec<u8>>,
    cdb_why: Option<&'static str>,
    field_why: Option<String>,
    scsi_status: Option<i64>,
    host: Option<i64>,
    bytes: Option<i64>,
    data_bytes: Option<i64>,
    direction: &'static str,
    driver_ns: Option<i64>,
    sense_key: Option<i64>,
    asc: Option<i64>,
    ascq: Option<i64>,
}

fn decode_struct(arg: Option<&str>) -> Decoded {
    let mut f = [None; 18];
    if let Some(a) = arg {
        struct_fields(a, &mut f);
    }
    let text = |k: usize| f[k].flatten();
    let mut num = [None; 18];
    for k in NUMBERS {
        num[k] = text(k).and_then(field_number);
    }
    let v4 = arg.is_some_and(|a| a.starts_with("{guard='Q'"));
    let (din, dout) = (num[10], num[11]);
    let mut d = Decoded::default();
    let cdb_hex = buffer_hex(text(if v4 { 9 } else { 1 }));
    if let Some(h) = &cdb_hex {
        let b = h.as_bytes();
        if b.len() % 2 == 0 && b.iter().all(u8::is_ascii_hexdigit) {
            d.cdb = Some(b.chunks(2).map(|p| super::hex_byte(p[0], p[1]).unwrap_or(0)).collect());
        } else {
            d.cdb_why = Some("CDB bytes are not \\xNN escapes");
        }
    }
    d.field_why = if text(8).is_some() && num[8].is_some_and(|n| n < 0) {
        Some("duration is negative".into())
    } else if text(2).is_some() && num[2].is_some_and(|n| n < 0) {
        Some("dxfer_len is negative".into())
    } else if matches!((num[7], num[2]), (Some(r), Some(x)) if r > x) {
        Some("resid is larger than dxfer_len".into())
    } else {
        NUMBERS.iter().find(|&&k| text(k).is_some() && num[k].is_none())
            .map(|&k| format!("{} is not a number in range", FIELDS[k]))
    };
    let resid = |n: Option<i64>, r: Option<i64>| Some(n? - r?.max(0));
    let (status, host, sense_len, sense) = if v4 { (14, 15, 16, 17) } else { (3, 4, 5, 6) };
    d.scsi_status = num[status];
    d.host = num[host];
    if v4 {
        d.bytes = din.zip(dout).map(|(i, o)| i + o);
        d.data_bytes = resid(din, num[12]).zip(resid(dout, num[13])).map(|(i, o)| i + o);
        let more = |n: Option<i64>| n.is_some_and(|n| n > 0);
        d.direction = match (more(din), more(dout)) {
            (true, true) => "bidi",
            (true, false) => "in",
            (false, true) => "out",
            (false, false) => "none",
        };
    } else {
        d.bytes = num[2];
        d.data_bytes = resid(num[2], num[7]);
        d.direction = text(0).and_then(|t| DIRECTIONS.iter().find(|(k, _)| *k == t)).map_or("unknown", |(_, v)| v);
    }
    d.data_bytes = d.data_bytes.map(|n| n.max(0));
    d.driver_ns = num[8].map(|ms| ms * 1_000_000);
    if let Some(s) = num[sense_len].filter(|&n| n > 0).and_then(|_| buffer_hex(text(sense))) {
        let fixed = matches!(s.get(..2), Some("70" | "71" | "f0" | "f1"));
        let (key, asc, ascq) = if fixed { (2, 12, 13) } else { (1, 2, 3) };
        d.sense_key = sense_byte(&s, key).map(|b| b & 0x0F);
        d.asc = sense_byte(&s, asc);
        d.ascq = sense_byte(&s, ascq);
    }
    d
}

/// `decode_struct` of each text, in order, the texts cut in one run a core.
fn decode_all(args: &[Option<&str>]) -> Vec<Decoded> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = args.len().div_ceil(cores.max(1)).max(4096);
    std::thread::scope(|s| {
        let handles: Vec<_> = args.chunks(run).skip(1)
            .map(|c| s.spawn(move || c.iter().map(|a| decode_struct(*a)).collect::<Vec<_>>()))
            .collect();
        let mut rows: Vec<Decoded> = args.chunks(run).next().unwrap_or(&[]).iter().map(|a| decode_struct(*a)).collect();
        for h in handles {
            rows.extend(h.join().expect("sgio decode thread panicked"));
        }
        rows
    })
}

/// The SG_IO struct texts of a table's `arg` column (sg v3 `interface_id='S'`, sg v4
/// `guard='Q'`) decoded: `cdb` (bytes), `scsi_status`, `host` (host or transport status),
/// `bytes` requested, `data_bytes` moved, `direction`, `driver_ns` (the driver's duration),
/// the sense `sense_key` (its 4 bits), `asc` and `ascq` (when sense bytes were written), null
/// where the struct lacks them; `cdb_why` and `field_why`: why the struct does not decode (a
/// CDB that is no \xNN bytes; a number out of its field's range, a negative duration or
/// length, a resid above dxfer_len), null where it does.
#[pyfunction]
fn sgio_decode(py: Python, calls: Table) -> PyResult<Py<Columns>> {
    let args = strings(&calls, "arg")?;
    let rows = py.allow_threads(|| decode_all(&args));
    let mut cdb = arrow_array::builder::BinaryBuilder::with_capacity(rows.len(), rows.len() * 16);
    let (mut direction, mut cdb_why, mut field_why) = (StrCol::default(), StrCol::default(), StrCol::default());
    for r in &rows {
        cdb.append_option(r.cdb.as_deref());
        direction.push(Some(r.direction.as_bytes()));
        cdb_why.push(r.cdb_why.map(str::as_bytes));
        field_why.push(r.field_why.as_deref().map(str::as_bytes));
    }
    let ints = |f: fn(&Decoded) -> Option<i64>| options_of::<Int64Type>(rows.iter().map(f));
    Py::new(py, Columns::new(vec![
        ("cdb", Arc::new(cdb.finish()) as ArrayRef), ("scsi_status", ints(|r| r.scsi_status)),
        ("host", ints(|r| r.host)), ("bytes", ints(|r| r.bytes)), ("data_bytes", ints(|r| r.data_bytes)),
        ("direction", direction.into_array()?), ("driver_ns", ints(|r| r.driver_ns)),
        ("sense_key", ints(|r| r.sense_key)), ("asc", ints(|r| r.asc)), ("ascq", ints(|r| r.ascq)),
        ("cdb_why", cdb_why.into_array()?), ("field_why", field_why.into_array()?),
    ])?)
}

/// The last -ttt second whose nanoseconds fit an int64.
const MAX_EPOCH_S: u64 = (i64::MAX as u64) / 1_000_000_000 - 1;

/// Up to 9 digits of a fraction as nanoseconds (cut to 9, zeros after); None if not digits.
fn nanos(frac: &[u8]) -> Option<i64> {
    if !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some((0..9).fold(0i64, |ns, k| ns * 10 + frac.get(k).map_or(0, |&b| i64::from(b - b'0'))))
}

/// A strace timestamp as printed, in ns: -t/-tt `HH:MM:SS[.FRAC]` (a time of day: hours
/// below 24, minutes below 60, seconds up to 60, a leap second) or -ttt `SECONDS[.FRAC]`
/// (seconds whose nanoseconds fit an int64); None when it is neither.
fn clock_ns(ts: &[u8]) -> Option<i64> {
    if ts.contains(&b':') {
        let two = |k: usize| -> Option<i64> {
            let d = ts.get(k..k + 2)?;
            d.iter().all(u8::is_ascii_digit).then(|| i64::from(d[0] - b'0') * 10 + i64::from(d[1] - b'0'))
        };
        let (h, m, s) = (two(0)?, two(3)?, two(6)?);
        if ts[2] != b':' || ts[5] != b':' || h >= 24 || m >= 60 || s > 60 {
            return None;
        }
        let frac = match &ts[8..] {
            [] => 0,
            [b'.', f @ ..] if !f.is_empty() => nanos(f)?,
            _ => return None,
        };
        return Some((h * 3600 + m * 60 + s) * 1_000_000_000 + frac);
    }
    let mut parts = ts.split(|&b| b == b'.');
    let whole = uint(parts.next()?).filter(|&w| w <= MAX_EPOCH_S)?;
    Some(whole as i64 * 1_000_000_000 + parts.next().map_or(Some(0), nanos)?)
}

/// The time of each strace line as printed (`stamps`: its `ts` column, the -t/-tt/-ttt
/// timestamp text, null where the line has none): `ns`, null where there is none or it is
/// not a time (`clock_ns`). Midnights are counted by the reader (`_strace_lines._wraps`).
#[pyfunction]
fn strace_clock(py: Python, stamps: Table) -> PyResult<Py<Columns>> {
    let ts = strings(&stamps, "ts")?;
    let ns = py.allow_threads(|| ts.iter().map(|t| t.and_then(|t| clock_ns(t.as_bytes()))).collect::<Vec<_>>());
    Py::new(py, Columns::new(vec![("ns", options_of::<Int64Type>(ns))])?)
}


/// What `strace_pairs` joined: `calls` (`start`: the row of each call's `<unfinished ...>`
/// half, `end`: the row of its `<... ioctl resumed>` half, null for a call that never
/// returned; `arg`: the struct text of both halves joined), `used`: how many resumed halves
/// the calls took, `held`: the rows of unfinished halves still waiting for theirs.
#[pyclass(get_all)]
struct StracePairs {
    calls: Py<Columns>,
    used: i64,
    held: Py<Columns>,
}

/// The -f halves of a block's lines joined (`parsers/_strace_lines.py:pairs`; `halves`: the
/// `<unfinished ...>` and `<... ioctl resumed>` lines of ioctls, `line_no`, `pid` (null: a
/// key of its own), `kind` (`sgio._classify`), `closes` (1: a resumed half), `arg`): each
/// resumed SG_IO half ends its pid's previous half when that is an unfinished SG_IO call; an
/// unfinished call whose pid's next half is another unfinished one, or that has none at the
/// end of the log (`final`), never returned; one with none yet is held.
#[pyfunction]
fn strace_pairs(py: Python, halves: Table, r#final: bool) -> PyResult<StracePairs> {
    let line = halves.i64s("line_no")?;
    let pid = halves.values_or_zero::<Int64Type>("pid")?;
    let pid_ok = halves.valid("pid")?;
    let kind = halves.bytes("kind")?;
    let closes = halves.values_or_zero::<Int64Type>("closes")?;
    let args = strings(&halves, "arg")?;
    let n = line.len();
    let key = |i: usize| (pid_ok.as_ref().map_or(true, |v| v[i]), pid[i]);
    let (pairs, held) = py.allow_threads(|| {
        let mut order: Vec<usize> = (0..n).collect();
        if !line.windows(2).all(|w| w[0] <= w[1]) {
            order.sort_by_key(|&i| line[i]);
        }
        let mut last: std::collections::HashMap<(bool, i64), usize> = std::collections::HashMap::new();
        let (mut prev, mut next) = (vec![None; n], vec![None; n]);
        for &i in &order {
            if let Some(p) = last.insert(key(i), i) {
                prev[i] = Some(p);
                next[p] = Some(i);
            }
        }
        let is = |i: usize, k: &[u8]| kind.get(i) == Some(k);
        let mut pairs: Vec<(usize, Option<usize>)> = Vec::new();
        let mut held = Vec::new();
        for &i in &order {
            if is(i, b"resumed") {
                if let Some(p) = prev[i].filter(|&p| is(p, b"unfinished")) {
                    pairs.push((p, Some(i)));
                }
            }
        }
        for &i in &order {
            if !is(i, b"unfinished") {
                continue;
            }
            match next[i] {
                None if !r#final => held.push(i as i64),
                None => pairs.push((i, None)),
                Some(x) if closes[x] == 0 => pairs.push((i, None)),
                Some(_) => {}
            }
        }
        (pairs, held)
    });
    let used = pairs.iter().filter(|p| p.1.is_some()).count() as i64;
    let mut arg = StrCol::default();
    let mut joined = Vec::new();
    for &(s, e) in &pairs {
        match (args[s], e.map(|e| args[e])) {
            (Some(a), None) => arg.push(Some(a.as_bytes())),
            (Some(a), Some(Some(b))) => {
                joined.clear();
                joined.extend_from_slice(a.as_bytes());
                joined.extend_from_slice(b.as_bytes());
                arg.push(Some(&joined));
            }
            _ => arg.push(None),
        }
    }
    let calls = Columns::new(vec![
        ("start", options_of::<Int64Type>(pairs.iter().map(|p| Some(p.0 as i64)))),
        ("end", options_of::<Int64Type>(pairs.iter().map(|p| p.1.map(|e| e as i64)))),
        ("arg", arg.into_array()?),
    ])?;
    Ok(StracePairs { calls: Py::new(py, calls)?, used,
                     held: Py::new(py, Columns::new(vec![("row", options_of::<Int64Type>(held.into_iter().map(Some)))])?)? })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(strace_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(strace_clock, m)?)?;
    m.add_function(wrap_pyfunction!(strace_block, m)?)?;
    m.add_function(wrap_pyfunction!(sgio_fields, m)?)?;
    m.add_function(wrap_pyfunction!(sgio_decode, m)?)?;
    Ok(())
}
