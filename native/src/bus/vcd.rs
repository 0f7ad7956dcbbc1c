//! The VCD value-change passes (parsers/_vcd_scan.py): bytes of a block of whole lines ->
//! items (timestamps and value changes) in file order; items -> the bus state at each
//! timestamp. The constants are parsers/_vcd_scan.py's.
use std::sync::Arc;

use arrow_array::types::{UInt16Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::arrow::{ints, options_of, values_of, Columns};

const KW_COMMENT: i8 = 2;
const KW_DUMPOFF: i8 = 6;
const BAD: i8 = 0;
const TIME: i8 = 1;
const SCALAR: i8 = 2;
const VECTOR: i8 = 3;
const REAL: i8 = 4;
const STRING: i8 = 5;
const R_TOKEN: i8 = 1;
const R_TIME: i8 = 2;
const R_VECTOR: i8 = 3;
const R_NO_CODE: i8 = 4;
const PACKED_BYTES: usize = 7; // identifier codes up to this long are compared as integers
const MAX_TIME_DIGITS: usize = 18;

const DB_SLOT: usize = 9;
const DB_BIT_SLOT0: usize = 10;
const DBP_SLOT: usize = 18;
const N_SLOTS: usize = 19;
const PENDING: usize = N_SLOTS;
const PENDING_T: usize = N_SLOTS + 1;
const PENDING_LINES: usize = N_SLOTS + 2; // then PENDING_DB, PENDING_DBP
const FINAL: usize = N_SLOTS + 5;
const FINAL_LINES: usize = N_SLOTS + 6;
const FINAL_DB: usize = N_SLOTS + 7;
const FINAL_DBP: usize = N_SLOTS + 8;
const CARRY_SIZE: usize = N_SLOTS + 9;

#[inline(always)]
fn blank(c: u8) -> bool {
    c == b' ' || c == b'\n' || c == b'\t' || c == b'\r'
}

#[inline(always)]
fn vector_char(c: u8) -> bool {
    matches!(c, b'0' | b'1' | b'x' | b'X' | b'z' | b'Z')
}

#[inline(always)]
fn value_letter(c: u8) -> bool {
    // b B r R s S: a value whose identifier code is the next token
    matches!(c, b'b' | b'B' | b'r' | b'R' | b's' | b'S')
}

/// An identifier code as an integer (bytes, length in the top byte); 0 when too long.
fn pack(code: &[u8]) -> u64 {
    if code.is_empty() || code.len() > PACKED_BYTES {
        return 0;
    }
    code.iter().enumerate().fold((code.len() as u64) << 56, |k, (j, &b)| k | (b as u64) << (8 * j))
}

/// The item columns of one block (parsers/_vcd_scan.py scan_block).
struct Items<'a> {
    line: &'a mut [i64],
    start: &'a mut [i64],
    end: &'a mut [i64],
    kind: &'a mut [i8],
    ctx: &'a mut [i8],
    time: &'a mut [i64],
    code_start: &'a mut [i64],
    code_end: &'a mut [i64],
    code: &'a mut [u64],
    val_start: &'a mut [i64],
    val_end: &'a mut [i64],
    reason: &'a mut [i8],
}

/// Fill the item columns; returns (items, keyword context at the end of the block).
fn scan_into(a: &[u8], first_line: i64, context: i8, keywords: &[&[u8]], it: &mut Items) -> (usize, i8) {
    let n = a.len();
    let mut i = 0usize;
    let mut line_no = first_line;
    let mut cur_ctx = context;
    let mut m = 0usize;
    let mut prev_line = -1i64; // line of the previous kept token (-1: none yet)
    let mut prev_letter = false; // the previous kept token starts with b/r/s
    let mut prev_pos = 0usize; // its position in its run of such tokens
    let mut open_value: Option<usize> = None; // a value waiting for the token after it
    while i < n {
        let c = a[i];
        if c == b'\n' {
            line_no += 1;
            i += 1;
            continue;
        }
        if blank(c) {
            i += 1;
            continue;
        }
        let s = i;
        while i < n && !blank(a[i]) {
            i += 1;
        }
        let e = i;
        let tok = &a[s..e];
        if tok.len() >= 2 && tok[0] == b'$' {
            if let Some(k) = keywords.iter().position(|k| *k == tok) {
                cur_ctx = k as i8 + 1;
                continue;
            }
        }
        if cur_ctx == KW_COMMENT {
            continue;
        }
        let same_line = line_no == prev_line;
        let letter = value_letter(a[s]);
        let pos = if letter && prev_letter && same_line { prev_pos + 1 } else { 0 };
        let was_code = open_value.is_some() && same_line;
        if let Some(v) = open_value.take() {
            // the token after a value: its code when on its line
            it.code_start[v] = s as i64;
            if same_line {
                it.code_end[v] = e as i64;
            } else {
                it.code_end[v] = s as i64;
                if it.reason[v] == 0 && it.kind[v] >= VECTOR {
                    it.reason[v] = R_NO_CODE;
                }
            }
        }
        (prev_line, prev_letter, prev_pos) = (line_no, letter, pos);
        if was_code {
            let v = m - 1;
            it.code[v] = if it.kind[v] >= SCALAR { pack(tok) } else { 0 };
            continue;
        }
        it.line[m] = line_no;
        it.start[m] = s as i64;
        it.end[m] = e as i64;
        it.ctx[m] = cur_ctx;
        it.time[m] = 0;
        it.code[m] = 0;
        it.reason[m] = 0;
        let c0 = a[s];
        if letter && pos % 2 == 0 {
            open_value = Some(m);
            it.code_start[m] = s as i64; // until the next token is known: a value last in the
            it.code_end[m] = s as i64; // block has no code
            it.val_start[m] = s as i64 + 1;
            it.val_end[m] = e as i64;
            if c0 == b'b' || c0 == b'B' {
                it.kind[m] = VECTOR;
                if e - s < 2 || !tok[1..].iter().all(|&c| vector_char(c)) {
                    it.reason[m] = R_VECTOR;
                }
            } else if c0 == b'r' || c0 == b'R' {
                it.kind[m] = REAL;
            } else {
                it.kind[m] = STRING;
            }
        } else {
            it.code_start[m] = s as i64 + 1;
            it.code_end[m] = e as i64;
            if c0 == b'#' {
                it.kind[m] = TIME;
                it.val_start[m] = s as i64 + 1;
                it.val_end[m] = e as i64;
                let digits = &tok[1..];
                if (1..=MAX_TIME_DIGITS).contains(&digits.len()) && digits.iter().all(|c| c.is_ascii_digit()) {
                    it.time[m] = digits.iter().fold(0i64, |t, &d| t * 10 + (d - b'0') as i64);
                } else {
                    it.reason[m] = R_TIME;
                }
            } else if vector_char(c0) && e - s >= 2 {
                it.kind[m] = SCALAR;
                it.val_start[m] = s as i64;
                it.val_end[m] = s as i64 + 1;
                it.code[m] = pack(&tok[1..]);
            } else {
                it.kind[m] = BAD;
                it.val_start[m] = s as i64 + 1;
                it.val_end[m] = e as i64;
                it.reason[m] = R_TOKEN;
            }
        }
        m += 1;
    }
    if let Some(v) = open_value {
        if it.reason[v] == 0 {
            it.reason[v] = R_NO_CODE;
        }
    }
    (m, cur_ctx)
}

/// The reader's tables, read by attribute from parsers/vcd.py `_Reader`: the keywords (their
/// context codes are their positions + 1), the declared identifier codes (sorted, packed)
/// and their widths, the mapped signals (packed codes, 0 for a code too long to pack; their
/// slots and flags: bit 0 the DB vector, bit 1 its bits reversed, bit 2 inverted), the
/// slots present, and the timescale (time units -> ns: num / den).
#[derive(FromPyObject)]
struct VcdTables<'py> {
    #[pyo3(attribute)]
    keywords: Vec<Vec<u8>>,
    #[pyo3(attribute)]
    declared: PyReadonlyArray1<'py, u64>,
    #[pyo3(attribute)]
    declared_width: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    feed_keys: PyReadonlyArray1<'py, u64>,
    #[pyo3(attribute)]
    feed_slot: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    feed_flags: PyReadonlyArray1<'py, i64>,
    #[pyo3(attribute)]
    present: PyReadonlyArray1<'py, u8>,
    #[pyo3(attribute)]
    tick_num: i64,
    #[pyo3(attribute)]
    tick_den: i64,
}

impl VcdTables<'_> {
    fn feeds<'a>(&'a self, long_hits: &'a [i64]) -> PyResult<Feeds<'a>> {
        let feeds = Feeds { keys: self.feed_keys.as_slice()?, long_hits, slot: self.feed_slot.as_slice()?,
                            flags: self.feed_flags.as_slice()?, present: self.present.as_slice()? };
        if feeds.slot.len() != feeds.keys.len() || feeds.keys.len() > 64 || feeds.flags.len() != feeds.keys.len()
            || feeds.present.len() < N_SLOTS || feeds.slot.iter().any(|&s| !(0..N_SLOTS as i64).contains(&s))
            || self.tick_num <= 0 || self.tick_den <= 0 {
            return Err(shapes());
        }
        Ok(feeds)
    }

    fn keywords(&self) -> Vec<&[u8]> {
        self.keywords.iter().map(|w| w.as_slice()).collect()
    }
}

fn shapes() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("vcd: array shapes")
}

/// A block of whole lines, read by name: its bytes, the number of its first line and the
/// keyword context it starts in.
#[derive(FromPyObject)]
struct ScanBlock<'py> {
    #[pyo3(item)]
    text: PyReadonlyArray1<'py, u8>,
    #[pyo3(item)]
    first_line: i64,
    #[pyo3(item)]
    context: i8,
}

/// The items of a block (parsers/_vcd_scan.py `scan_block`), and the keyword context at
/// its end.
#[pyclass(get_all)]
struct VcdItems {
    line: Py<PyArray1<i64>>,
    start: Py<PyArray1<i64>>,
    end: Py<PyArray1<i64>>,
    kind: Py<PyArray1<i8>>,
    ctx: Py<PyArray1<i8>>,
    time: Py<PyArray1<i64>>,
    code_start: Py<PyArray1<i64>>,
    code_end: Py<PyArray1<i64>>,
    code: Py<PyArray1<u64>>,
    val_start: Py<PyArray1<i64>>,
    val_end: Py<PyArray1<i64>>,
    reason: Py<PyArray1<i8>>,
    context: i8,
}

#[pyfunction]
fn vcd_scan(py: Python, block: ScanBlock, tables: VcdTables) -> PyResult<VcdItems> {
    let a = block.text.as_slice()?;
    let keywords = tables.keywords();
    let mut bufs = ItemBufs::default();
    let (m, context) = py.allow_threads(|| {
        let mut it = bufs.items(a.len() / 2 + 1); // a token and the blank after it take at least two bytes
        scan_into(a, block.first_line, block.context, &keywords, &mut it)
    });
    fn column<T: numpy::Element>(py: Python, mut v: Vec<T>, m: usize) -> Py<PyArray1<T>> {
        v.truncate(m);
        v.into_pyarray_bound(py).unbind()
    }
    let b = bufs;
    Ok(VcdItems {
        line: column(py, b.line, m), start: column(py, b.start, m), end: column(py, b.end, m),
        kind: column(py, b.kind, m), ctx: column(py, b.ctx, m), time: column(py, b.time, m),
        code_start: column(py, b.code_start, m), code_end: column(py, b.code_end, m), code: column(py, b.code, m),
        val_start: column(py, b.val_start, m), val_end: column(py, b.val_end, m), reason: column(py, b.reason, m),
        context,
    })
}

#[inline(always)]
fn bit(c: u8) -> i64 {
    match c {
        b'0' => 0,
        b'1' => 1,
        _ => -1,
    }
}

/// Low 8 bits of a vector value left-extended as IEEE 1364 says (x or z pad with
/// themselves, anything else with 0); -1 if any of them is x or z.
fn byte_value(v: &[u8]) -> i64 {
    let pad = match v[0] {
        b'x' | b'X' => b'x',
        b'z' | b'Z' => b'z',
        _ => b'0',
    };
    let mut value = 0;
    for j in 0..8 {
        let b = bit(if j < v.len() { v[v.len() - 1 - j] } else { pad });
        if b < 0 {
            return -1;
        }
        value |= b << j;
    }
    value
}

/// Slot states -> (lines, db, dbp), -1 where not sampled.
fn combine(state: &[i64], present: &[u8]) -> [i64; 3] {
    let mut lines = 0;
    for s in 0..DB_SLOT {
        if present[s] != 0 && state[s] > 0 {
            lines |= 1 << s;
        }
    }
    let mut db = -1;
    if present[DB_SLOT] != 0 {
        db = state[DB_SLOT];
    } else if present[DB_BIT_SLOT0] != 0 {
        db = 0;
        for i in 0..8 {
            if state[DB_BIT_SLOT0 + i] < 0 {
                db = -1;
                break;
            }
            db |= state[DB_BIT_SLOT0 + i] << i;
        }
    }
    [lines, db, if present[DBP_SLOT] != 0 { state[DBP_SLOT] } else { -1 }]
}

/// What one block hands the next (parsers/vcd.py `_Carry.state`): each slot's value, the
/// pending row (the last timestamp so far, which the next block may still change) and the
/// last final row; a value -1 (not sampled) stays inside.
#[pyclass]
struct VcdCarry {
    vec: [i64; CARRY_SIZE],
}

#[pymethods]
impl VcdCarry {
    /// Before any change: control lines 0, data lines not sampled.
    #[new]
    fn new() -> Self {
        let mut vec = [0i64; CARRY_SIZE];
        vec[DB_SLOT..N_SLOTS].fill(-1);
        VcdCarry { vec }
    }

    /// The pending row's time (None: no timestamp yet).
    #[getter]
    fn pending_t(&self) -> Option<i64> {
        (self.vec[PENDING] != 0).then_some(self.vec[PENDING_T])
    }

    /// The pending row as transitions (none when there is no timestamp yet).
    fn pending_rows(&self) -> PyResult<Columns> {
        let mut out = RowsOut::default();
        if self.vec[PENDING] != 0 {
            out.t.push(self.vec[PENDING_T]);
            out.row.push([self.vec[PENDING_LINES], self.vec[PENDING_LINES + 1], self.vec[PENDING_LINES + 2]]);
        }
        out.columns()
    }

    /// At the end of a file whose value changes came without any timestamp: one state at
    /// time 0, when a mapped slot has changed.
    fn close_untimed(&mut self, present: PyReadonlyArray1<u8>, slots: Vec<usize>) -> PyResult<()> {
        let present = present.as_slice()?;
        if present.len() < N_SLOTS || slots.iter().any(|&s| s >= N_SLOTS) {
            return Err(shapes());
        }
        let initial = VcdCarry::new().vec;
        if self.vec[PENDING] == 0 && slots.iter().any(|&s| self.vec[s] != initial[s]) {
            let row = combine(&self.vec[..N_SLOTS], present);
            self.vec[PENDING] = 1;
            self.vec[PENDING_T] = 0;
            self.vec[PENDING_LINES..PENDING_LINES + 3].copy_from_slice(&row);
        }
        Ok(())
    }
}

/// The rows a block closes: their times (ns) and lines, DB, DBP (-1: not sampled), and the
/// x/z values of control and data lines.
#[derive(Default)]
struct RowsOut {
    t: Vec<i64>,
    row: Vec<[i64; 3]>,
    xz: [i64; 2],
}

impl RowsOut {
    /// The rows as transitions: DB and DBP null where not sampled.
    fn columns(self) -> PyResult<Columns> {
        let lines = self.row.iter().map(|r| r[0] as u16).collect();
        let db = self.row.iter().map(|r| (r[1] >= 0).then_some(r[1] as u8));
        let dbp: BooleanArray = self.row.iter().map(|r| (r[2] >= 0).then_some(r[2] != 0)).collect();
        Columns::new(vec![("t_ns", ints(self.t)), ("lines", values_of::<UInt16Type>(lines)),
                          ("db", options_of::<UInt8Type>(db)), ("dbp", Arc::new(dbp) as ArrayRef)])
    }
}

/// Time units -> ns from the origin: (t - origin) * num / den, floored.
struct Tick {
    origin: i64,
    num: i64,
    den: i64,
}

/// A block's items after parsers/vcd.py's checks, the columns `vcd_rows` reads by name;
/// `long_hits`: per item, bit f when its code is feed f's code too long to pack (empty when
/// no feed has one); `origin`: the first timestamp (time units).
#[derive(FromPyObject)]
struct RowItems<'py> {
    #[pyo3(item)]
    text: PyReadonlyArray1<'py, u8>,
    #[pyo3(item)]
    kind: PyReadonlyArray1<'py, i8>,
    #[pyo3(item)]
    ctx: PyReadonlyArray1<'py, i8>,
    #[pyo3(item)]
    time: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    val_start: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    val_end: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    code: PyReadonlyArray1<'py, u64>,
    #[pyo3(item)]
    long_hits: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    origin: i64,
}

/// The rows a block closes (transitions) and its x/z values of control and data lines.
#[pyclass(get_all)]
struct VcdRows {
    rows: Py<Columns>,
    xz_control: i64,
    xz_data: i64,
}

impl VcdRows {
    fn of(py: Python, out: RowsOut) -> PyResult<VcdRows> {
        let xz = out.xz;
        Ok(VcdRows { rows: Py::new(py, out.columns()?)?, xz_control: xz[0], xz_data: xz[1] })
    }
}

/// Apply a block's value changes in file order and close a row at each new timestamp: see
/// parsers/_vcd_scan.py `rows`.
#[pyfunction]
fn vcd_rows(py: Python, items: RowItems, tables: VcdTables, mut carry: PyRefMut<VcdCarry>) -> PyResult<VcdRows> {
    let a = items.text.as_slice()?;
    let (kind, ctx, time) = (items.kind.as_slice()?, items.ctx.as_slice()?, items.time.as_slice()?);
    let (val_start, val_end, code) = (items.val_start.as_slice()?, items.val_end.as_slice()?, items.code.as_slice()?);
    let long_hits = items.long_hits.as_slice()?;
    let feeds = tables.feeds(long_hits)?;
    let n = kind.len();
    let ok = [ctx.len(), time.len(), val_start.len(), val_end.len(), code.len()].iter().all(|&l| l == n)
        && (long_hits.is_empty() || long_hits.len() == n)
        && (0..n).all(|i| !(kind[i] == SCALAR || kind[i] == VECTOR)
            || (0 <= val_start[i] && val_start[i] < val_end[i] && val_end[i] as usize <= a.len()));
    if !ok {
        return Err(shapes());
    }
    let cols = ItemCols { kind, ctx, time, val_start, val_end, code };
    let tick = Tick { origin: items.origin, num: tables.tick_num, den: tables.tick_den };
    let carry = &mut carry.vec;
    let out = py.allow_threads(|| {
        let mut out = RowsOut::default();
        apply_rows(a, &cols, &feeds, &tick, carry, &mut out);
        out
    });
    VcdRows::of(py, out)
}

/// The item columns the rows pass reads.
struct ItemCols<'a> {
    kind: &'a [i8],
    ctx: &'a [i8],
    time: &'a [i64],
    val_start: &'a [i64],
    val_end: &'a [i64],
    code: &'a [u64],
}

/// The mapped signals: packed codes, long-code hits per item, slots, flags, present slots.
struct Feeds<'a> {
    keys: &'a [u64],
    long_hits: &'a [i64],
    slot: &'a [i64],
    flags: &'a [i64],
    present: &'a [u8],
}

/// Apply the value changes in file order and close a row at each new timestamp (see
/// parsers/_vcd_scan.py `rows`): the rows that change something go to `out`.
fn apply_rows(a: &[u8], cols: &ItemCols, feeds: &Feeds, tick: &Tick, carry: &mut [i64], out: &mut RowsOut) {
    let (origin, num, den) = (tick.origin, tick.num, tick.den);
    let ItemCols { kind, ctx, time, val_start, val_end, code } = *cols;
    let Feeds { keys: feed_keys, long_hits, slot: feed_slot, flags: feed_flags, present } = *feeds;
    let n = kind.len();
        let mut has_group = carry[PENDING] != 0;
        let mut group_t = carry[PENDING_T];
        for i in 0..n {
            let k = kind[i];
            if ctx[i] == KW_DUMPOFF {
                continue;
            }
            if k == TIME {
                let t = (time[i].wrapping_sub(origin)).wrapping_mul(num).div_euclid(den);
                if has_group && t != group_t {
                    // the previous timestamp is final
                    let row = combine(&carry[..N_SLOTS], present);
                    if carry[FINAL] == 0 || row != [carry[FINAL_LINES], carry[FINAL_DB], carry[FINAL_DBP]] {
                        out.t.push(group_t);
                        out.row.push(row);
                    }
                    carry[FINAL] = 1;
                    carry[FINAL_LINES..FINAL_LINES + 3].copy_from_slice(&row);
                }
                group_t = t;
                has_group = true;
                continue;
            }
            if k != SCALAR && k != VECTOR {
                continue;
            }
            let mut mask = if long_hits.is_empty() { 0u64 } else { long_hits[i] as u64 };
            for (f, &key) in feed_keys.iter().enumerate() {
                if key != 0 && code[i] == key {
                    mask |= 1 << f;
                }
            }
            let value = &a[val_start[i] as usize..val_end[i] as usize];
            while mask != 0 {
                let f = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let flags = feed_flags[f];
                let mut v;
                if flags & 1 != 0 {
                    v = byte_value(value);
                    if v >= 0 && flags & 2 != 0 {
                        v = (v as u8).reverse_bits() as i64;
                    }
                    if v >= 0 && flags & 4 != 0 {
                        v ^= 0xFF;
                    }
                } else {
                    v = bit(value[value.len() - 1]);
                    if v >= 0 && flags & 4 != 0 {
                        v = 1 - v;
                    }
                }
                let slot = feed_slot[f] as usize;
                if v < 0 {
                    out.xz[if slot < DB_SLOT { 0 } else { 1 }] += 1;
                }
                carry[slot] = v;
            }
        }
        if has_group {
            let row = combine(&carry[..N_SLOTS], present);
            carry[PENDING] = 1;
            carry[PENDING_T] = group_t;
            carry[PENDING_LINES..PENDING_LINES + 3].copy_from_slice(&row);
        }
}

/// Item columns owned by a worker, reused from block to block (no fresh pages per block).
#[derive(Default)]
struct ItemBufs {
    line: Vec<i64>,
    start: Vec<i64>,
    end: Vec<i64>,
    kind: Vec<i8>,
    ctx: Vec<i8>,
    time: Vec<i64>,
    code_start: Vec<i64>,
    code_end: Vec<i64>,
    code: Vec<u64>,
    val_start: Vec<i64>,
    val_end: Vec<i64>,
    reason: Vec<i8>,
}

impl ItemBufs {
    /// Columns of at least `cap` items. A new column is zeroed by the allocator (pages the
    /// scan never reaches are never touched, so never resident); a reused one keeps the last
    /// block's items, which the scan overwrites before anything reads them.
    fn items(&mut self, cap: usize) -> Items<'_> {
        fn fit<T: Copy + Default>(v: &mut Vec<T>, cap: usize) {
            if v.len() < cap {
                *v = vec![T::default(); cap];
            }
        }
        for v in [&mut self.line, &mut self.start, &mut self.end, &mut self.time, &mut self.code_start,
                  &mut self.code_end, &mut self.val_start, &mut self.val_end] {
            fit(v, cap);
        }
        for v in [&mut self.kind, &mut self.ctx, &mut self.reason] {
            fit(v, cap);
        }
        fit(&mut self.code, cap);
        Items { line: &mut self.line, start: &mut self.start, end: &mut self.end, kind: &mut self.kind,
                ctx: &mut self.ctx, time: &mut self.time, code_start: &mut self.code_start,
                code_end: &mut self.code_end, code: &mut self.code, val_start: &mut self.val_start,
                val_end: &mut self.val_end, reason: &mut self.reason }
    }
}

thread_local! {
    static BUFS: std::cell::RefCell<ItemBufs> = std::cell::RefCell::new(ItemBufs::default());
}

/// The declared identifier codes (sorted, packed) and their widths.
struct Declared<'a> {
    codes: &'a [u64],
    width: &'a [i64],
}

/// The time checks' carried state: the last accepted timestamp and the origin (-1: none).
struct Clock {
    last_time: i64,
    origin: i64,
    limit_span: i64, // timestamps beyond origin + this overflow int64 ns
}

/// Whether every item of the block is good as parsers/vcd.py `_check` rules it: no scanner
/// reason, every change's code declared (and packed), no vector wider than its wire unless
/// by leading zeros, time never backwards nor beyond int64 ns.
fn all_good(a: &[u8], it: &Items, m: usize, dec: &Declared, clock: &Clock) -> bool {
    let mut prev_max = clock.last_time;
    let mut origin = clock.origin;
    for i in 0..m {
        if it.reason[i] != 0 {
            return false;
        }
        let k = it.kind[i];
        if k == TIME {
            let t = it.time[i];
            if t < prev_max {
                return false;
            }
            prev_max = t;
            if origin < 0 {
                origin = t;
            }
            if t > origin.saturating_add(clock.limit_span) {
                return false;
            }
        } else if k >= SCALAR {
            let code = it.code[i];
            if code == 0 {
                return false;
            }
            let Ok(at) = dec.codes.binary_search(&code) else { return false };
            if k == VECTOR {
                let (vs, ve) = (it.val_start[i] as usize, it.val_end[i] as usize);
                let width = dec.width[at] as usize;
                if ve - vs > width && a[vs..ve - width].iter().any(|&c| c != b'0') {
                    return false;
                }
            }
        }
    }
    true
}

/// A block for the one-call path, read by name: `ScanBlock`'s fields and the time checks'
/// carried state (the last accepted timestamp and the origin, time units; None: none yet).
#[derive(FromPyObject)]
struct FastBlock<'py> {
    #[pyo3(item)]
    text: PyReadonlyArray1<'py, u8>,
    #[pyo3(item)]
    first_line: i64,
    #[pyo3(item)]
    context: i8,
    #[pyo3(item)]
    last_time: Option<i64>,
    #[pyo3(item)]
    origin: Option<i64>,
}

/// A block read in one call: its rows (`VcdRows`), the keyword context at its end, its items,
/// its real, string and $dumpoff changes (ignored), and its first and last timestamp outside
/// $dumpoff (None: none).
#[pyclass(get_all)]
struct FastRows {
    rows: Py<VcdRows>,
    context: i8,
    items: i64,
    real: i64,
    string: i64,
    dumpoff: i64,
    first_t: Option<i64>,
    last_t: Option<i64>,
}

/// One block through scan, checks and rows in one call (parsers/vcd.py `_Reader._fast`), for
/// blocks where every item is good and every mapped code is packed: None otherwise (nothing
/// changed; the caller takes the general path, which says what is wrong).
#[pyfunction]
fn vcd_fast_block(py: Python, block: FastBlock, tables: VcdTables, mut carry: PyRefMut<VcdCarry>)
                  -> PyResult<Option<FastRows>> {
    let a = block.text.as_slice()?;
    let keywords = tables.keywords();
    let dec = Declared { codes: tables.declared.as_slice()?, width: tables.declared_width.as_slice()? };
    let feeds = tables.feeds(&[])?;
    if dec.codes.len() != dec.width.len() || feeds.keys.iter().any(|&k| k == 0) {
        return Err(shapes());
    }
    let (first_line, context) = (block.first_line, block.context);
    // -1: none (VCD timestamps are digits, never negative)
    let clock = Clock { last_time: block.last_time.unwrap_or(-1), origin: block.origin.unwrap_or(-1),
                        limit_span: i64::MAX / tables.tick_num };
    let (num, den) = (tables.tick_num, tables.tick_den);
    let carry = &mut carry.vec;
    let done = py.allow_threads(|| {
        BUFS.with(|cell| {
            let mut bufs = cell.borrow_mut();
            let mut it = bufs.items(a.len() / 2 + 1);
            let (m, end_ctx) = scan_into(a, first_line, context, &keywords, &mut it);
            if !all_good(a, &it, m, &dec, &clock) {
                return None;
            }
            let mut counts = [m as i64, 0, 0, 0, -1, -1];
            for i in 0..m {
                let (k, live) = (it.kind[i], it.ctx[i] != KW_DUMPOFF);
                counts[1] += (k == REAL && live) as i64;
                counts[2] += (k == STRING && live) as i64;
                counts[3] += (k != TIME && !live) as i64;
                if k == TIME && live {
                    if counts[4] < 0 {
                        counts[4] = it.time[i];
                    }
                    counts[5] = it.time[i];
                }
            }
            let origin = if clock.origin >= 0 { clock.origin } else { counts[4].max(0) };
            let cols = ItemCols { kind: &it.kind[..m], ctx: &it.ctx[..m], time: &it.time[..m],
                                  val_start: &it.val_start[..m], val_end: &it.val_end[..m], code: &it.code[..m] };
            let mut out = RowsOut::default();
            apply_rows(a, &cols, &feeds, &Tick { origin, num, den }, carry, &mut out);
            Some((out, end_ctx, counts))
        })
    });
    let Some((out, context, [items, real, string, dumpoff, first_t, last_t])) = done else { return Ok(None) };
    Ok(Some(FastRows { rows: Py::new(py, VcdRows::of(py, out)?)?, context, items, real, string, dumpoff,
                       first_t: (first_t >= 0).then_some(first_t), last_t: (last_t >= 0).then_some(last_t) }))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(vcd_scan, m)?)?;
    m.add_function(wrap_pyfunction!(vcd_rows, m)?)?;
    m.add_function(wrap_pyfunction!(vcd_fast_block, m)?)?;
    m.add_class::<VcdCarry>()?;
    Ok(())
}
