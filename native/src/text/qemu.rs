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
use arrow_array::{ArrayRef, BooleanArray};
use memchr::memmem;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use super::{on_parts, part_count, seconds_ns, uint, Interner, StrCol};
use crate::arrow::{ints, values_or_null, Columns};

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

/// Matched hex digits as a number within u32.
fn hex(d: &[u8]) -> Option<i64> {
    if d.len() > 16 {
        return None;
    }
    let v = super::hex_u64(d);
    (v <= U32).then_some(v as i64)
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
            v[TAG] = Some(hex(search(detail, b"tag=0x", |s| hex_digits_at(s).map(|x| x.0))?)?);
        }
        b"lsi_do_msgout_extended" => {
            let (code, rest) = hex_digits_at(after(detail, b"Extended message 0x")?)?;
            let (n, rest) = digits_at(after(rest, b" (len ")?)?;
            after(rest, b")")?;
            v[EXT_CODE] = Some(hex(code)?);
            v[EXT_LEN] = Some(dec(n, U32)?);
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
            v[STATUS] = Some(dec(status, U32)?);
        }
        b"lsi_command_complete" => {
            v[STATUS] = Some(dec(search(detail, b"status=", |s| digits_at(s).map(|x| x.0))?, U32)?);
        }
        b"lsi_add_msg_byte" => v[MSG_BYTE] = Some(hex(hex_digits_at(after(detail, b"MSG IN 0x")?)?.0)?),
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
            v[TAG] = Some(hex(tag)?);
            v[LEN] = Some(dec(n, U32)?);
        }
        b"usb_msd_cmd_submit" | b"usb_msd_send_status" | b"usb_uas_command" | b"usb_uas_sense" => {
            v[TAG] = Some(hex(search(detail, b"tag 0x", |s| hex_digits_at(s).map(|x| x.0))?)?);
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
                v[f] = Some(dec(found[k], U32)?);
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
    detail: StrCol,
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
                p.detail.push(Some(detail));
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
        m.detail.append(p.detail);
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

/// What `qemu_block` read of a block: the records taken (`events`: `line`, the line's index
/// in the block, `t_abs_ns`, `event` a code of `names`, the numeric fields null where the
/// event has none, `atn`; `detail` and `compare` as strings) and the other non-blank lines
/// (`other`: `line`, `start`, `end`, byte offsets in the block) for the Python reader.
#[pyclass(get_all)]
struct QemuScan {
    events: Py<Columns>,
    names: Vec<String>,
    detail: Py<Columns>,
    compare: Py<Columns>,
    other: Py<Columns>,
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
    let mut columns: Vec<(&str, ArrayRef)> = vec![("line", ints(m.line)), ("t_abs_ns", ints(m.t_ns)),
                                                  ("event", ints(m.event.iter().map(|&c| i64::from(c)).collect()))];
    for (f, (v, ok)) in m.value.into_iter().zip(m.ok).enumerate() {
        columns.push((FIELDS[f], values_or_null::<Int64Type>(v, ok)));
    }
    columns.push(("atn", Arc::new(BooleanArray::from(m.atn)) as ArrayRef));
    Ok(QemuScan {
        events: Py::new(py, Columns::new(columns)?)?,
        names: m.events.strings(),
        detail: m.detail.into_py(py)?,
        compare: m.compare.into_py(py)?,
        other: Py::new(py, Columns::new(vec![("line", ints(m.other_line)), ("start", ints(m.other_start)),
                                             ("end", ints(m.other_end))])?)?,
    })
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(qemu_block, m)?)?;
    Ok(())
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
