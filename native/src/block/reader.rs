//! The blktrace binary reader, streamed: `struct blk_io_trace` records read incrementally from
//! each file (per-CPU files, a piped stream, a `blkparse -d` dump), chained by their lengths
//! (a record cut by a read edge is carried over), merged over the files by time (a k-way merge
//! of files in time order: by time, then file, then place in the file), and handed out in
//! chunks of numpy columns. What is wrong where (bad, truncated, CPU-mismatched records),
//! sequence gaps, notify records and counts are kept per file and read once the stream ends.
//!
//! Rules kept from the one-shot reader (parsers/blktrace.py documents them):
//! - a position that is not a record is bad; the walk resynchronizes at the next magic, on
//!   4-aligned offsets while every record met is 4-aligned, byte by byte once one is not (a
//!   probe walk from the first bad record decides, so the result is the whole-file one);
//! - a data record whose time or sector has bit 63 set is bad; a record of another version
//!   is bad; strict mode raises the first error of the first file that has one, in the
//!   one-shot precedence (bad magic, truncated tail, bad time, bad version);
//! - a file whose records go back in time cannot be k-way merged: when that shows among the
//!   first `probe` records (1 M), the whole capture is read and sorted (piped streams); later,
//!   the records are merged as they come and counted (`disorder`).
use std::collections::BinaryHeap;
use std::cmp::Reverse;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use std::sync::Arc;

use arrow_array::types::{Int16Type, Int32Type, UInt32Type};
use arrow_array::{ArrayRef, BooleanArray};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::arrow::{ints, values_of, Columns};
use crate::bytes::{u16_at, u32_at, u64_at};

const HEADER: usize = 48;
const F_MAGIC: usize = 0;
const F_SEQ: usize = 4;
const F_TIME: usize = 8;
const F_SECTOR: usize = 16;
const F_BYTES: usize = 24;
const F_ACTION: usize = 28;
const F_PID: usize = 32;
const F_DEVICE: usize = 36;
const F_CPU: usize = 40;
const F_ERROR: usize = 44;
const F_PDU_LEN: usize = 46;
const MAGIC: u64 = 0x6561_7400;
const MAGIC_MASK: u64 = 0xFFFF_FF00;
const VERSION: u64 = 0x07;
// `struct blk_io_trace2` (protocol version 8, Linux 6.19): a 64-byte header, pid before a
// 64-bit action, 12 bytes of padding after pdu_len; the other fields where v7 has them
const VERSION2: u64 = 0x08;
const HEADER2: usize = 64;
const F2_PID: usize = 28;
const F2_ACTION: usize = 32;
const F2_DEVICE: usize = 40;
const F2_CPU: usize = 44;
const F2_ERROR: usize = 48;
const F2_PDU_LEN: usize = 50;
// the categories only v8 has (BLK_TC_ZONE_APPEND .. BLK_TC_WRITE_ZEROES << 16): action bits 32-38
pub const ZONE_OPS: usize = 7;

/// The header length and the offset of pdu_len of a record of `version` (v7's for others).
#[inline(always)]
fn header_of(version: u64) -> (usize, usize) {
    if version == VERSION2 { (HEADER2, F2_PDU_LEN) } else { (HEADER, F_PDU_LEN) }
}

/// The PDU rules, handed over by the Python declaration (parsers/blktrace.py `PduRules`,
/// read by name).
#[derive(Clone, Copy, FromPyObject)]
struct Pdu {
    remap: u64,
    split: u64,
    unplug: u64,
    timer_unplug: u64,
    zone_unplug: u64,
    notify: u64,
    cgroup: u64,
    cgroup_bytes: u64,
    remap_size: u64,
    dev_from: usize,
    sector_from: usize,
}

/// One data record, decoded.
#[derive(Clone, Copy, Default)]
struct Rec {
    time: i64,
    seq: i64,
    sector: i64,
    bytes: i64,
    pid: i64,
    action: u32,
    device: u32,
    cpu: i32,
    error: i16,
    pdu_dev: u32,
    pdu_sector: i64,
    pdu_int: i64,
    has_remap: bool,
    has_int: bool,
    pos: i64,
    action_hi: u32, // v8: the action's upper 32 bits (the zone and write-zeroes categories)
}

/// Decodes the record whose header starts at b[p] (its PDU follows it in `b`).
#[inline(always)]
fn decode(b: &[u8], p: usize, pos: u64, big: bool, v2: bool, r: &Pdu) -> Rec {
    match (big, v2) {
        (true, false) => decode_in::<true>(b, p, pos, r),
        (false, false) => decode_in::<false>(b, p, pos, r),
        (true, true) => decode_v2::<true>(b, p, pos, r),
        (false, true) => decode_v2::<false>(b, p, pos, r),
    }
}

/// A v8 record (`struct blk_io_trace2`): its fields into the v7 record's (the action's
/// lower 32 bits mean what v7's action means), the upper bits kept apart.
#[inline(always)]
fn decode_v2<const BIG: bool>(b: &[u8], p: usize, pos: u64, r: &Pdu) -> Rec {
    let h: &[u8; HEADER2] = b[p..p + HEADER2].try_into().unwrap();
    let action = u64_at(h, F2_ACTION, BIG);
    let rec = Rec {
        time: u64_at(h, F_TIME, BIG) as i64,
        seq: u32_at(h, F_SEQ, BIG) as i64,
        sector: u64_at(h, F_SECTOR, BIG) as i64,
        bytes: u32_at(h, F_BYTES, BIG) as i64,
        pid: u32_at(h, F2_PID, BIG) as i64,
        action: action as u32,
        action_hi: (action >> 32) as u32,
        device: u32_at(h, F2_DEVICE, BIG) as u32,
        cpu: u32_at(h, F2_CPU, BIG) as u32 as i32,
        error: u16_at(h, F2_ERROR, BIG) as u16 as i16,
        pos: pos as i64,
        ..Default::default()
    };
    with_pdu(rec, b, p + HEADER2, u16_at(h, F2_PDU_LEN, BIG), r)
}

#[inline(always)]
fn decode_in<const BIG: bool>(b: &[u8], p: usize, pos: u64, r: &Pdu) -> Rec {
    // the header as a fixed-size array: one bounds check, the field reads at constant offsets
    let h: &[u8; HEADER] = b[p..p + HEADER].try_into().unwrap();
    let action = u32_at(h, F_ACTION, BIG);
    let rec = Rec {
        time: u64_at(h, F_TIME, BIG) as i64,
        seq: u32_at(h, F_SEQ, BIG) as i64,
        sector: u64_at(h, F_SECTOR, BIG) as i64,
        bytes: u32_at(h, F_BYTES, BIG) as i64,
        pid: u32_at(h, F_PID, BIG) as i64,
        action: action as u32,
        device: u32_at(h, F_DEVICE, BIG) as u32,
        cpu: u32_at(h, F_CPU, BIG) as u32 as i32,
        error: u16_at(h, F_ERROR, BIG) as u16 as i16,
        pos: pos as i64,
        ..Default::default()
    };
    with_pdu(rec, b, p + HEADER, u16_at(h, F_PDU_LEN, BIG), r)
}

/// A record's remap, split or unplug PDU (at b[at..], `pdu_len` bytes) into its fields.
#[inline(always)]
fn with_pdu(mut rec: Rec, b: &[u8], at: usize, pdu_len: u64, r: &Pdu) -> Rec {
    let action = rec.action as u64;
    if pdu_len == 0 || action & r.notify != 0 {
        return rec;
    }
    let skip = if action & r.cgroup != 0 { r.cgroup_bytes } else { 0 };
    let payload = pdu_len as i64 - skip as i64;
    let code = action & 0xFFFF & !r.cgroup;
    let start = at + skip as usize;
    if code == r.remap && payload >= r.remap_size as i64 {
        rec.pdu_dev = u32_at(b, start + r.dev_from, true) as u32;
        rec.pdu_sector = u64_at(b, start + r.sector_from, true) as i64;
        rec.has_remap = true;
    } else if (code == r.split || code == r.unplug || code == r.timer_unplug || code == r.zone_unplug) && payload >= 8 {
        rec.pdu_int = u64_at(b, start, true) as i64;
        rec.has_int = true;
    }
    rec
}

enum Step {
    Rec(u64),
    Bad(u64),
    TruncShort(u64, usize),
    TruncPdu(u64, u64),
    Odd,
    End,
}

/// One file's record chain, read incrementally: the bytes of [base, base + filled) are in
/// `buf`; a record that runs past them is carried to the front and the rest read after it.
struct Walker {
    file: File,
    n: u64,
    buf: Vec<u8>,
    base: u64,
    filled: usize,
    read_size: usize,
    pos: u64,
    big: bool,
    aligned: bool,
    resync: bool,
    done: bool,
    seen_bad: bool,
    bytes_read: u64,
}

impl Walker {
    fn open(path: &str, big: bool, read_size: usize, start: u64) -> io::Result<Walker> {
        let mut file = File::open(path)?;
        let n = file.metadata()?.len();
        if start > 0 {
            file.seek(SeekFrom::Start(start))?;
        }
        Ok(Walker { file, n, buf: Vec::new(), base: start, filled: 0, read_size: read_size.max(HEADER), pos: start,
                    big, aligned: true, resync: false, done: false, seen_bad: false, bytes_read: 0 })
    }

    /// Makes [at, at + len) readable in `buf` (at >= base: the walk only moves forward);
    /// false when the file ends before.
    #[inline(always)]
    fn ensure(&mut self, at: u64, len: usize) -> io::Result<bool> {
        if at + len as u64 <= self.base + self.filled as u64 {
            return Ok(true);
        }
        self.refill(at, len)
    }

    #[inline(never)]
    fn refill(&mut self, at: u64, len: usize) -> io::Result<bool> {
        if at + len as u64 > self.n {
            return Ok(false);
        }
        let keep_from = ((at - self.base) as usize).min(self.filled);
        self.buf.copy_within(keep_from..self.filled, 0);
        self.filled -= keep_from;
        self.base += keep_from as u64;
        let need = (at - self.base) as usize + len;
        let want = need.max(self.read_size).min((self.n - self.base) as usize);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.filled < need {
            let got = self.file.read(&mut self.buf[self.filled..want])?;
            if got == 0 {
                // the file shrank while read: it ends here
                self.n = self.base + self.filled as u64;
                return Ok(false);
            }
            self.filled += got;
            self.bytes_read += got as u64;
        }
        Ok(true)
    }

    #[inline(always)]
    fn idx(&self, abs: u64) -> usize {
        (abs - self.base) as usize
    }

    #[inline(always)]
    fn u32(&self, abs: u64) -> u64 {
        u32_at(&self.buf, self.idx(abs), self.big)
    }

    /// The first offset after `pos` holding the magic bytes (4-aligned ones while `aligned`),
    /// or the end of the file.
    fn next_magic(&mut self, pos: u64) -> io::Result<u64> {
        let step = if self.aligned { 4 } else { 1 };
        let mut q = (pos / step + 1) * step;
        while q + HEADER as u64 <= self.n {
            self.ensure(q, HEADER)?;
            if self.u32(q) & MAGIC_MASK == MAGIC {
                return Ok(q);
            }
            q += step;
        }
        Ok(self.n)
    }

    #[inline(always)]
    fn next(&mut self) -> io::Result<Step> {
        if self.done {
            return Ok(Step::End);
        }
        if self.resync {
            self.resync = false;
            self.pos = self.next_magic(self.pos)?;
        }
        let pos = self.pos;
        if pos >= self.n {
            self.done = true;
            return Ok(Step::End);
        }
        if self.aligned && pos % 4 != 0 {
            if self.seen_bad {
                return Ok(Step::Odd);
            }
            self.aligned = false;
        }
        if self.n - pos < HEADER as u64 {
            self.done = true;
            return Ok(Step::TruncShort(pos, self.header_at(pos)?));
        }
        if !self.ensure(pos, HEADER)? {
            self.done = true;
            return Ok(Step::TruncShort(pos, HEADER));
        }
        let magic = self.u32(pos);
        if magic & MAGIC_MASK != MAGIC {
            self.resync = true;
            self.seen_bad = true;
            return Ok(Step::Bad(pos));
        }
        let (header, f_pdu_len) = header_of(magic & 0xFF);
        if self.n - pos < header as u64 || !self.ensure(pos, header)? {
            self.done = true;
            return Ok(Step::TruncShort(pos, header));
        }
        let pdu = u16_at(&self.buf, self.idx(pos) + f_pdu_len, self.big);
        let nxt = pos + header as u64 + pdu;
        if nxt > self.n || !self.ensure(pos, header + pdu as usize)? {
            self.done = true;
            return Ok(Step::TruncPdu(pos, pdu));
        }
        self.pos = nxt;
        Ok(Step::Rec(pos))
    }

    /// The header length the record starting at `pos` needs, by its version (v7's when the
    /// bytes left do not hold a magic).
    fn header_at(&mut self, pos: u64) -> io::Result<usize> {
        if self.n - pos < 4 || !self.ensure(pos, 4)? {
            return Ok(HEADER);
        }
        let magic = self.u32(pos);
        Ok(if magic & MAGIC_MASK == MAGIC { header_of(magic & 0xFF).0 } else { HEADER })
    }

    /// Reads the whole file into `buf` (sorting mode).
    fn load_all(&mut self) -> io::Result<()> {
        let n = self.n;
        self.ensure(self.base, (n - self.base) as usize).map(|_| ())
    }
}

fn bad_magic(magic: u64) -> String {
    format!("bad magic 0x{:08x} (expected 0x{:08x}): not a blk_io_trace record", magic, MAGIC | VERSION)
}

fn truncated_short(left: u64, header: usize) -> String {
    format!("truncated record: {} bytes left, a record needs {}", left, header)
}

fn truncated_pdu(pdu: u64) -> String {
    format!("truncated record: its {}-byte PDU runs past the end", pdu)
}

const BAD_TIME: &str = "time or sector beyond int64 (a damaged record)";

fn bad_version(version: u64) -> String {
    format!("unsupported blktrace version {} (this reader knows {} and {})", version, VERSION, VERSION2)
}

/// The byte order of a file from its first word (None: not blktrace).
fn byte_order(head: &[u8]) -> Option<bool> {
    if head.len() < 4 {
        return None;
    }
    for big in [false, true] {
        if u32_at(head, 0, big) & MAGIC_MASK == MAGIC {
            return Some(big);
        }
    }
    None
}

/// What is wrong at the start of a file whose first word is not a magic (None: empty file).
fn start_problem(head: &[u8], len: u64) -> Option<String> {
    if len == 0 {
        return None;
    }
    if head.len() < 4 {
        return Some(format!("{} bytes: too short for a blk_io_trace record", len));
    }
    Some(bad_magic(u32_at(head, 0, false)))
}

fn read_head(path: &str) -> io::Result<(Vec<u8>, u64)> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut head = Vec::with_capacity(4);
    (&mut f).take(4).read_to_end(&mut head)?;
    Ok((head, len))
}

/// A strict-mode error: (kind: "bad" or "truncated", offset, message).
type Fault = (&'static str, u64, String);

/// The error the one-shot reader raises for a file, if any: its first bad record, else its
/// truncated tail, else its first data record with a bad time, else its first record of
/// another version.
fn first_fault(path: &str) -> io::Result<Option<Fault>> {
    let (head, len) = read_head(path)?;
    let big = match byte_order(&head) {
        Some(big) => big,
        None => return Ok(start_problem(&head, len).map(|why| ("bad", 0, why))),
    };
    let mut w = Walker::open(path, big, 1 << 20, 0)?;
    w.aligned = false;
    let (mut trunc, mut bad_time, mut version) = (None, None, None);
    loop {
        match w.next()? {
            Step::Rec(pos) => {
                let p = w.idx(pos);
                let b = &w.buf;
                let ver = u32_at(b, p + F_MAGIC, big) & 0xFF;
                let f_action = if ver == VERSION2 { F2_ACTION } else { F_ACTION };
                let data = (ver == VERSION || ver == VERSION2) && u32_at(b, p + f_action, big) & (1 << 26) == 0;
                if ver != VERSION && ver != VERSION2 {
                    // its header length is unknown: what follows cannot be chained
                    version = Some(("bad", pos, bad_version(ver)));
                    break;
                }
                if data && bad_time.is_none()
                    && ((u64_at(b, p + F_TIME, big) as i64) < 0 || (u64_at(b, p + F_SECTOR, big) as i64) < 0)
                {
                    bad_time = Some(("bad", pos, BAD_TIME.to_string()));
                }
            }
            Step::Bad(pos) => return Ok(Some(("bad", pos, bad_magic(w.u32(pos))))),
            Step::TruncShort(pos, need) => trunc = Some(("truncated", pos, truncated_short(w.n - pos, need))),
            Step::TruncPdu(pos, pdu) => trunc = Some(("truncated", pos, truncated_pdu(pdu))),
            Step::Odd | Step::End => break,
        }
    }
    Ok(trunc.or(bad_time).or(version))
}

/// Whether the aligned walk from a bad record at `pos` ever meets a record at an odd offset.
fn odd_ahead(path: &str, big: bool, read_size: usize, pos: u64) -> io::Result<bool> {
    let mut w = Walker::open(path, big, read_size, pos)?;
    w.resync = true;
    w.seen_bad = true;
    loop {
        match w.next()? {
            Step::Odd => return Ok(true),
            Step::End | Step::TruncShort(..) | Step::TruncPdu(..) => return Ok(false),
            Step::Rec(_) | Step::Bad(_) => {}
        }
    }
}

struct Notify {
    action: u64,
    pid: u64,
    time: u64,
    device: u64,
    payload: Vec<u8>,
}

/// One file: its walk, its current head record (the merge's), and what it found.
struct Lane {
    file: usize,
    path: String,
    walker: Walker,
    file_cpu: i64,
    strict: bool,
    read_size: usize,
    head: Option<Rec>,
    last_time: i64,
    probed: bool,
    faulted: bool,
    bad: Vec<(u64, String)>,
    bad_time: Vec<u64>,
    bad_version: Vec<(u64, String)>,
    truncated: Option<(u64, String)>,
    wrong: u64,
    first_wrong: i64,
    wrong_cpu: u64,
    seqs: Vec<(u64, i64, i64)>, // (cpu, last sequence, lost)
    notify: Vec<Notify>,
    records: u64,
    disorder: u64,
    versions: [u64; 2],         // records of version 7, 8
    zone_ops: [u64; ZONE_OPS],  // v8 data records per category bit 32 + k of the action
}

impl Lane {
    fn new(file: usize, path: &str, big: bool, file_cpu: i64, strict: bool, read_size: usize) -> io::Result<Lane> {
        Ok(Lane { file, path: path.to_string(), walker: Walker::open(path, big, read_size, 0)?, file_cpu, strict,
                  read_size, head: None, last_time: i64::MIN, probed: false, faulted: false, bad: Vec::new(),
                  bad_time: Vec::new(), bad_version: Vec::new(), truncated: None, wrong: 0, first_wrong: -1,
                  wrong_cpu: 0, seqs: Vec::new(), notify: Vec::new(), records: 0, disorder: 0,
                  versions: [0; 2], zone_ops: [0; ZONE_OPS] })
    }

    /// The next kept data record of the file, decoded (or None at its end, or at an error in
    /// strict mode: `faulted`), counting and noting what it passes.
    #[inline(always)]
    fn next_data(&mut self, rules: &Pdu) -> io::Result<Option<Rec>> {
        loop {
            match self.walker.next()? {
                Step::Rec(pos) => {
                    let big = self.walker.big;
                    let p = self.walker.idx(pos);
                    let b = &self.walker.buf;
                    let version = u32_at(b, p + F_MAGIC, big) & 0xFF;
                    if version != VERSION && version != VERSION2 {
                        self.bad_version.push((pos, bad_version(version)));
                        if self.strict {
                            self.faulted = true;
                            return Ok(None);
                        }
                        continue;
                    }
                    let v2 = version == VERSION2;
                    let (header, f_pdu_len) = header_of(version);
                    let rec = decode(b, p, pos, big, v2, rules);
                    self.versions[v2 as usize] += 1;
                    if self.file_cpu >= 0 && rec.cpu as u32 as i64 != self.file_cpu {
                        if self.wrong == 0 {
                            self.first_wrong = pos as i64;
                            self.wrong_cpu = rec.cpu as u32 as u64;
                        }
                        self.wrong += 1;
                    }
                    if rec.action as u64 & rules.notify != 0 {
                        self.records += 1;
                        let pdu_len = u16_at(b, p + f_pdu_len, big);
                        if pdu_len > 0 {
                            let skip = if rec.action as u64 & rules.cgroup != 0 { rules.cgroup_bytes } else { 0 };
                            let start = p + header + skip as usize;
                            let len = pdu_len.saturating_sub(skip) as usize;
                            let end = (start + len).min(p + header + pdu_len as usize);
                            let payload = if start < end { b[start..end].to_vec() } else { Vec::new() };
                            self.notify.push(Notify { action: rec.action as u64, pid: rec.pid as u64,
                                                      time: rec.time as u64, device: rec.device as u64, payload });
                        }
                        continue;
                    }
                    if rec.time < 0 || rec.sector < 0 {
                        self.bad_time.push(pos);
                        if self.strict {
                            self.faulted = true;
                            return Ok(None);
                        }
                        continue;
                    }
                    self.records += 1;
                    if rec.action_hi != 0 {     // v8's zone operations (v7 records have none)
                        for (k, n) in self.zone_ops.iter_mut().enumerate() {
                            *n += (rec.action_hi >> k & 1) as u64;
                        }
                    }
                    self.sequence(rec.cpu as u32 as u64, rec.seq);
                    return Ok(Some(rec));
                }
                Step::Bad(pos) => {
                    let magic = self.walker.u32(pos);
                    self.bad.push((pos, bad_magic(magic)));
                    if self.strict {
                        self.faulted = true;
                        return Ok(None);
                    }
                    if !self.probed {
                        self.probed = true;
                        if self.walker.aligned && odd_ahead(&self.path, self.walker.big, self.read_size, pos)? {
                            self.walker.aligned = false;
                        }
                    }
                }
                Step::TruncShort(pos, need) => {
                    self.truncated = Some((pos, truncated_short(self.walker.n - pos, need)));
                    self.faulted = self.strict;
                    return Ok(None);
                }
                Step::TruncPdu(pos, pdu) => {
                    self.truncated = Some((pos, truncated_pdu(pdu)));
                    self.faulted = self.strict;
                    return Ok(None);
                }
                Step::Odd | Step::End => return Ok(None),
            }
        }
    }

    /// Sequence numbers of one CPU's data records, in file order: a jump is records lost.
    #[inline]
    fn sequence(&mut self, cpu: u64, seq: i64) {
        for s in self.seqs.iter_mut() {
            if s.0 == cpu {
                let step = seq - s.1;
                if step > 1 {
                    s.2 += step - 1;
                }
                s.1 = seq;
                return;
            }
        }
        self.seqs.push((cpu, seq, 0));
    }

    /// Moves to the next kept data record: the lane's head.
    #[inline(always)]
    fn advance(&mut self, rules: &Pdu) -> io::Result<()> {
        self.head = match self.next_data(rules)? {
            Some(rec) => {
                if rec.time < self.last_time {
                    self.disorder += 1;
                }
                self.last_time = rec.time;
                Some(rec)
            }
            None => None,
        };
        Ok(())
    }
}

/// The columns of one chunk.
#[derive(Default)]
struct Out {
    raw: bool,
    t: Vec<i64>,
    action: Vec<u32>,
    device: Vec<u32>,
    sector: Vec<i64>,
    bytes: Vec<i64>,
    pid: Vec<i64>,
    pdu_dev: Vec<u32>,
    pdu_sector: Vec<i64>,
    time_abs: Vec<i64>,
    seq: Vec<i64>,
    cpu: Vec<i32>,
    error: Vec<i16>,
    pdu_int: Vec<i64>,
    has_remap: Vec<bool>,
    has_int: Vec<bool>,
    file: Vec<i16>,
    position: Vec<i64>,
    action_hi: Vec<u32>,
}

impl Out {
    fn new(raw: bool, cap: usize) -> Out {
        let mut o = Out { raw, ..Default::default() };
        o.t.reserve_exact(cap);
        o.action.reserve_exact(cap);
        o.device.reserve_exact(cap);
        o.sector.reserve_exact(cap);
        o.bytes.reserve_exact(cap);
        o.pid.reserve_exact(cap);
        o.pdu_dev.reserve_exact(cap);
        o.pdu_sector.reserve_exact(cap);
        o.error.reserve_exact(cap);
        if raw {
            o.time_abs.reserve_exact(cap);
            o.seq.reserve_exact(cap);
            o.cpu.reserve_exact(cap);
            o.pdu_int.reserve_exact(cap);
            o.has_remap.reserve_exact(cap);
            o.has_int.reserve_exact(cap);
            o.file.reserve_exact(cap);
            o.position.reserve_exact(cap);
            o.action_hi.reserve_exact(cap);
        }
        o
    }

    #[inline(always)]
    fn push(&mut self, r: &Rec, file: usize, origin: i64) {
        self.t.push(r.time - origin);
        self.action.push(r.action);
        self.device.push(r.device);
        self.sector.push(r.sector);
        self.bytes.push(r.bytes);
        self.pid.push(r.pid);
        self.pdu_dev.push(if r.has_remap { r.pdu_dev } else { 0 });
        self.pdu_sector.push(if r.has_remap { r.pdu_sector } else { 0 });
        self.error.push(r.error);
        if self.raw {
            self.time_abs.push(r.time);
            self.seq.push(r.seq);
            self.cpu.push(r.cpu);
            self.pdu_int.push(r.pdu_int);
            self.has_remap.push(r.has_remap);
            self.has_int.push(r.has_int);
            self.file.push(file as i16);
            self.position.push(r.pos);
            self.action_hi.push(r.action_hi);
        }
    }

    fn len(&self) -> usize {
        self.t.len()
    }

    /// The columns as a record batch: block.MACHINE_COLUMNS, then RAW_EVENTS' fields when raw.
    fn into_columns(self) -> PyResult<Columns> {
        let bools = |v: Vec<bool>| -> ArrayRef { Arc::new(BooleanArray::from(v)) };
        let mut cols: Vec<(&str, ArrayRef)> = vec![
            ("t_ns", ints(self.t)),
            ("action", values_of::<UInt32Type>(self.action)),
            ("device", values_of::<UInt32Type>(self.device)),
            ("sector", ints(self.sector)),
            ("bytes", ints(self.bytes)),
            ("pid", ints(self.pid)),
            ("pdu_dev", values_of::<UInt32Type>(self.pdu_dev)),
            ("pdu_sector", ints(self.pdu_sector)),
            ("error", values_of::<Int16Type>(self.error)),
        ];
        if self.raw {
            cols.extend([
                ("time_abs", ints(self.time_abs)),
                ("seq", ints(self.seq)),
                ("cpu", values_of::<Int32Type>(self.cpu)),
                ("pdu_int", ints(self.pdu_int)),
                ("has_remap", bools(self.has_remap)),
                ("action_hi", values_of::<UInt32Type>(self.action_hi)),
                ("has_int", bools(self.has_int)),
                ("file", values_of::<Int16Type>(self.file)),
                ("position", ints(self.position)),
            ]);
        }
        Columns::new(cols)
    }
}

/// A file that could not be read as blktrace from its first word (lenient: one skipped record).
struct StartBad {
    file: usize,
    why: String,
}

/// The sorting mode: every kept data record's (time, lane, position), in processing order.
struct Sorted {
    keys: Vec<(i64, u32, u64)>,
    next: usize,
}

/// What a reader reads and how (parsers/blktrace.py `ReaderOptions`, read by name): paths:
/// the capture's files in order; cpus: each file's CPU from its name (-1: none); pdu: the PDU
/// rules; chunk: records per chunk (the first holds every record merged ahead, `probe` of
/// them or the whole capture); read_size: bytes per read; raw: also every field of
/// RAW_EVENTS; probe: records merged ahead before the first chunk (a file going back in time
/// among them: the capture is sorted, unless not `sort_disorder`: then the records are merged
/// as read, and `disorder` says how often a file went back, for the caller to put them in
/// order).
#[derive(FromPyObject)]
pub struct ReaderOptions {
    paths: Vec<String>,
    cpus: Vec<i64>,
    pdu: Pdu,
    strict: bool,
    raw: bool,
    chunk: usize,
    read_size: usize,
    probe: usize,
    sort_disorder: bool,
}

/// A strict-mode error (`BlktraceReader.fault`): the file (index), "bad" or "truncated", the
/// byte offset, why.
#[pyclass(get_all, module = "scsitrace._native.block")]
pub struct ReadFault {
    file: usize,
    kind: &'static str,
    offset: u64,
    why: String,
}

/// What one file held, once the stream ended (`BlktraceReader.files`): its records, the bad
/// ones [(offset, why)], a truncated tail (offset, why), records naming another CPU than the
/// file (count, first offset, that CPU), sequence gaps {cpu: lost}, notify records [(action,
/// pid, time, device, payload)], records going back in time, the byte order, records per
/// protocol version [v7, v8] and v8's zone operations per category.
#[pyclass(get_all, module = "scsitrace._native.block")]
pub struct FileReport {
    file: usize,
    records: u64,
    bad: Vec<(u64, String)>,
    truncated: Option<(u64, String)>,
    wrong_cpu: Option<(u64, i64, u64)>,
    gaps: Vec<(u64, i64)>,
    notify: Vec<(u64, u64, u64, u64, Py<PyBytes>)>,
    disorder: u64,
    big: bool,
    versions: Vec<u64>,
    zone_ops: Vec<u64>,
}

/// The streaming reader of one blktrace capture (see the module docstring).
#[pyclass(module = "scsitrace._native.block")]
pub struct BlktraceReader {
    paths: Vec<String>,
    cpus: Vec<i64>,
    strict: bool,
    raw: bool,
    chunk: usize,
    read_size: usize,
    rules: Pdu,
    lanes: Vec<Lane>,
    start_bad: Vec<StartBad>,
    bigs: Vec<Option<bool>>,
    origin: Option<i64>,
    fault: Option<(usize, Fault)>,
    started: bool,
    finished: bool,
    emitted: u64,
    sorted: Option<Sorted>,
    heap: Option<BinaryHeap<Reverse<(i64, usize)>>>,
    probe: usize,
    sort_disorder: bool,
    pending: Option<Out>,
}

const HEAP_FROM: usize = 9; // more files than this: a heap picks the next record

impl BlktraceReader {
    fn open_lanes(&mut self, read_size: usize) -> io::Result<()> {
        self.lanes.clear();
        for (i, big) in self.bigs.iter().enumerate() {
            if let Some(big) = big {
                self.lanes.push(Lane::new(i, &self.paths[i], *big, self.cpus[i], self.strict, read_size)?);
            }
        }
        Ok(())
    }

    /// The one-shot error (first file in order that has one), once any file met an error.
    fn resolve_fault(&mut self) -> io::Result<()> {
        for (i, path) in self.paths.iter().enumerate() {
            if let Some(f) = first_fault(path)? {
                self.fault = Some((i, f));
                return Ok(());
            }
        }
        // cannot happen (a lane saw an error); name the lane's own
        if let Some(l) = self.lanes.iter().find(|l| l.faulted) {
            let f = if let Some((pos, why)) = l.bad.first() { ("bad", *pos, why.clone()) }
                    else if let Some((pos, why)) = &l.truncated { ("truncated", *pos, why.clone()) }
                    else if let Some(pos) = l.bad_time.first() { ("bad", *pos, BAD_TIME.to_string()) }
                    else { let (pos, why) = l.bad_version[0].clone(); ("bad", pos, why) };
            self.fault = Some((l.file, f));
        }
        Ok(())
    }

    fn start(&mut self) -> io::Result<()> {
        self.started = true;
        if self.strict && !self.start_bad.is_empty() {
            return self.resolve_fault();
        }
        let read_size = self.read_size;
        self.open_lanes(read_size)?;
        for l in self.lanes.iter_mut() {
            l.advance(&self.rules)?;
        }
        if self.lanes.iter().any(|l| l.faulted) {
            return self.resolve_fault();
        }
        if self.lanes.len() >= HEAP_FROM {
            self.heap = Some(self.lanes.iter().enumerate().filter_map(|(k, l)| l.head.map(|h| Reverse((h.time, k)))).collect());
        }
        Ok(())
    }

    /// Sorting mode: every file read whole, every kept record's key sorted.
    fn start_sorted(&mut self) -> io::Result<()> {
        let sizes: Vec<usize> = self.paths.iter().map(|p| std::fs::metadata(p).map(|m| m.len() as usize).unwrap_or(0)).collect();
        let biggest = sizes.iter().copied().max().unwrap_or(0) + HEADER2;
        self.open_lanes(biggest)?;
        self.heap = None;
        let mut keys = Vec::new();
        for (k, l) in self.lanes.iter_mut().enumerate() {
            l.walker.load_all()?;
            while let Some(rec) = l.next_data(&self.rules)? {
                keys.push((rec.time, k as u32, rec.pos as u64));
            }
            if l.faulted {
                return self.resolve_fault();
            }
        }
        keys.sort_unstable();
        self.sorted = Some(Sorted { keys, next: 0 });
        Ok(())
    }

    /// At most how many records the files still hold (each at least a header): what an output
    /// chunk reserves room for, so that a small capture's columns are not sized for a full one.
    fn records_left(&self) -> usize {
        self.lanes.iter().map(|l| (l.walker.n.saturating_sub(l.walker.pos) as usize) / HEADER + 1).sum()
    }

    fn fill_merged(&mut self, out: &mut Out, upto: usize) -> io::Result<()> {
        let rules = self.rules;
        while out.len() < upto {
            // the lane holding the next record, and the first record of another lane (time,
            // lane) that must come after it: lane k is emitted from until it reaches that
            let (k, bound) = if let Some(heap) = self.heap.as_mut() {
                match heap.pop() {
                    Some(Reverse((_, k))) => (k, heap.peek().map(|Reverse(b)| *b)),
                    None => break,
                }
            } else {
                let (mut best, mut second): (Option<(i64, usize)>, Option<(i64, usize)>) = (None, None);
                for (k, l) in self.lanes.iter().enumerate() {
                    if let Some(h) = &l.head {
                        let key = (h.time, k);
                        if best.map_or(true, |b| key < b) {
                            second = best;
                            best = Some(key);
                        } else if second.map_or(true, |s| key < s) {
                            second = Some(key);
                        }
                    }
                }
                match best {
                    Some((_, k)) => (k, second),
                    None => break,
                }
            };
            let lane = &mut self.lanes[k];
            let file = lane.file;
            loop {
                let rec = match lane.head {
                    Some(rec) if bound.map_or(true, |b| (rec.time, k) < b) => rec,
                    _ => break,
                };
                let origin = *self.origin.get_or_insert(rec.time);
                out.push(&rec, file, origin);
                lane.advance(&rules)?;
                if lane.faulted {
                    return self.resolve_fault();
                }
                if out.len() >= upto {
                    break;
                }
            }
            if let (Some(heap), Some(h)) = (self.heap.as_mut(), &self.lanes[k].head) {
                heap.push(Reverse((h.time, k)));
            }
        }
        Ok(())
    }

    fn fill_sorted(&mut self, out: &mut Out, upto: usize) {
        let s = self.sorted.as_mut().unwrap();
        while out.len() < upto && s.next < s.keys.len() {
            let (_, k, pos) = s.keys[s.next];
            s.next += 1;
            let lane = &self.lanes[k as usize];
            let (b, p) = (&lane.walker.buf, lane.walker.idx(pos));
            let v2 = u32_at(b, p + F_MAGIC, lane.walker.big) & 0xFF == VERSION2;
            let rec = decode(b, p, pos, lane.walker.big, v2, &self.rules);
            let origin = *self.origin.get_or_insert(rec.time);
            out.push(&rec, lane.file, origin);
        }
    }

    /// The next chunk's columns (empty at the end or at a strict-mode error). Before the first
    /// chunk, `probe` records (at least a chunk) are merged ahead: a file going back in time
    /// among them turns the reader to sorting the capture.
    fn next_out(&mut self) -> io::Result<Out> {
        if self.finished || self.fault.is_some() {
            return Ok(Out::new(self.raw, 0));
        }
        if !self.started {
            self.start()?;
            if self.fault.is_some() {
                return Ok(Out::new(self.raw, 0));
            }
            let ahead = self.probe.max(self.chunk);
            let mut first = Out::new(self.raw, ahead.min(1 << 24).min(self.records_left()));
            self.fill_merged(&mut first, ahead)?;
            if self.fault.is_some() {
                return Ok(Out::new(self.raw, 0));
            }
            if self.sort_disorder && self.lanes.iter().any(|l| l.disorder > 0) {
                self.origin = None;
                self.start_sorted()?;
                if self.fault.is_some() {
                    return Ok(Out::new(self.raw, 0));
                }
            } else {
                self.pending = Some(first);
            }
        }
        // the records merged ahead go out whole, however many chunks they make (the caller
        // cuts them into views): copied into chunk-sized pieces they cost their size again
        let out = if let Some(buf) = self.pending.take() {
            buf
        } else {
            // sorting: the walk has passed every record already (its keys are sorted)
            let room = if self.sorted.is_some() { self.chunk } else { self.chunk.min(self.records_left()) };
            let mut out = Out::new(self.raw, room);
            if self.sorted.is_some() {
                self.fill_sorted(&mut out, self.chunk);
            } else {
                self.fill_merged(&mut out, self.chunk)?;
                if self.fault.is_some() {
                    return Ok(Out::new(self.raw, 0));
                }
            }
            out
        };
        self.emitted += out.len() as u64;
        if out.len() == 0 {
            self.finished = true;
        }
        Ok(out)
    }
}

#[pymethods]
impl BlktraceReader {
    /// The reader of `options` (parsers/blktrace.py `ReaderOptions`, read by name).
    #[new]
    fn new(options: ReaderOptions) -> PyResult<Self> {
        let ReaderOptions { paths, cpus, pdu: rules, strict, raw, chunk, read_size, probe, sort_disorder } = options;
        if paths.len() != cpus.len() || chunk == 0 {
            return Err(PyValueError::new_err("BlktraceReader: paths and cpus differ in length, or chunk is 0"));
        }
        let mut bigs = Vec::new();
        let mut start_bad = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            let (head, len) = read_head(path)?;
            let big = byte_order(&head);
            if big.is_none() {
                if let Some(why) = start_problem(&head, len) {
                    start_bad.push(StartBad { file: i, why });
                }
            }
            bigs.push(big);
        }
        Ok(BlktraceReader { paths, cpus, strict, raw, chunk, read_size, rules, lanes: Vec::new(), start_bad, bigs,
                            origin: None, fault: None, started: false, finished: false, emitted: 0, sorted: None,
                            heap: None, probe, sort_disorder, pending: None })
    }

    /// The next chunk: a record batch (MACHINE_COLUMNS, plus RAW_EVENTS' when raw), or None at
    /// the end (or at a strict-mode error: see `fault`). Releases the GIL.
    fn next_chunk(&mut self, py: Python<'_>) -> PyResult<Option<Columns>> {
        let out = py.allow_threads(|| self.next_out())?;
        if out.len() == 0 {
            return Ok(None);
        }
        Ok(Some(out.into_columns()?))
    }

    /// The strict-mode error met, if any (the one-shot reader's: see the module docstring).
    fn fault(&self) -> Option<ReadFault> {
        self.fault.as_ref().map(|(i, (kind, off, why))| ReadFault { file: *i, kind, offset: *off, why: why.clone() })
    }

    /// Whether any file is big-endian.
    fn any_big(&self) -> bool {
        self.bigs.iter().any(|b| *b == Some(true))
    }

    /// Records so far that were earlier than the record before them in their file.
    fn disorder(&self) -> u64 {
        self.lanes.iter().map(|l| l.disorder).sum()
    }

    /// Bytes read from the files so far.
    fn bytes_read(&self) -> u64 {
        self.lanes.iter().map(|l| l.walker.bytes_read).sum()
    }

    /// Time of the first record in processing order (the trace's origin), once read.
    fn origin(&self) -> Option<i64> {
        self.origin
    }

    /// What each file held, once the stream ended, in file order (files that could not be
    /// read as blktrace first).
    fn files(&self, py: Python<'_>) -> Vec<FileReport> {
        let mut out = Vec::new();
        for s in &self.start_bad {
            out.push(FileReport { file: s.file, records: 0, bad: vec![(0u64, s.why.clone())], truncated: None,
                                  wrong_cpu: None, gaps: Vec::new(), notify: Vec::new(), disorder: 0, big: false,
                                  versions: vec![0, 0], zone_ops: vec![0; ZONE_OPS] });
        }
        for l in &self.lanes {
            let mut bad = l.bad.clone();
            bad.extend(l.bad_time.iter().map(|p| (*p, BAD_TIME.to_string())));
            bad.extend(l.bad_version.iter().cloned());
            out.push(FileReport {
                file: l.file,
                records: l.records,
                bad,
                truncated: l.truncated.clone(),
                wrong_cpu: (l.wrong > 0).then_some((l.wrong, l.first_wrong, l.wrong_cpu)),
                gaps: l.seqs.iter().filter(|s| s.2 > 0).map(|&(cpu, _, lost)| (cpu, lost)).collect(),
                notify: l.notify.iter()
                    .map(|n| (n.action, n.pid, n.time, n.device, PyBytes::new_bound(py, &n.payload).unbind()))
                    .collect(),
                disorder: l.disorder,
                big: l.walker.big,
                versions: l.versions.to_vec(),
                zone_ops: l.zone_ops.to_vec(),
            });
        }
        out
    }
}

/// The header layout this reader reads ({field: offset}), checked against the declaration.
#[pyfunction]
fn blktrace_layout() -> Vec<(&'static str, usize)> {
    vec![("magic", F_MAGIC), ("sequence", F_SEQ), ("time", F_TIME), ("sector", F_SECTOR), ("bytes", F_BYTES),
         ("action", F_ACTION), ("pid", F_PID), ("device", F_DEVICE), ("cpu", F_CPU), ("error", F_ERROR),
         ("pdu_len", F_PDU_LEN)]
}

/// The v8 header layout (`struct blk_io_trace2`) this reader reads, and its length.
#[pyfunction]
fn blktrace2_layout() -> (Vec<(&'static str, usize)>, usize) {
    (vec![("magic", F_MAGIC), ("sequence", F_SEQ), ("time", F_TIME), ("sector", F_SECTOR), ("bytes", F_BYTES),
          ("pid", F2_PID), ("action", F2_ACTION), ("device", F2_DEVICE), ("cpu", F2_CPU), ("error", F2_ERROR),
          ("pdu_len", F2_PDU_LEN)], HEADER2)
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<ReadFault>()?;
    m.add_class::<FileReport>()?;
    m.add_class::<BlktraceReader>()?;
    m.add_function(wrap_pyfunction!(blktrace_layout, m)?)?;
    m.add_function(wrap_pyfunction!(blktrace2_layout, m)?)?;
    Ok(())
}
