//! QEMU's trace log lines (`PID@SEC.FRAC:EVENT DETAIL`, parsers/qemu_lsi.py `_split_lines`)
//! and their events' fields (parsers/_qemu_fields.py `EVENT_FIELDS`) read without regex, a
//! block's lines on every core. As for the other text scanners, a line is taken only when it
//! is certain to be a good record decoded exactly as the Python reader decodes it: printable
//! ASCII, the stamp's numbers in range, an event whose pattern matches with every number in
//! its field's range. Every other non-blank line (a bad one, a field out of range, a tab, a
//! CR, non-ASCII bytes, a last line without '\n') goes back by position to the Python reader,
//! which names bad lines and counts them.
use std::sync::Arc;

use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, BooleanArray, LargeListArray, UInt8Array};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field};
use memchr::memmem;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use super::{on_parts, part_count, seconds_ns, uint, Interner, StrCol};
use crate::arrow::{ints, ints_or_null, values_or_null, Columns, Table, NULL};

/// The numeric fields, in parsers/_qemu_fields.py `FIELD_NAMES` order (`tag_hex` and
/// `tag_dec` are one `tag`: an event carries one of them).
const FIELDS: [&str; N_FIELDS] = ["target", "lun", "tag", "ext_code", "ext_len", "len", "status", "msg_byte", "opcode",
                            "dir", "length", "lba", "sector", "sectors"];
const TARGET: usize = 0;
const LUN: usize = 1;
const TAG: usize = 2;
const EXT_CODE: usize = 3;
const EXT_LEN: usize = 4;
const LEN: usize = 5;
const STATUS: usize = 6;
const MSG_BYTE: usize = 7;
const OPCODE: usize = 8;
const DIR: usize = 9;
const LENGTH: usize = 10;
const LBA: usize = 11;
const SECTOR: usize = 12;
const SECTORS: usize = 13;
const N_FIELDS: usize = 14;

const U32: u64 = u32::MAX as u64;
/// An opcode, a status, a message byte, an extended message's code and length
/// (parsers/_qemu_fields.py `RANGES`).
const BYTE: u64 = 0xFF;
const I64: u64 = i64::MAX as u64;

/// One event's decoded fields.
#[derive(Default)]
struct Decoded<'a> {
    value: [Option<i64>; N_FIELDS],
    atn: bool,
    compare: Option<&'a [u8]>,
}

/// The run of digits `s` starts with (at least one), and the bytes after it. A regex's `\d+`
/// is greedy and every literal after one here begins with a non-digit, so the whole run is
/// the only way it matches.
fn digits_at(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    (n > 0).then(|| s.split_at(n))
}

/// The run of hex digits `s` starts with (at least one), and the bytes after it.
fn hex_digits_at(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    (n > 0).then(|| s.split_at(n))
}

/// Matched digits as a number in [0, hi] (None: out of range, the Python reader's bad field).
fn dec(d: &[u8], hi: u64) -> Option<i64> {
    uint(d).filter(|&v| v <= hi).map(|v| v as i64)
}

/// Matched hex digits as a number in [0, hi].
fn hex(d: &[u8], hi: u64) -> Option<i64> {
    if d.len() > 16 {
        return None;
    }
    let v = super::hex_u64(d);
    (v <= hi).then_some(v as i64)
}

/// `^PREFIX` then the rest.
fn after<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    s.strip_prefix(prefix)
}

/// An unanchored pattern starting with the literal `prefix`: `read` at each place the prefix
/// occurs, leftmost first (a regex's leftmost match: every match starts with the prefix);
/// `read` says whether the pattern matches from there (the digits it matched) and the
/// first that does is the match, whatever its numbers are worth.
fn search<'a, T>(s: &'a [u8], prefix: &[u8], read: impl Fn(&'a [u8]) -> Option<T>) -> Option<T> {
    memmem::find_iter(s, prefix).find_map(|at| read(&s[at + prefix.len()..]))
}

/// `LITERAL DIGITS` in turn; the digits matched and the bytes after them.
fn words<'a>(mut s: &'a [u8], literals: &[&[u8]]) -> Option<(Vec<&'a [u8]>, &'a [u8])> {
    let mut found = Vec::with_capacity(literals.len());
    for lit in literals {
        let (d, rest) = digits_at(after(s, lit)?)?;
        found.push(d);
        s = rest;
    }
    Some((found, s))
}

/// The fields of `event`'s `detail` (parsers/_qemu_fields.py `EVENT_FIELDS`); None when the
/// pattern does not match or a number is out of its field's range (the Python reader then
/// decides the line).
fn decode<'a>(event: &[u8], detail: &'a [u8]) -> Option<Decoded<'a>> {
    let mut d = Decoded::default();
    let v = &mut d.value;
    match event {
        b"lsi_execute_script_io_selected" => {
            let (t, rest) = digits_at(after(detail, b"Selected target ")?)?;
            v[TARGET] = Some(dec(t, U32)?);
            d.atn = rest.starts_with(b" ATN");
        }
        b"lsi_reselect" => v[TARGET] = Some(dec(digits_at(after(detail, b"Reselected target ")?)?.0, U32)?),
        b"lsi_do_msgout_select" => v[LUN] = Some(dec(digits_at(after(detail, b"Select LUN ")?)?.0, U32)?),
        b"lsi_do_msgout_simplequeue" | b"lsi_queue_command" => {
            v[TAG] = Some(hex(search(detail, b"tag=0x", |s| hex_digits_at(s).map(|x| x.0))?, U32)?);
        }
        b"lsi_do_msgout_extended" => {
            let (code, rest) = hex_digits_at(after(detail, b"Extended message 0x")?)?;
            let (n, rest) = digits_at(after(rest, b" (len ")?)?;
            after(rest, b")")?;
            v[EXT_CODE] = Some(hex(code, BYTE)?);
            v[EXT_LEN] = Some(dec(n, BYTE)?);
        }
        b"lsi_do_command" | b"lsi_do_dma" => {
            v[LEN] = Some(dec(search(detail, b"len=", |s| digits_at(s).map(|x| x.0))?, U32)?);
        }
        b"lsi_do_status" => {
            let (n, status) = search(detail, b"len=", |s| {
                let (n, rest) = digits_at(s)?;
                Some((n, digits_at(after(rest, b" status=")?)?.0))
            })?;
            v[LEN] = Some(dec(n, U32)?);
            v[STATUS] = Some(dec(status, BYTE)?);
        }
        b"lsi_command_complete" => {
            v[STATUS] = Some(dec(search(detail, b"status=", |s| digits_at(s).map(|x| x.0))?, BYTE)?);
        }
        b"lsi_add_msg_byte" => v[MSG_BYTE] = Some(hex(hex_digits_at(after(detail, b"MSG IN 0x")?)?.0, BYTE)?),
        b"lsi_execute_script_tc_compp" => {
            let s = after(detail, b"Compare phase ")?;
            let n = s.iter().take_while(|b| b.is_ascii_uppercase()).count();
            d.compare = Some(&s[..n]).filter(|c| !c.is_empty());
            d.compare?;
        }
        b"lsi_transfer_data" => {
            let (tag, n) = search(detail, b"tag=0x", |s| {
                let (tag, rest) = hex_digits_at(s)?;
                Some((tag, digits_at(after(rest, b" len=")?)?.0))
            })?;
            v[TAG] = Some(hex(tag, U32)?);
            v[LEN] = Some(dec(n, U32)?);
        }
        b"usb_msd_cmd_submit" | b"usb_msd_send_status" | b"usb_uas_command" | b"usb_uas_sense" => {
            v[TAG] = Some(hex(search(detail, b"tag 0x", |s| hex_digits_at(s).map(|x| x.0))?, U32)?);
        }
        b"scsi_req_parsed" | b"scsi_req_parsed_lba" => {
            let lba = event.len() > b"scsi_req_parsed".len();
            let literals: &[&[u8]] = if lba {
                &[b"target ", b" lun ", b" tag ", b" command ", b" lba "]
            } else {
                &[b"target ", b" lun ", b" tag ", b" command ", b" dir ", b" length "]
            };
            // every match starts with "target ": `words` from each place it occurs
            let found = memmem::find_iter(detail, b"target ").find_map(|at| words(&detail[at..], literals))?.0;
            for (k, f) in [TARGET, LUN, TAG, OPCODE].into_iter().enumerate() {
                v[f] = Some(dec(found[k], if f == OPCODE { BYTE } else { U32 })?);
            }
            if lba {
                v[LBA] = Some(dec(found[4], I64)?);
            } else {
                v[DIR] = Some(dec(found[4], U32)?);
                v[LENGTH] = Some(dec(found[5], U32)?);
            }
        }
        b"scsi_disk_dma_command_READ" | b"scsi_disk_dma_command_WRITE" => {
            let (sector, count) = search(detail, b"(sector ", |s| {
                let (sector, rest) = digits_at(s)?;
                let (count, rest) = digits_at(after(rest, b", count ")?)?;
                after(rest, b")")?;
                Some((sector, count))
            })?;
            v[SECTOR] = Some(dec(sector, I64)?);
            v[SECTORS] = Some(dec(count, U32)?);
        }
        _ => {}
    }
    Some(d)
}

/// A good record's stamp and event, or None (the Python reader decides the line).
fn record(line: &[u8]) -> Option<(i64, &[u8], &[u8])> {
    let colon = memchr::memchr(b':', line)?;
    let (stamp, body) = (&line[..colon], &line[colon + 1..]);
    let at = memchr::memchr(b'@', stamp)?;
    let (pid, secs) = (&stamp[..at], &stamp[at + 1..]);
    if pid.len() > 10 || uint(pid).filter(|&p| p <= U32).is_none() {
        return None;
    }
    let dot = memchr::memchr(b'.', secs)?;
    let (sec, frac) = (&secs[..dot], &secs[dot + 1..]);
    if frac.is_empty() || frac.len() > 9 || !sec.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let t = seconds_ns(sec, frac)?;
    let (event, detail) = match memchr::memchr(b' ', body) {
        Some(sp) => (&body[..sp], &body[sp + 1..]),
        None => (body, &b""[..]),
    };
    if event.is_empty() || !event.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    Some((t, event, detail))
}

#[derive(Default)]
struct Part {
    line: Vec<i64>,
    t_ns: Vec<i64>,
    event: Vec<u32>,
    events: Interner,
    detail: Vec<(usize, usize)>,     // each record's detail: where it starts in the block and ends
    value: Vec<Vec<i64>>,
    ok: Vec<Vec<bool>>,
    atn: Vec<bool>,
    compare: StrCol,
    other_line: Vec<i64>,
    other_start: Vec<i64>,
    other_end: Vec<i64>,
}

/// The lines of one part (`first`: the index of its first line in the block; `offset`: its
/// first byte's offset in the block).
fn scan_part(part: &[u8], first: usize, offset: usize) -> Part {
    let mut p = Part { value: vec![Vec::new(); N_FIELDS], ok: vec![Vec::new(); N_FIELDS], ..Part::default() };
    let ends_inside = part.last().is_some_and(|&b| b != b'\n');
    let mut k = first as i64;
    let n_lines = super::line_count(part);
    for (start, line) in super::lines_at(part) {
        let last = k == (first + n_lines) as i64 - 1;
        if line.iter().all(|&b| b == b' ') {
            k += 1;                                     // blank: no record
            continue;
        }
        let printable = line.iter().all(|&b| (0x20..0x7F).contains(&b));
        let taken = if printable && !(last && ends_inside) {
            record(line).and_then(|(t, event, detail)| decode(event, detail).map(|d| (t, event, detail, d)))
        } else {
            None
        };
        match taken {
            Some((t, event, detail, d)) => {
                p.line.push(k);
                p.t_ns.push(t);
                p.event.push(p.events.code(event));
                // (an empty detail may be no slice of the line)
                let at = if detail.is_empty() { 0 } else { offset + start + (detail.as_ptr() as usize - line.as_ptr() as usize) };
                p.detail.push((at, at + detail.len()));
                for (f, v) in d.value.iter().enumerate() {
                    p.value[f].push(v.unwrap_or(0));
                    p.ok[f].push(v.is_some());
                }
                p.atn.push(d.atn);
                p.compare.push(d.compare);
            }
            None => {
                p.other_line.push(k);
                p.other_start.push((offset + start) as i64);
                p.other_end.push((offset + start + line.len()) as i64);
            }
        }
        k += 1;
    }
    p
}

/// The parts' lines in order (event codes renumbered into the first part's vocabulary).
fn merged(parts: Vec<Part>) -> Part {
    let mut parts = parts.into_iter();
    let mut m = parts.next().unwrap_or_default();
    for p in parts {
        let codes: Vec<u32> = p.events.names.iter().map(|n| m.events.code(n)).collect();
        m.line.extend(p.line);
        m.t_ns.extend(p.t_ns);
        m.event.extend(p.event.iter().map(|&c| codes[c as usize]));
        m.detail.extend(p.detail);
        for (f, (v, ok)) in p.value.into_iter().zip(p.ok).enumerate() {
            m.value[f].extend(v);
            m.ok[f].extend(ok);
        }
        m.atn.extend(p.atn);
        m.compare.append(p.compare);
        m.other_line.extend(p.other_line);
        m.other_start.extend(p.other_start);
        m.other_end.extend(p.other_end);
    }
    m
}

/// What `qemu_block` read of a block of `lines` lines: the records taken (`events`: `line`,
/// the line's index in the block, `t_abs_ns`, `event` a code of `names`, the numeric fields
/// null where the event has none, `atn`; `detail` and `compare` as strings) and the other
/// non-blank lines (`other`: `line`, `start`, `end`, byte offsets in the block) for the
/// Python reader.
#[pyclass(get_all)]
struct QemuScan {
    lines: usize,
    events: Py<Columns>,
    names: Vec<String>,
    detail: Py<Columns>,
    compare: Py<Columns>,
    other: Py<Columns>,
    /// `QemuStream.scan`: the events were summed (`events` left empty), `taken` of them, the
    /// last on line `last_line` of the block.
    fed: bool,
    taken: usize,
    last_line: Option<i64>,
}

/// The QEMU trace lines of a block of whole lines (its last line may lack its '\n').
/// `parts`: how many parts to cut the block in (the tests; default: one a core).
#[pyfunction]
#[pyo3(signature = (buf, parts=None))]
fn qemu_block(py: Python, buf: PyReadonlyArray1<u8>, parts: Option<usize>) -> PyResult<QemuScan> {
    let data = buf.as_slice()?;
    let n = parts.unwrap_or_else(|| part_count(data.len()));
    let m = py.allow_threads(|| {
        // a part is a slice of the block: its offset is where it starts in it
        merged(on_parts(data, n, |part, first| scan_part(part, first, part.as_ptr() as usize - data.as_ptr() as usize)))
    });
    scan_result(py, m, data)
}

/// The records' details as strings (only a block handed back copies them).
fn details(at: &[(usize, usize)], data: &[u8]) -> StrCol {
    let mut col = StrCol::default();
    for &(start, end) in at {
        col.push(Some(&data[start..end]));
    }
    col
}

fn scan_result(py: Python, m: Part, data: &[u8]) -> PyResult<QemuScan> {
    let mut columns: Vec<(&str, ArrayRef)> = vec![("line", ints(m.line)), ("t_abs_ns", ints(m.t_ns)),
                                                  ("event", ints(m.event.iter().map(|&c| i64::from(c)).collect()))];
    let (mut value, mut ok) = (m.value, m.ok);
    value.resize(N_FIELDS, Vec::new());
    ok.resize(N_FIELDS, Vec::new());
    for (f, (v, ok)) in value.into_iter().zip(ok).enumerate() {
        columns.push((FIELDS[f], values_or_null::<Int64Type>(v, ok)));
    }
    columns.push(("atn", Arc::new(BooleanArray::from(m.atn)) as ArrayRef));
    Ok(QemuScan {
        lines: super::line_count(data),
        events: Py::new(py, Columns::new(columns)?)?,
        names: m.events.strings(),
        detail: details(&m.detail, data).into_py(py)?,
        compare: m.compare.into_py(py)?,
        other: Py::new(py, Columns::new(vec![("line", ints(m.other_line)), ("start", ints(m.other_start)),
                                             ("end", ints(m.other_end))])?)?,
        fed: false,
        taken: 0,
        last_line: None,
    })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(qemu_block, m)?)?;
    m.add_function(wrap_pyfunction!(qemu_runs, m)?)?;
    m.add_class::<QemuStream>()?;
    m.add("QEMU_RUN_EVENTS", RUN_EVENTS.to_vec())?;
    m.add("QEMU_PHASES", PHASES.to_vec())?;
    Ok(())
}

// ---------------------------------------------------------------- steps -> phase runs

/// The events `qemu_runs` tells apart (parsers/_qemu_steps.py codes them by this list; any
/// other `lsi_do_msgout_*` event is `MSGOUT_OTHER`, any other event null).
const RUN_EVENTS: [&str; 11] = ["lsi_execute_script_io_selected", "lsi_reselect", "lsi_do_dma", "lsi_do_status",
                                "lsi_do_command", "lsi_add_msg_byte", "lsi_do_msgout_select",
                                "lsi_do_msgout_simplequeue", "lsi_do_msgout_extended", "lsi_do_msgout_other",
                                "lsi_do_msgout_fixed"];
const SELECTED: i64 = 0;
const RESELECT: i64 = 1;
const DMA: i64 = 2;
const DO_STATUS: i64 = 3;
const DO_COMMAND: i64 = 4;
const MSG_BYTE_EV: i64 = 5;
const MO_SELECT: i64 = 6;
const MO_QUEUE: i64 = 7;
const MO_EXTENDED: i64 = 8;
const MSGOUT_OTHER: i64 = 9;
const MSGOUT_FIXED: i64 = 10;

/// The phases, coded by this list (parsers/_qemu_steps.py).
const PHASES: [&str; 10] = ["DATA OUT", "DATA IN", "COMMAND", "STATUS", "RESERVED", "MESSAGE OUT", "MESSAGE IN",
                            "SELECTION", "RESELECTION", "BUS FREE"];
const P_DATA_OUT: i64 = 0;
const P_DATA_IN: i64 = 1;
const P_COMMAND: i64 = 2;
const P_STATUS: i64 = 3;
const P_MSG_OUT: i64 = 5;
const P_MSG_IN: i64 = 6;

/// The longest CDB rebuilt here; a longer `len` goes to the Python rebuild.
const MAX_CDB: i64 = 4096;

/// One phase run being summed.
struct Run {
    id: i64,
    phase: i64,
    start: i64,
    target: Option<Option<i64>>,
    atn: bool,
    dma: i64,
    status: Option<Option<i64>>,
    cmd_len: Option<Option<i64>>,
    opcode: Option<i64>,
    lba: Option<i64>,
    sectors: Option<i64>,
    msgout: Option<Vec<u8>>,
    msgin: Vec<u8>,
}

fn opt(v: i64) -> Option<i64> {
    (v != NULL).then_some(v)
}

fn byte(v: i64) -> Option<u8> {
    u8::try_from(v).ok()
}

/// parsers/_qemu_steps.py `build_cdb`: the CDB with opcode, LBA and transfer length, others 0.
fn build_cdb(length: Option<i64>, opcode: u8, lba: Option<i64>, blocks: Option<i64>) -> Option<Vec<u8>> {
    let n = match length.filter(|&l| l != 0) {
        Some(l) if !(1..=MAX_CDB).contains(&l) => return None,
        Some(l) => l as usize,
        None => match opcode >> 5 {
            1 | 2 => 10,
            4 => 16,
            5 => 12,
            _ => 6,
        },
    };
    let mut cdb = vec![0u8; n];
    cdb[0] = opcode;
    if let Some(lba) = lba {
        let (lba, b) = (lba as u64, blocks.map(|b| b as u64));
        match n {
            6 => {
                cdb[1..4].copy_from_slice(&((lba & 0x1F_FFFF) as u32).to_be_bytes()[1..]);
                if let Some(b) = b {
                    cdb[4] = b as u8;
                }
            }
            10 => {
                cdb[2..6].copy_from_slice(&(lba as u32).to_be_bytes());
                if let Some(b) = b {
                    cdb[7..9].copy_from_slice(&(b as u16).to_be_bytes());
                }
            }
            12 => {
                cdb[2..6].copy_from_slice(&(lba as u32).to_be_bytes());
                if let Some(b) = b {
                    cdb[6..10].copy_from_slice(&(b as u32).to_be_bytes());
                }
            }
            16 => {
                cdb[2..10].copy_from_slice(&lba.to_be_bytes());
                if let Some(b) = b {
                    cdb[10..14].copy_from_slice(&(b as u32).to_be_bytes());
                }
            }
            _ => {}
        }
    }
    Some(cdb)
}

/// The MESSAGE OUT bytes a msgout event stands for (`_qemu_steps._msgout_bytes`); None: a
/// value that is no byte (the Python rebuild decides).
fn msgout(ev: i64, lun: i64, tag: i64, ext_code: i64, ext_len: i64, fixed: i64) -> Option<Vec<u8>> {
    Some(match ev {
        MO_SELECT => vec![0x80 | (opt(lun).unwrap_or(0) & 0x07) as u8],
        MO_QUEUE => vec![0x20, (opt(tag).unwrap_or(0) & 0xFF) as u8],
        MO_EXTENDED if ext_code != NULL => {
            let n = byte(opt(ext_len).filter(|&n| n != 0).unwrap_or(1))?;
            let mut m = vec![0x01, n, byte(ext_code)?];
            m.resize(m.len() + n as usize - 1, 0);
            m
        }
        MSGOUT_FIXED => vec![byte(fixed)?],
        MSGOUT_OTHER => vec![],
        _ => vec![],
    })
}

/// The steps' columns `qemu_runs` reads, by name (parsers/_qemu_steps.py `runs_pass`).
struct Steps {
    run: Vec<i64>,
    phase: Vec<i64>,
    t_ns: Vec<i64>,
    ev: Vec<i64>,
    fixed: Vec<i64>,
    target: Vec<i64>,
    atn: Vec<i64>,
    len: Vec<i64>,
    status: Vec<i64>,
    lun: Vec<i64>,
    tag: Vec<i64>,
    ext_code: Vec<i64>,
    ext_len: Vec<i64>,
    opcode: Vec<i64>,
    lba: Vec<i64>,
    sectors: Vec<i64>,
    msg_byte: Vec<i64>,
}

impl Steps {
    fn of(t: &Table) -> PyResult<Steps> {
        Ok(Steps { run: t.i64s_or_null("run")?, phase: t.i64s_or_null("phase_code")?, t_ns: t.i64s_or_null("t_ns")?,
                   ev: t.i64s_or_null("ev")?, fixed: t.i64s_or_null("fixed")?, ..Steps::events(t)? })
    }

    /// The events' columns alone (`QemuStream` numbers the runs and codes the events itself).
    fn events(t: &Table) -> PyResult<Steps> {
        let col = |name: &str| t.i64s_or_null(name);
        Ok(Steps {
            run: Vec::new(), phase: Vec::new(), t_ns: Vec::new(), ev: Vec::new(), fixed: Vec::new(),
            target: col("target")?, atn: col("atn_code")?, len: col("len")?, status: col("status")?, lun: col("lun")?,
            tag: col("tag")?, ext_code: col("ext_code")?, ext_len: col("ext_len")?, opcode: col("opcode")?,
            lba: col("lba")?, sectors: col("sectors")?, msg_byte: col("msg_byte")?,
        })
    }

    /// The runs, in order; None where a value is no byte or a CDB too long (the Python
    /// rebuild then decides, as it always did).
    fn runs(&self) -> Option<Vec<Run>> {
        let mut sum = Summing::default();
        for i in 0..self.run.len() {
            sum.step(self, i, self.run[i], self.phase[i], self.t_ns[i])?;
        }
        Some(sum.runs)
    }
}

/// The runs summed step by step, in line order: the runs begun (the last one open) and the
/// MESSAGE IN bytes queued for the next MESSAGE IN run.
#[derive(Default)]
struct Summing {
    runs: Vec<Run>,
    queued: Vec<u8>,
}

impl Summing {
    /// Step `i` of `s`, in run `id` (NULL: before any phase) of `phase` at time `t`. None: a
    /// value that is no byte.
    fn step(&mut self, s: &Steps, i: usize, id: i64, phase: i64, t: i64) -> Option<()> {
        let ev = s.ev[i];
        if ev == MSG_BYTE_EV && s.msg_byte[i] != NULL {
            self.queued.push(byte(s.msg_byte[i])?);
        }
        if id == NULL {
            return Some(());
        }
        if self.runs.last().map_or(true, |r| r.id != id) {
            let msgin = if phase == P_MSG_IN { std::mem::take(&mut self.queued) } else { Vec::new() };
            self.runs.push(Run { id, phase, start: t, target: None, atn: false, dma: 0, status: None,
                                 cmd_len: None, opcode: None, lba: None, sectors: None, msgout: None, msgin });
        }
        let r = self.runs.last_mut()?;
        if (ev == SELECTED || ev == RESELECT) && r.target.is_none() {
            r.target = Some(opt(s.target[i]));
        }
        if ev == SELECTED && s.atn[i] == 1 {
            r.atn = true;
        }
        if ev == DMA {
            r.dma += opt(s.len[i]).unwrap_or(0);
        }
        if ev == DO_STATUS && r.status.is_none() {
            r.status = Some(opt(s.status[i]));
        }
        if r.phase == P_COMMAND {
            if ev == DO_COMMAND && r.cmd_len.is_none() {
                r.cmd_len = Some(opt(s.len[i]));
            }
            r.opcode = r.opcode.or(opt(s.opcode[i]));
            r.lba = r.lba.or(opt(s.lba[i]));
            r.sectors = r.sectors.or(opt(s.sectors[i]));
        }
        if r.phase == P_MSG_OUT && (MO_SELECT..=MSGOUT_FIXED).contains(&ev) {
            let m = msgout(ev, s.lun[i], s.tag[i], s.ext_code[i], s.ext_len[i], s.fixed[i])?;
            r.msgout.get_or_insert_with(Vec::new).extend(m);
        }
        Some(())
    }
}

/// A run's message, command or status bytes (`runs_frame`'s `info_bytes`; None: null); Err:
/// a value that is no byte or a CDB past MAX_CDB.
fn info_of(r: &Run) -> Result<Option<Vec<u8>>, ()> {
    let status = r.status.flatten();
    Ok(match r.phase {
        P_STATUS if status.is_some() => Some(vec![byte(status.unwrap_or(0)).ok_or(())?]),
        P_MSG_OUT => r.msgout.clone(),
        P_COMMAND => match r.opcode {
            Some(op) => Some(byte(op).and_then(|op| build_cdb(r.cmd_len.flatten(), op, r.lba, r.sectors)).ok_or(())?),
            None => None,
        },
        P_MSG_IN if !r.msgin.is_empty() => Some(r.msgin.clone()),
        _ => None,
    })
}

/// The columns of the runs (`qemu_runs`), in order.
#[derive(Default)]
struct RunCols {
    id: Vec<i64>,
    phase: Vec<i64>,
    start: Vec<i64>,
    target: Vec<i64>,
    atn: Vec<bool>,
    dma: Vec<i64>,
    status: Vec<i64>,
    end: Vec<i64>,
    n_info: Vec<i64>,
    data_bytes: Vec<i64>,
    stray: Vec<i64>,
    handshakes: Vec<i64>,
    info: Vec<u8>,
}

fn run_columns(runs: &[Run], end_ns: i64) -> Option<RunCols> {
    let mut c = RunCols::default();
    for (k, r) in runs.iter().enumerate() {
        let bytes = info_of(r).ok()?;
        let data = matches!(r.phase, P_DATA_IN | P_DATA_OUT);
        let count = bytes.as_ref().map(|b| b.len() as i64);
        let data_bytes = if data { r.dma } else { 0 };
        c.id.push(r.id);
        c.phase.push(r.phase);
        c.start.push(r.start);
        c.target.push(r.target.flatten().unwrap_or(NULL));
        c.atn.push(r.atn);
        c.dma.push(r.dma);
        c.status.push(r.status.flatten().unwrap_or(NULL));
        c.end.push(runs.get(k + 1).map_or(end_ns, |next| next.start));
        c.n_info.push(count.unwrap_or(NULL));
        c.data_bytes.push(data_bytes);
        c.stray.push(if data { 0 } else { r.dma });
        c.handshakes.push(data_bytes + count.unwrap_or(0));
        c.info.extend(bytes.unwrap_or_default());
    }
    Some(c)
}

/// The phase runs of a batch of steps (parsers/_qemu_steps.py `runs_frame`, in one pass):
/// per run its id, phase code, start and end (`end_ns` for the last), target, ATN, DMA
/// bytes, status, its message/command/status bytes (`info_bytes`, null: none), data and
/// stray bytes and handshakes. None: a value that is no byte, or a CDB
/// length past MAX_CDB, in the batch (the Python rebuild decides, as it always did).
#[pyfunction]
fn qemu_runs(py: Python, steps: Table, end_ns: i64) -> PyResult<Option<Columns>> {
    let steps = Steps::of(&steps)?;
    let Some(c) = py.allow_threads(|| run_columns(&steps.runs()?, end_ns)) else { return Ok(None) };
    Ok(Some(runs_table(c)?))
}

fn runs_table(c: RunCols) -> PyResult<Columns> {
    let info = byte_lists(c.info, &c.n_info)?;
    Columns::new(vec![
        ("run", ints(c.id)), ("phase_code", ints(c.phase)), ("start_ns", ints(c.start)),
        ("target", ints_or_null(c.target)), ("atn", Arc::new(BooleanArray::from(c.atn)) as ArrayRef),
        ("dma_bytes", ints(c.dma)), ("status", ints_or_null(c.status)), ("end_ns", ints(c.end)),
        ("info_bytes", info), ("data_bytes", ints(c.data_bytes)),
        ("stray_dma_bytes", ints(c.stray)), ("handshakes", ints(c.handshakes))])
}

/// How `QemuStream` codes the events, by name (parsers/_qemu_steps.py `stream_rules`, from
/// its PHASE_OF_EVENT, PHASE_OF_COMPARE, MSGOUT_FIXED_BYTES and DEVICE_EVENTS): the run events
/// (`ev` code = index in RUN_EVENTS), the phase an event or a SCRIPTS compare reveals (a PHASES
/// code); and how runs become stretches (parsers/qemu_lsi.py `stretches`: the lines of each
/// phase, by PHASES code, the ATN line, the lines of an ARBITRATION, the initiator's ID).
#[derive(FromPyObject)]
struct StreamRules {
    phase_events: Vec<String>,
    phase_of_event: Vec<i64>,
    compare_event: String,
    compares: Vec<String>,
    phase_of_compare: Vec<i64>,
    fixed_events: Vec<String>,
    fixed_bytes: Vec<i64>,
    usb_command_events: Vec<String>,
    device_events: Vec<String>,
    msgout_prefix: String,
    lsi_prefix: String,
    lines_of_phase: Vec<i64>,
    atn_line: i64,
    arbitration_lines: i64,
    initiator: i64,
}

/// What an event name stands for in the stream.
#[derive(Clone, Copy)]
struct NameCode {
    ev: i64,
    fixed: i64,
    phase: i64,
    compare: bool,
    lsi: bool,
    usb_command: bool,
    device: bool,
}

impl StreamRules {
    fn code(&self, name: &[u8]) -> NameCode {
        let find = |names: &[String]| names.iter().position(|n| n.as_bytes() == name);
        let run_event = RUN_EVENTS.iter()
            .position(|n| n.as_bytes() == name && !n.ends_with("_other") && !n.ends_with("_fixed"));
        let fixed = find(&self.fixed_events);
        let ev = if fixed.is_some() {
            MSGOUT_FIXED
        } else if let Some(k) = run_event {
            k as i64
        } else if name.starts_with(self.msgout_prefix.as_bytes()) {
            MSGOUT_OTHER
        } else {
            NULL
        };
        NameCode { ev, fixed: fixed.map_or(NULL, |k| self.fixed_bytes[k]),
                   phase: find(&self.phase_events).map_or(NULL, |k| self.phase_of_event[k]),
                   compare: name == self.compare_event.as_bytes(), lsi: name.starts_with(self.lsi_prefix.as_bytes()),
                   usb_command: find(&self.usb_command_events).is_some(), device: find(&self.device_events).is_some() }
    }

    /// The phase a compare's operand reveals (NULL: none).
    fn compare_phase(&self, operand: Option<&[u8]>) -> i64 {
        operand.and_then(|c| self.compares.iter().position(|n| n.as_bytes() == c))
            .map_or(NULL, |k| self.phase_of_compare[k])
    }
}

const P_SELECTION: i64 = 7;
const P_RESELECTION: i64 = 8;

/// `1 << bit` as numpy shifts an int64 (0 past its width).
fn bit(b: i64) -> i64 {
    u32::try_from(b).ok().and_then(|b| 1i64.checked_shl(b)).unwrap_or(0)
}

/// One stretch: its first transition, lines, handshakes (a transition into it and two a
/// handshake), the first handshake's and the last transition's times, the last data-bus
/// value and the bytes its handshakes carry (a negative time or value: none).
struct Stretch<'a> {
    start: i64,
    lines: i64,
    handshakes: i64,
    first: i64,
    last: i64,
    db: i64,
    info: Option<&'a [u8]>,
}

/// Runs summed per stretch of constant phase lines (parsers/qemu_lsi.py `stretches`, its
/// reference; NULL: null).
#[derive(Default)]
struct StretchCols {
    start: Vec<i64>,
    lines: Vec<i64>,
    transitions: Vec<i64>,
    handshakes: Vec<i64>,
    first: Vec<i64>,
    last: Vec<i64>,
    db_last: Vec<i64>,
    n_info: Vec<i64>,
    info: Vec<u8>,
}

impl StretchCols {
    fn push(&mut self, s: Stretch) {
        let null_if_negative = |v: i64| if v < 0 { NULL } else { v };
        self.start.push(s.start);
        self.lines.push(s.lines);
        self.transitions.push(1 + 2 * s.handshakes);
        self.handshakes.push(s.handshakes);
        self.first.push(null_if_negative(s.first));
        self.last.push(s.last);
        self.db_last.push(null_if_negative(s.db));
        self.n_info.push(s.info.map_or(NULL, |b| b.len() as i64));
        self.info.extend_from_slice(s.info.unwrap_or_default());
    }

    /// The stretches of `c`'s runs: a (re)selection's ARBITRATION (the emulator does not
    /// arbitrate: zero length, the selecting device's ID bit on DB), then the run with its
    /// handshakes counted, the first one's and the last transition's times placed as
    /// `_chunk_transitions` places them.
    fn add(&mut self, r: &StreamRules, c: &RunCols) {
        let mut at = 0usize;
        for k in 0..c.id.len() {
            let info = (c.n_info[k] != NULL).then(|| &c.info[at..at + c.n_info[k] as usize]);
            at += info.map_or(0, |b| b.len());
            let (phase, start, end, target) = (c.phase[k], c.start[k], c.end[k], c.target[k]);
            let sel = phase == P_SELECTION || phase == P_RESELECTION;
            let has_target = target != NULL && target >= 0;
            let target_bit = if has_target { bit(target) } else { 0 };
            if sel {
                let arb_db = match (phase == P_RESELECTION, has_target) {
                    (true, true) => target_bit,
                    (true, false) => -1,
                    _ => bit(r.initiator),
                };
                self.push(Stretch { start, lines: r.arbitration_lines, handshakes: 0, first: -1, last: start, db: arb_db,
                                    info: None });
            }
            let lines = r.lines_of_phase[phase as usize] | if c.atn[k] { r.atn_line } else { 0 };
            let n = c.handshakes[k];
            let width = (end - start) as f64 / n.max(1) as f64;
            let (first, last) = if n > 0 {
                (start + (0.25 * width).floor() as i64, start + (((n - 1) as f64 + 0.75) * width).floor() as i64)
            } else {
                (-1, start)
            };
            let sel_db = if sel && has_target { bit(r.initiator) | target_bit } else { -1 };
            let db = info.and_then(|b| b.last()).map_or(sel_db, |&b| i64::from(b));
            self.push(Stretch { start, lines, handshakes: n, first, last, db, info });
        }
    }

    fn table(self) -> PyResult<Columns> {
        let info = byte_lists(self.info, &self.n_info)?;
        Columns::new(vec![
            ("start_ns", ints(self.start)), ("lines", ints(self.lines)), ("transitions", ints(self.transitions)),
            ("handshakes", ints(self.handshakes)), ("first_handshake_ns", ints_or_null(self.first)),
            ("last_ns", ints(self.last)), ("db_last", ints_or_null(self.db_last)), ("info_bytes", info)])
    }
}

/// Row `i` of a scanned string column (None: null).
fn string_at(c: &StrCol, i: usize) -> Option<&[u8]> {
    let start = if i == 0 { 0 } else { c.ends[i - 1] as usize };
    c.valid[i].then(|| &c.data[start..c.ends[i] as usize])
}

/// The columns of one batch of events the stream sums (the fields NULL where absent).
struct Batch<'a> {
    steps: Steps,
    t: &'a [i64],
    code: Vec<NameCode>,
    compare: &'a (dyn Fn(usize) -> Option<&'a [u8]> + Sync),
}

/// `_qemu_steps.Stream` in one pass: the steps (times going forward, the phase in force, the
/// runs numbered, as `steps_frame` gives them) summed into runs as `qemu_runs` sums them,
/// fed batches of decoded events in line order: `add` (`_qemu_scan.EVENTS` columns, `atn` as
/// `atn_code`), or `scan` (a block of lines, scanned as `qemu_block` scans it, summed at once
/// when `summed` and every non-blank line is taken and none is a device model's row
/// `Stream._keep_device_rows` keeps). Without `summed`, `add`
/// gives back the runs a batch completes (`qemu_runs`' columns, times absolute) and `finish`
/// the last; with it the runs are summed per stretch (`stretches`, taken after each call). A value
/// that is no byte or a CDB past MAX_CDB sets `failed` (the caller reads the trace the
/// Python way); the stream then takes nothing more.
#[pyclass(module = "scsitrace._native.text")]
struct QemuStream {
    rules: StreamRules,
    summed: bool,
    names: std::collections::HashMap<Vec<u8>, NameCode>,
    sum: Summing,
    phase: i64,
    runs: i64,
    stretched: StretchCols,
    devices: bool,
    #[pyo3(get)]
    failed: bool,
    #[pyo3(get)]
    t_min: Option<i64>,
    #[pyo3(get)]
    t_max: Option<i64>,
    #[pyo3(get)]
    events: i64,
    #[pyo3(get)]
    lsi_events: i64,
    #[pyo3(get)]
    clamped: i64,
    #[pyo3(get)]
    run_count: i64,
    #[pyo3(get)]
    stray_dma_bytes: i64,
}

impl QemuStream {
    fn code_of(&mut self, name: &[u8]) -> NameCode {
        if let Some(&c) = self.names.get(name) {
            return c;
        }
        let c = self.rules.code(name);
        self.names.insert(name.to_vec(), c);
        c
    }

    /// The steps of one batch summed; None: a value that is no byte.
    fn steps(&mut self, b: &mut Batch) -> Option<()> {
        let n = b.t.len();
        b.steps.ev = b.code.iter().map(|c| c.ev).collect();
        b.steps.fixed = b.code.iter().map(|c| c.fixed).collect();
        for i in 0..n {
            let code = b.code[i];
            self.lsi_events += i64::from(code.lsi);
            let raw = b.t[i];
            self.t_min = Some(self.t_min.map_or(raw, |m| m.min(raw)));
            let latest = self.t_max.map_or(raw, |m| m.max(raw));
            self.clamped += i64::from(raw < latest);
            self.t_max = Some(latest);
            let here = if code.compare { self.rules.compare_phase((b.compare)(i)) } else { code.phase };
            if here != NULL && here != self.phase {
                self.runs += 1;
            }
            if here != NULL {
                self.phase = here;
            }
            let id = if self.phase == NULL { NULL } else { self.runs };
            self.sum.step(&b.steps, i, id, self.phase, latest)?;
        }
        self.events += n as i64;
        Some(())
    }

    /// The runs before the open one (`keep`: 1; all of them at the end: 0), the last of them
    /// ending at `end` unless a run is left open: as runs (None: summed, or failed) or added
    /// to the stretches.
    fn completed(&mut self, keep: usize) -> Option<RunCols> {
        let done: Vec<Run> = self.sum.runs.drain(..self.sum.runs.len().saturating_sub(keep)).collect();
        let end = self.sum.runs.first().map_or(self.t_max.unwrap_or(0), |open| open.start);
        let Some(c) = run_columns(&done, end) else {
            self.failed = true;
            return None;
        };
        self.run_count += c.id.len() as i64;
        self.stray_dma_bytes += c.stray.iter().sum::<i64>();
        if !self.summed {
            return Some(c);
        }
        self.stretched.add(&self.rules, &c);
        None
    }

    fn batch_done(&mut self, ok: Option<()>) -> PyResult<Option<Columns>> {
        if ok.is_none() {
            self.failed = true;
            return Ok(None);
        }
        self.completed(1).map(runs_table).transpose()
    }

    /// A scanned part's events summed (every line taken, none a device model's).
    fn feed_part(&mut self, p: &mut Part, codes: &[NameCode]) -> Option<()> {
        let field = |p: &mut Part, f: usize| {
            let mut v = std::mem::take(&mut p.value[f]);
            for (x, &ok) in v.iter_mut().zip(&p.ok[f]) {
                if !ok {
                    *x = NULL;
                }
            }
            v
        };
        let steps = Steps {
            run: Vec::new(), phase: Vec::new(), t_ns: Vec::new(), ev: Vec::new(), fixed: Vec::new(),
            target: field(p, TARGET), atn: p.atn.iter().map(|&a| i64::from(a)).collect(), len: field(p, LEN),
            status: field(p, STATUS), lun: field(p, LUN), tag: field(p, TAG), ext_code: field(p, EXT_CODE),
            ext_len: field(p, EXT_LEN), opcode: field(p, OPCODE), lba: field(p, LBA), sectors: field(p, SECTORS),
            msg_byte: field(p, MSG_BYTE),
        };
        let compare = &p.compare;
        let operand = |i: usize| string_at(compare, i);
        let mut b = Batch { steps, t: &p.t_ns, code: p.event.iter().map(|&c| codes[c as usize]).collect(),
                            compare: &operand };
        self.steps(&mut b)
    }
}

#[pymethods]
impl QemuStream {
    #[new]
    fn new(rules: StreamRules, summed: bool) -> Self {
        QemuStream { rules, summed, names: Default::default(), sum: Summing::default(), phase: NULL, runs: 0,
                     stretched: StretchCols::default(), devices: false, failed: false, t_min: None, t_max: None, events: 0,
                     lsi_events: 0, clamped: 0, run_count: 0, stray_dma_bytes: 0 }
    }

    fn add(&mut self, py: Python, batch: Table) -> PyResult<Option<Columns>> {
        if self.failed {
            return Ok(None);
        }
        let steps = Steps::events(&batch)?;
        let t = batch.i64s("t_abs_ns")?;
        let (event, compare) = (batch.bytes("event")?, batch.bytes("compare")?);
        let code: Vec<NameCode> = (0..t.len()).map(|i| self.code_of(event.get(i).unwrap_or_default())).collect();
        self.devices |= code.iter().any(|c| c.usb_command);
        let operand = |i: usize| compare.get(i);
        let mut b = Batch { steps, t: &t, code, compare: &operand };
        let this = &mut *self;
        let ok = py.allow_threads(|| this.steps(&mut b));
        self.batch_done(ok)
    }

    /// A block of whole lines scanned as `qemu_block` scans it (`parts` as there); its
    /// events summed at once (`fed`, the events left out of the result) where every
    /// non-blank line is taken and none is a device model's, else handed back for `add`.
    #[pyo3(signature = (buf, parts=None))]
    fn scan(&mut self, py: Python, buf: PyReadonlyArray1<u8>, parts: Option<usize>) -> PyResult<QemuScan> {
        let data = buf.as_slice()?;
        let n = parts.unwrap_or_else(|| part_count(data.len()));
        let this = &mut *self;
        let scanned = py.allow_threads(|| {
            let mut parts = on_parts(data, n, |part, first| scan_part(part, first, part.as_ptr() as usize - data.as_ptr() as usize));
            let codes: Vec<Vec<NameCode>> = parts.iter()
                .map(|p| p.events.names.iter().map(|name| this.code_of(name)).collect()).collect();
            // the device models' rows are read in Python (`Stream._keep_device_rows`), from the
            // first USB command on
            this.devices |= codes.iter().flatten().any(|c| c.usb_command);
            let device_rows = this.devices && codes.iter().flatten().any(|c| c.device);
            let fed = this.summed && !this.failed && parts.iter().all(|p| p.other_line.is_empty()) && !device_rows;
            if !fed {
                return Err(merged(parts));
            }
            // the parts summed in order, each as it was scanned (no merged copy)
            let mut names = Interner::default();
            let (mut taken, mut last) = (0, None);
            for (p, c) in parts.iter_mut().zip(&codes) {
                this.failed |= !this.failed && this.feed_part(p, c).is_none();
                taken += p.line.len();
                last = p.line.last().copied().or(last);
                p.events.names.iter().for_each(|name| { names.code(name); });
            }
            if !this.failed {
                this.completed(1);     // summed: nothing comes back
            }
            Ok((names, taken, last))
        });
        let (names, taken, last) = match scanned {
            Err(m) => return scan_result(py, m, data),
            Ok(fed) => fed,
        };
        let mut out = scan_result(py, Part { events: names, ..Part::default() }, data)?;
        (out.fed, out.taken, out.last_line) = (true, taken, last);
        Ok(out)
    }

    fn finish(&mut self) -> PyResult<Option<Columns>> {
        if self.failed {
            return Ok(None);
        }
        self.completed(0).map(runs_table).transpose()
    }

    /// The runs summed per stretch (with `summed`) since the last call (None: none).
    fn stretches(&mut self) -> PyResult<Option<Columns>> {
        let part = std::mem::take(&mut self.stretched);
        if part.start.is_empty() { Ok(None) } else { part.table().map(Some) }
    }
}

/// Each run's bytes as an Arrow list (null where `n_info` is).
fn byte_lists(values: Vec<u8>, n_info: &[i64]) -> PyResult<ArrayRef> {
    let lengths = n_info.iter().map(|&n| if n == NULL { 0 } else { n as usize });
    let offsets = OffsetBuffer::<i64>::from_lengths(lengths);
    let nulls = NullBuffer::from(n_info.iter().map(|&n| n != NULL).collect::<Vec<bool>>());
    let item = Arc::new(Field::new("item", DataType::UInt8, true));
    let list = LargeListArray::try_new(item, offsets, Arc::new(UInt8Array::from(values)),
                                       (nulls.null_count() > 0).then_some(nulls))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("qemu_runs: {e}")))?;
    Ok(Arc::new(list))
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_the_patterns() {
        let d = decode(b"lsi_do_status", b"Get status len=1 status=2").unwrap();
        assert_eq!((d.value[LEN], d.value[STATUS]), (Some(1), Some(2)));
        let d = decode(b"lsi_do_dma", b"DMA addr=0x1 len=x len=7").unwrap();
        assert_eq!(d.value[LEN], Some(7));
        assert!(decode(b"lsi_do_dma", b"DMA len=4294967296").is_none());
        assert!(decode(b"lsi_do_dma", b"DMA len=4294967296 len=5").is_none());
        let d = decode(b"lsi_execute_script_io_selected", b"Selected target 3 ATN").unwrap();
        assert!(d.atn && d.value[TARGET] == Some(3));
        let d = decode(b"scsi_req_parsed", b"target 0 lun 1 tag 5 command 40 dir 1 length 4096").unwrap();
        assert_eq!(d.value[LENGTH], Some(4096));
        assert!(decode(b"lsi_reselect", b" Reselected target 0").is_none());
        assert!(record(b"1@2.3:lsi_x y").is_some());
        assert!(record(b"1@2:lsi_x y").is_none());
        assert!(record(b"1@2.1234567890:lsi_x y").is_none());
    }
}
