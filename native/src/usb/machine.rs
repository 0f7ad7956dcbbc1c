//! The mass-storage machines over the URB table (scsitrace/usb/): URB pairing, transfer
//! columns, the Bulk-Only command pass and its CBW/CSW fields, stage pieces.
use std::collections::HashMap;

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use arrow_array::types::UInt8Type;

use crate::arrow::{ints, ints_or_null, values_of, Columns, Table};
pub(super) use crate::arrow::NULL;
use crate::bus::tiling::DeviceTiling;

use super::urbs::{size_and_head, Urbs};
const EV_S: u8 = b'S';
const EV_C: u8 = b'C';
const EV_E: u8 = b'E';
pub(super) const EPIPE: i32 = -32;
pub(super) const EREMOTEIO: i32 = -121;
pub(super) const CBW_BYTES: usize = 31;
pub(super) const CSW_BYTES: usize = 13;
pub(super) const CBW_SIGNATURE: u32 = 0x4342_5355;
pub(super) const CSW_SIGNATURE: u32 = 0x5342_5355;
const BEFORE_CBW_DATA: i8 = 1;
const BEFORE_CBW_CSW: i8 = 2;
const NOT_BOT: i8 = 3;
// BOT aggregates (scsitrace/usb/bot.py BOT_AGGREGATES)
pub(super) const FIRST: usize = 0;
pub(super) const LAST: usize = 1;
pub(super) const CSW_K: usize = 2;
pub(super) const N_CSW: usize = 3;
pub(super) const STS_S: usize = 4;
pub(super) const STS_C: usize = 5;
pub(super) const DATA_S: usize = 6;
pub(super) const DATA_C: usize = 7;
pub(super) const DATA_BYTES: usize = 8;
pub(super) const STALLS: usize = 9;
pub(super) const DATA_IN: usize = 10;
pub(super) const N_AGG: usize = 11;

/// Why a Bulk-Only command is unpaired, by reason code (`bot_reason`); the paired code
/// (PAIRED) has none. scsitrace/usb/bot.py reads this list (`BOT_REASONS` of the module).
pub(super) const BOT_REASONS: [Option<&str>; 4] =
    [Some("no CSW (capture ended)"), Some("no CSW before the next CBW"), Some("CSW tag does not match the CBW"), None];
pub(super) const PAIRED: usize = 3;

/// A Bulk-Only command's reason code (index into BOT_REASONS), checked in this order: no
/// CSW up to the end of the capture (`last` of its device) or up to the next CBW, a CSW
/// (of at least 8 bytes) with another tag than the CBW's, a CSW not completed (the capture
/// ended); else PAIRED.
#[inline]
pub(super) fn bot_reason(n_csw: i64, last: bool, csw_size: i64, csw_tag: i64, cbw_tag: i64, sts_c: i64) -> usize {
    if n_csw == 0 {
        if last { 0 } else { 1 }
    } else if csw_size >= 8 && csw_tag != cbw_tag {
        2
    } else if sts_c == NULL {
        0
    } else {
        PAIRED
    }
}

/// Transfers as (submit row, completion row), NULL where absent, in row order. A submit
/// pairs with the next event of its URB id when that is a completion (C or E); only
/// submits waiting for it are remembered.
fn pair_urbs(ids: &[u64], ev: impl Fn(usize) -> u8) -> (Vec<i64>, Vec<i64>) {
    let mut waiting: HashMap<u64, usize> = HashMap::new();
    let (mut s_rows, mut c_rows) = (Vec::new(), Vec::new());
    for r in 0..ids.len() {
        let e = ev(r);
        if e == EV_S {
            waiting.insert(ids[r], s_rows.len());
            s_rows.push(r as i64);
            c_rows.push(NULL);
        } else {
            let live = waiting.remove(&ids[r]);
            if e == EV_C || e == EV_E {
                match live {
                    Some(k) => c_rows[k] = r as i64,
                    None => {
                        s_rows.push(NULL);
                        c_rows.push(r as i64);
                    }
                }
            }
        }
    }
    (s_rows, c_rows)
}

/// The transfers of the URBs `u` (scsitrace/usb/transfers.py `Transfers`), one row each
/// in time order (submit time, else completion time; then row): `s_row`, `c_row` (the
/// submit and completion event rows, -1 where absent), `row` (the row naming it),
/// `data_row` (the row whose data it moved, IN: the completion's), `submit_ns`,
/// `complete_ns`, `status`, `req_len`, `actual` (null unknown), `dir_in`, `xfer`, `bus_dev`
/// ((bus << 8) | address).
#[pyfunction]
fn transfers(py: Python, urbs: Table) -> PyResult<Columns> {
    let u = Urbs::read(&urbs)?;
    let (urb_id, t_ns, length, ep, xfer, bus, dev) =
        (&u.urb_id[..], &u.t_ns[..], &u.length[..], &u.ep[..], &u.xfer[..], &u.bus[..], &u.dev[..]);
    let u = &u;
    let t = py.allow_threads(|| {
        let (mut s_row, mut c_row) = pair_urbs(urb_id, |r| u.event(r));
        let named = |s: i64, c: i64| if s >= 0 { s } else { c } as usize;
        let in_order = {
            let time = |k: usize| t_ns[named(s_row[k], c_row[k])];
            (1..s_row.len()).all(|k| time(k - 1) <= time(k))
        };
        if !in_order {
            // by time (submit, else completion), then row
            let mut order: Vec<usize> = (0..s_row.len()).collect();
            order.sort_by_key(|&k| {
                let r = named(s_row[k], c_row[k]);
                (t_ns[r], r)
            });
            (s_row, c_row) = (order.iter().map(|&k| s_row[k]).collect(), order.iter().map(|&k| c_row[k]).collect());
        }
        let length_at = |r: i64| if r >= 0 { length[r as usize] } else { NULL };
        let mut t = TransferOut::with_len(s_row.len());
        for (k, (&s, &c)) in s_row.iter().zip(&c_row).enumerate() {
            let r = named(s, c);
            t.row[k] = r as i64;
            let din = ep[r] & 0x80 != 0;
            t.dir_in[k] = din as u8;
            t.data_row[k] = if din || s < 0 { c } else { s };
            t.submit[k] = if s >= 0 { t_ns[s as usize] } else { NULL };
            t.req[k] = length_at(s);
            t.complete[k] = if c >= 0 { t_ns[c as usize] } else { NULL };
            t.act[k] = length_at(c);
            if c >= 0 {
                t.st[k] = u.status(c as usize);
            }
            t.kind[k] = xfer[r];
            t.bus_dev[k] = ((bus[r] as i64) << 8) | dev[r] as i64;
        }
        t.s_row = s_row;
        t.c_row = c_row;
        t
    });
    t.into_columns()
}

/// The transfers' output columns (NULL: null).
struct TransferOut {
    s_row: Vec<i64>,
    c_row: Vec<i64>,
    row: Vec<i64>,
    data_row: Vec<i64>,
    submit: Vec<i64>,
    complete: Vec<i64>,
    st: Vec<i64>,
    req: Vec<i64>,
    act: Vec<i64>,
    dir_in: Vec<u8>,
    kind: Vec<u8>,
    bus_dev: Vec<i64>,
}

impl TransferOut {
    fn with_len(n: usize) -> TransferOut {
        TransferOut { s_row: Vec::new(), c_row: Vec::new(), row: vec![0; n], data_row: vec![0; n], submit: vec![0; n],
                      complete: vec![0; n], st: vec![NULL; n], req: vec![0; n], act: vec![0; n], dir_in: vec![0; n],
                      kind: vec![0; n], bus_dev: vec![0; n] }
    }

    fn into_columns(self) -> PyResult<Columns> {
        Columns::new(vec![("s_row", ints_or_null(self.s_row)), ("c_row", ints_or_null(self.c_row)),
                          ("row", ints(self.row)), ("data_row", ints_or_null(self.data_row)), ("submit_ns", ints_or_null(self.submit)),
                          ("complete_ns", ints_or_null(self.complete)), ("status", ints_or_null(self.st)),
                          ("req_len", ints_or_null(self.req)), ("actual", ints_or_null(self.act)),
                          ("dir_in", values_of::<UInt8Type>(self.dir_in)), ("xfer", values_of::<UInt8Type>(self.kind)),
                          ("bus_dev", ints(self.bus_dev))])
    }
}

/// One bulk transfer as the Bulk-Only rules read it (bot_pass, BotStream.process).
pub(super) struct Bulk {
    pub k: i64,          // its number among the transfers (FIRST, CSW_K)
    pub dir_in: bool,
    pub size: i64,       // data bytes kept from its data row, -1 for none
    pub head: u32,       // its first 4 data bytes, little-endian (where size >= 4)
    pub submit: i64,
    pub complete: i64,
    pub has_status: bool,
    pub status: i32,
    pub req: i64,
    pub act: i64,
}

impl Bulk {
    /// (a CBW: an OUT transfer of at least 31 bytes signed "USBC"; a CSW: an IN transfer
    /// of exactly 13 bytes signed "USBS").
    pub(super) fn role(&self) -> (bool, bool) {
        let signed = self.size >= 4;
        (signed && !self.dir_in && self.head == CBW_SIGNATURE && self.size >= CBW_BYTES as i64,
         signed && self.dir_in && self.head == CSW_SIGNATURE && self.act == CSW_BYTES as i64)
    }

    /// The aggregates of the command this transfer (a CBW) opens.
    pub(super) fn opened(&self) -> [i64; N_AGG] {
        let mut a = [0; N_AGG]; // LAST, N_CSW, DATA_BYTES, STALLS: 0
        a[FIRST] = self.k;
        a[CSW_K] = -1;
        (a[STS_S], a[STS_C], a[DATA_S], a[DATA_C]) = (NULL, NULL, NULL, NULL);
        a[DATA_IN] = -1; // direction unknown
        a
    }

    /// This transfer (of role `is_cbw`, `is_csw`) added to its command's aggregates `a`.
    /// Status stage: the CSW, and failed reads of CSW size before it. Data: the other
    /// transfers; bytes only from those that completed (status 0 or -EREMOTEIO). Returns
    /// whether it is the command's first CSW (whose bytes the caller keeps).
    pub(super) fn add_to(&self, a: &mut [i64], is_cbw: bool, is_csw: bool) -> bool {
        let (has_status, st) = (self.has_status, self.status);
        let first_csw = is_csw && a[N_CSW] == 0;
        if first_csw {
            a[CSW_K] = self.k;
            a[STS_C] = self.complete;
        }
        if is_csw {
            a[N_CSW] += 1;
        }
        let retry_known = !self.dir_in || is_csw || (self.req != NULL && self.req != CSW_BYTES as i64)
            || (has_status && st == 0);
        let retry = self.dir_in && !is_csw && self.req == CSW_BYTES as i64 && has_status && st != 0;
        if is_csw || retry {
            a[STS_S] = min_t(a[STS_S], self.submit);
        }
        if !is_cbw && !is_csw && retry_known {
            a[DATA_S] = min_t(a[DATA_S], self.submit);
            a[DATA_C] = max_t(a[DATA_C], self.complete);
            if has_status && (st == 0 || st == EREMOTEIO) && self.act != NULL {
                a[DATA_BYTES] = a[DATA_BYTES].wrapping_add(self.act);
            }
            if a[DATA_IN] < 0 {
                a[DATA_IN] = if self.dir_in { 1 } else { 0 };
            }
        }
        if has_status && st == EPIPE {
            a[STALLS] += 1;
        }
        first_csw
    }
}

#[inline(always)]
pub(super) fn min_t(cur: i64, v: i64) -> i64 {
    if v != NULL && (cur == NULL || v < cur) { v } else { cur }
}

/// Where the COMMAND stage ends: its URB's completion, or the data's completion when the host
/// saw that first (UAS writes: the data OUT URB is queued before the command IU and its
/// completion is reported before the command IU's; the data cannot end before the command
/// reached the device, so the command's own completion was reported late).
#[inline(always)]
pub(super) fn command_end(cmd_c: i64, data_c: i64) -> i64 {
    if data_c != NULL && cmd_c != NULL && data_c < cmd_c { data_c } else { cmd_c }
}

#[inline(always)]
pub(super) fn max_t(cur: i64, v: i64) -> i64 {
    if v != NULL && (cur == NULL || v > cur) { v } else { cur }
}

/// A command's stage boundaries from its URB times (NULL unknown): (the COMMAND stage's end,
/// the DATA stage's start, the STATUS stage's start). Data starts when submitted, not
/// before the command ended; status starts when its URB was submitted, not before the data
/// (or the command) ended.
#[inline(always)]
pub(super) fn stage_bounds_of(cmd_c: i64, data_s: i64, data_c: i64, sts_s: i64) -> (i64, i64, i64) {
    let c0 = command_end(cmd_c, data_c);
    (c0, max_t(data_s, c0), max_t(sts_s, if data_c != NULL { data_c } else { c0 }))
}

/// stage_bounds_of over the commands' columns (scsitrace/usb/stages.py `_with_stages`; by
/// name: `cmd_c`, `data_s`, `data_c`, `sts_s`, null unknown): `_c0`, `_d0`, `_s0`.
#[pyfunction]
fn stage_bounds(py: Python, commands: Table) -> PyResult<Columns> {
    let (cmd_c, data_s, data_c, sts_s) = (commands.i64s_or_null("cmd_c")?, commands.i64s_or_null("data_s")?,
                                          commands.i64s_or_null("data_c")?, commands.i64s_or_null("sts_s")?);
    let n = commands.len();
    let (c0, d0, s0) = py.allow_threads(|| {
        let (mut c0, mut d0, mut s0) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            let (c, d, s) = stage_bounds_of(cmd_c[i], data_s[i], data_c[i], sts_s[i]);
            c0.push(c);
            d0.push(d);
            s0.push(s);
        }
        (c0, d0, s0)
    });
    Columns::new(vec![("_c0", ints_or_null(c0)), ("_d0", ints_or_null(d0)), ("_s0", ints_or_null(s0))])
}

/// scsitrace/usb/bot.py BOT_AGGREGATES, in the order of the aggregate indexes above.
const AGG_NAMES: [&str; N_AGG] = ["first", "last", "csw", "n_csw", "sts_s", "sts_c", "data_s", "data_c",
                                  "data_bytes", "stalls", "data_in"];

/// Bulk-Only commands from transfers in time order (scsitrace/usb/bot.py bot_pass; the
/// transfers' columns by name, with each one's `device` id, < `n_devices`) and their URBs'
/// data: a `BotCommands` (per command the aggregates by name (AGG_NAMES) and `csw_size`
/// (-1: none), `cbw` (31 bytes each), `csw` (the first CSW's 13 bytes); per transfer
/// `kind`, its class).
#[pyfunction]
fn bot_pass(py: Python, xf: Table, urbs: Table, n_devices: usize) -> PyResult<BotCommands> {
    let (xfer, dir_in, device, data_row) = (xf.values::<UInt8Type>("xfer")?, xf.values::<UInt8Type>("dir_in")?,
                                            xf.i64s("device")?, xf.i64s_or_null("data_row")?);
    if device.iter().any(|&d| d < 0 || d as usize >= n_devices) {
        return Err(pyo3::exceptions::PyValueError::new_err("bot_pass: a device id below n_devices for each transfer"));
    }
    let (submit_ns, complete_ns, status, req_len, actual) = (
        xf.i64s_or_null("submit_ns")?, xf.i64s_or_null("complete_ns")?, xf.i64s_or_null("status")?,
        xf.i64s_or_null("req_len")?, xf.i64s_or_null("actual")?);
    let (xfer, dir_in, device, data_row) = (&xfer[..], &dir_in[..], &device[..], &data_row[..]);
    let u = Urbs::read(&urbs)?;
    let u = &u;
    let n = xfer.len();
    if device.len() != n {
        return Err(pyo3::exceptions::PyValueError::new_err("bot_pass: transfer columns of unequal lengths"));
    }
    // sized for the worst case (a CBW per transfer): calloc'd pages untouched cost nothing
    let mut ints_v = vec![0i64; N_AGG * n];
    let (mut cbw_v, mut csw_v) = (vec![0u8; n * CBW_BYTES], vec![0u8; n * CSW_BYTES]);
    let (mut csw_size_v, mut kind_v) = (vec![0i64; n], vec![0i8; n]);
    let (ints, cbw, csw, csw_size, kind) =
        (&mut ints_v[..], &mut cbw_v[..], &mut csw_v[..], &mut csw_size_v[..], &mut kind_v[..]);
    let m = py.allow_threads(move || {
        let stride = n;
        let mut bot = vec![false; n_devices];
        let mut before_cbw = false;
        let mut acc = vec![0i64; n_devices * N_AGG];
        let mut current = vec![-1i64; n_devices];
        let close = |acc: &[i64], d: usize, ints: &mut [i64], c: usize| {
            for j in 0..N_AGG {
                ints[j * stride + c] = acc[d * N_AGG + j];
            }
        };
        let mut m = 0usize;
        for k in 0..n {
            if xfer[k] != 3 {
                continue;
            }
            let d = device[k] as usize;
            let r = data_row[k];
            let data = if r >= 0 { u.data(r as usize) } else { None };
            let (size, head) = size_and_head(data);
            let x = Bulk { k: k as i64, dir_in: dir_in[k] != 0, size, head, submit: submit_ns[k], complete: complete_ns[k],
                           has_status: status[k] != NULL, status: status[k] as i32, req: req_len[k], act: actual[k] };
            let (is_cbw, is_csw) = x.role();
            if is_cbw {
                bot[d] = true;
                cbw[m * CBW_BYTES..(m + 1) * CBW_BYTES].copy_from_slice(&data.unwrap_or_default()[..CBW_BYTES]);
                if current[d] >= 0 {
                    close(&acc, d, ints, current[d] as usize);
                }
                acc[d * N_AGG..(d + 1) * N_AGG].copy_from_slice(&x.opened());
                csw_size[m] = -1;
                current[d] = m as i64;
                m += 1;
            }
            let c = current[d];
            if c < 0 {
                kind[k] = if is_csw { BEFORE_CBW_CSW } else { BEFORE_CBW_DATA };
                before_cbw = true;
                continue;
            }
            let c = c as usize;
            if x.add_to(&mut acc[d * N_AGG..(d + 1) * N_AGG], is_cbw, is_csw) {
                csw_size[c] = size;
                let take = data.map_or(0, |d| d.len().min(CSW_BYTES));
                csw[c * CSW_BYTES..c * CSW_BYTES + take].copy_from_slice(&data.unwrap_or_default()[..take]);
            }
        }
        for d in 0..n_devices {
            if current[d] >= 0 {
                acc[d * N_AGG + LAST] = 1;
                close(&acc, d, ints, current[d] as usize);
            }
        }
        if before_cbw {
            for k in 0..n {
                if xfer[k] == 3 && !bot[device[k] as usize] {
                    kind[k] = NOT_BOT;
                }
            }
        }
        m
    });
    cbw_v.truncate(m * CBW_BYTES);
    csw_v.truncate(m * CSW_BYTES);
    csw_size_v.truncate(m);
    let agg = (0..N_AGG).map(|j| ints_v[j * n..j * n + m].to_vec()).collect();
    Ok(BotCommands { commands: Py::new(py, aggregates(agg, csw_size_v, Vec::new())?)?,
                     cbw: PyArray1::from_vec_bound(py, cbw_v).unbind(), csw: PyArray1::from_vec_bound(py, csw_v).unbind(),
                     kind: PyArray1::from_vec_bound(py, kind_v).unbind() })
}

/// Bulk-Only commands as the passes hand them over (`bot_pass`, the streamed machine):
/// `commands`, a row each (`aggregates`); `cbw` (31 bytes a command) and `csw` (the first
/// CSW's 13 bytes); per transfer (bot_pass only) `kind`, its class.
#[pyclass(get_all)]
pub(super) struct BotCommands {
    pub commands: Py<Columns>,
    pub cbw: Py<PyArray1<u8>>,
    pub csw: Py<PyArray1<u8>>,
    pub kind: Py<PyArray1<i8>>,
}

/// The commands' aggregates (AGG_NAMES order) as columns: times null where unknown, `last`
/// as 0/1, `csw` (the CSW's transfer) null without one, `data_in` null where no data stage
/// said (else 1 IN, 0 OUT); and `csw_size` (null: no CSW); then the `extra` columns.
pub(super) fn aggregates(agg: Vec<Vec<i64>>, csw_size: Vec<i64>, extra: Vec<(&'static str, arrow_array::ArrayRef)>)
                         -> PyResult<Columns> {
    let mut cols: Vec<(&str, arrow_array::ArrayRef)> = Vec::with_capacity(N_AGG + 1);
    for (j, col) in agg.into_iter().enumerate() {
        let array = match j {
            STS_S | STS_C | DATA_S | DATA_C => ints_or_null(col),
            CSW_K | DATA_IN => ints_or_null(col.into_iter().map(|v| if v < 0 { NULL } else { v }).collect()),
            _ => ints(col),
        };
        cols.push((AGG_NAMES[j], array));
    }
    cols.push(("csw_size", ints_or_null(csw_size.into_iter().map(|v| if v < 0 { NULL } else { v }).collect())));
    cols.extend(extra);
    Columns::new(cols)
}

#[inline(always)]
pub(super) fn le32(rows: &[u8], at: usize) -> i64 {
    rows[at] as i64 | (rows[at + 1] as i64) << 8 | (rows[at + 2] as i64) << 16 | (rows[at + 3] as i64) << 24
}

/// Per Bulk-Only command (scsitrace/usb/bot.py bot_fields): from its `commands` row (by
/// name: `csw_size` (null: no CSW), `n_csw`, `last`, `sts_c`) and its `cbw` and `csw` bytes (31 and 13 a
/// command), the CBW tag (`usb_tag`), transfer length (`bytes`), LUN, CDB length (`cb_len`),
/// CSW tag, residue and status (`csw_status`; null where the CSW's bytes hold none), unpaired
/// reason code (`reason`, `bot_reason`), direction flag (`flag_in`, 0/1).
#[pyfunction]
fn bot_fields(py: Python, commands: Table, cbw: PyReadonlyArray1<u8>, csw: PyReadonlyArray1<u8>) -> PyResult<Columns> {
    let (cbw, csw) = (cbw.as_slice()?, csw.as_slice()?);
    // a command without a CSW has no csw_size: NULL, below every size the fields need
    let (csw_size, n_csw, last, sts_c) = (commands.i64s_or_null("csw_size")?, commands.i64s("n_csw")?,
                                          commands.i64s("last")?, commands.i64s_or_null("sts_c")?);
    let n = commands.len();
    if cbw.len() != n * CBW_BYTES || csw.len() != n * CSW_BYTES {
        return Err(pyo3::exceptions::PyValueError::new_err("bot_fields: CBW and CSW bytes of each command"));
    }
    const NAMES: [&str; 9] = ["usb_tag", "bytes", "lun", "cb_len", "csw_tag", "residue", "csw_status", "reason", "flag_in"];
    let cols = py.allow_threads(|| {
        let mut cols: Vec<Vec<i64>> = (0..NAMES.len()).map(|_| Vec::with_capacity(n)).collect();
        for c in 0..n {
            let (b, s) = (c * CBW_BYTES, c * CSW_BYTES);
            let (tag, csw_tag) = (le32(cbw, b + 4), le32(csw, s + 4));
            let size = csw_size[c];
            let row = [tag, le32(cbw, b + 8), (cbw[b + 13] & 0x0F) as i64, (cbw[b + 14] & 0x1F) as i64,
                       if size < 8 { NULL } else { csw_tag }, if size < 12 { NULL } else { le32(csw, s + 8) },
                       if size <= 12 { NULL } else { csw[s + 12] as i64 },
                       bot_reason(n_csw[c], last[c] == 1, size, csw_tag, tag, sts_c[c]) as i64,
                       (cbw[b + 12] & 0x80 != 0) as i64];
            for (col, v) in cols.iter_mut().zip(row) {
                col.push(v);
            }
        }
        cols
    });
    Columns::new(NAMES.iter().zip(cols).map(|(name, col)| (*name, ints_or_null(col))).collect())
}

/// The phases of a command's stage pieces, by phase code (scsitrace/usb/stages.py reads
/// PIECE_PHASES of the module); tilings add IDLE (and the streamed one "~carried") after them.
pub(super) const PIECE_PHASES: [&str; 5] = ["COMMAND", "DATA IN", "DATA OUT", "GAP", "STATUS"];
const COMMAND: usize = 0;
const DATA_IN_PHASE: usize = 1;
const DATA_OUT_PHASE: usize = 2;
const GAP: usize = 3;
const STATUS: usize = 4;

/// A command's piece `block` (0 COMMAND, 1 GAP to its data or status, 2 DATA, 3 GAP after
/// the data, 4 STATUS): (start, end, its phase code: index into PIECE_PHASES).
/// One command's stage times (ns; NULL unknown) and direction: what its pieces are cut from.
#[derive(Clone, Copy)]
pub(super) struct StageTimes {
    pub cmd_s: i64,
    pub cmd_c: i64,
    pub d0: i64,
    pub s0: i64,
    pub data_c: i64,
    pub sts_c: i64,
    pub data_in: bool,
}

#[inline(always)]
pub(super) fn piece(block: usize, t: &StageTimes) -> (i64, i64, usize) {
    if t.cmd_s == NULL {
        return (NULL, NULL, COMMAND);
    }
    match block {
        0 => (t.cmd_s, t.cmd_c, COMMAND),
        1 => (t.cmd_c, if t.d0 != NULL { t.d0 } else { t.s0 }, GAP),
        2 if t.data_c != NULL => (t.d0, t.data_c, if t.data_in { DATA_IN_PHASE } else { DATA_OUT_PHASE }),
        3 if t.data_c != NULL => (t.data_c, t.s0, GAP),
        4 => (t.s0, t.sts_c, STATUS),
        _ => (NULL, NULL, COMMAND),
    }
}

/// The per-command columns of scsitrace/usb/stages.py `CommandStages`, read by name from
/// its frame (times null where unknown; `data_in` 0/1).
struct Stages {
    dev: Vec<i64>,
    io: Vec<i64>,
    cmd_s: Vec<i64>,
    cmd_c: Vec<i64>,
    d0: Vec<i64>,
    s0: Vec<i64>,
    data_c: Vec<i64>,
    sts_c: Vec<i64>,
    data_bytes: Vec<i64>,
    data_in: Vec<i64>,
}

impl Stages {
    fn of(t: &Table) -> PyResult<Stages> {
        Ok(Stages { dev: t.i64s("dev")?.into_owned(), io: t.i64s_or_null("io")?, cmd_s: t.i64s_or_null("cmd_s")?,
                    cmd_c: t.i64s_or_null("cmd_c")?, d0: t.i64s_or_null("d0")?, s0: t.i64s_or_null("s0")?,
                    data_c: t.i64s_or_null("data_c")?, sts_c: t.i64s_or_null("sts_c")?,
                    data_bytes: t.i64s_or_null("data_bytes")?, data_in: t.i64s("data_in")?.into_owned() })
    }
}

impl Stages {
    #[inline(always)]
    fn times(&self, i: usize) -> StageTimes {
        StageTimes { cmd_s: self.cmd_s[i], cmd_c: self.cmd_c[i], d0: self.d0[i], s0: self.s0[i],
                     data_c: self.data_c[i], sts_c: self.sts_c[i], data_in: self.data_in[i] == 1 }
    }
}

/// `stage_pieces`' result: the pieces (tiling.PIECE_COLUMNS: device, io, start, end, phase,
/// bytes, null outside DATA; and each piece's `block`: 0 COMMAND, 1 GAP before the data, 2 DATA,
/// 3 GAP, 4 STATUS) and whether they came out in (device, start, block) order.
#[pyclass(get_all)]
struct StagePieces {
    pieces: Py<Columns>,
    in_order: bool,
}

/// The stage pieces of the commands, block by block or command by command (`by_command`).
#[pyfunction]
fn stage_pieces(py: Python, commands: Table, by_command: bool) -> PyResult<StagePieces> {
    let c = Stages::of(&commands)?;
    let (cols, in_order) = py.allow_threads(|| {
        let n = c.dev.len();
        let mut cols: [Vec<i64>; 7] = std::array::from_fn(|_| Vec::with_capacity(5 * n));
        let mut in_order = true;
        let (mut prev_dev, mut prev_start, mut prev_block) = (-1i64, NULL, -1i64);
        for a in 0..5 * n {
            let (block, i) = if by_command { (a % 5, a / 5) } else { (a / n, a % n) };
            let (start, end, stage) = piece(block, &c.times(i));
            if start == NULL || end == NULL {
                continue;
            }
            let b = block as i64;
            let row = [c.dev[i], c.io[i], start, end, stage as i64, if block == 2 { c.data_bytes[i] } else { NULL }, b];
            for (col, v) in cols.iter_mut().zip(row) {
                col.push(v);
            }
            let after = c.dev[i] > prev_dev
                || (c.dev[i] == prev_dev && (start > prev_start || (start == prev_start && b >= prev_block)));
            in_order = in_order && after;
            prev_dev = c.dev[i];
            prev_start = start;
            prev_block = b;
        }
        (cols, in_order)
    });
    let [dev, io, start, end, phase, bytes, block] = cols;
    let pieces = Columns::new(vec![("dev", ints(dev)), ("io", ints_or_null(io)), ("start", ints(start)),
                                   ("end", ints(end)), ("phase", ints(phase)), ("bytes", ints_or_null(bytes)),
                                   ("block", ints(block))])?;
    Ok(StagePieces { pieces: Py::new(py, pieces)?, in_order })
}

/// The tiling totals (time and segments per phase code, scsitrace/tiling.py `tile` with
/// segments=False; phase `idle` for IDLE, `n_phases` codes in all) of the pieces `stage_pieces`
/// lists command by command, tiled as they are listed, without a piece table, provided they
/// come in (device, start, block) order: (totals, counts, whether they did (else the totals are
/// incomplete: list and tile the pieces), how many devices have segments). The placing rule is
/// the bus tiling's `DeviceTiling` (tests/test_usbmon.py checks the totals against tiling.tile's).
#[pyfunction]
fn stage_totals(py: Python, commands: Table, tiling: StageTiling) -> PyResult<StageTotals> {
    let c = Stages::of(&commands)?;
    let StageTiling { idle, n_phases, elapsed } = tiling;
    if idle >= n_phases {
        return Err(pyo3::exceptions::PyValueError::new_err("stage_totals: idle must be a phase code"));
    }
    let (totals, counts, in_order, devices) = py.allow_threads(|| {
        let mut totals = vec![0i64; n_phases];
        let mut counts = vec![0i64; n_phases];
        let close = |tiling: &DeviceTiling, totals: &mut [i64], counts: &mut [i64]| -> i64 {
            let Some(last_end) = tiling.end() else { return 0 };
            if elapsed > last_end {
                totals[idle] += elapsed - last_end;
                counts[idle] += 1;
            }
            1
        };
        let mut devices = 0i64;
        let (mut prev_dev, mut prev_start, mut prev_block) = (-1i64, NULL, -1i64);
        let mut tiling = DeviceTiling::new();
        for i in 0..c.dev.len() {
            let t = c.times(i);
            for block in 0..5usize {
                let (start, end, stage) = piece(block, &t);
                if start == NULL || end == NULL {
                    continue;
                }
                let b = block as i64;
                let after = c.dev[i] > prev_dev
                    || (c.dev[i] == prev_dev && (start > prev_start || (start == prev_start && b >= prev_block)));
                if !after {
                    return (totals, counts, false, 0);
                }
                if c.dev[i] != prev_dev {
                    devices += close(&tiling, &mut totals, &mut counts);
                    tiling = DeviceTiling::new();
                }
                prev_dev = c.dev[i];
                prev_start = start;
                prev_block = b;
                let Some((idle_from, s)) = tiling.place(start, end) else { continue };
                if idle_from < s {
                    totals[idle] += s - idle_from;
                    counts[idle] += 1;
                }
                totals[stage] += end - s;
                counts[stage] += 1;
            }
        }
        devices += close(&tiling, &mut totals, &mut counts);
        (totals, counts, true, devices)
    });
    Ok(StageTotals { totals, counts, in_order, devices })
}

/// How `stage_totals` tiles (by name): the phase code of IDLE (`idle`), how many codes
/// (`n_phases`), the time tiled (`elapsed`).
#[derive(FromPyObject)]
struct StageTiling {
    #[pyo3(attribute)]
    idle: usize,
    #[pyo3(attribute)]
    n_phases: usize,
    #[pyo3(attribute)]
    elapsed: i64,
}

/// `stage_totals`' result: time and segments per phase code, whether the pieces came in
/// order (else the totals are incomplete), how many devices have segments.
#[pyclass(get_all)]
struct StageTotals {
    totals: Vec<i64>,
    counts: Vec<i64>,
    in_order: bool,
    devices: i64,
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(transfers, m)?)?;
    m.add_function(wrap_pyfunction!(bot_pass, m)?)?;
    m.add_function(wrap_pyfunction!(bot_fields, m)?)?;
    m.add_function(wrap_pyfunction!(stage_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(stage_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(stage_totals, m)?)?;
    m.add("BOT_REASONS", BOT_REASONS.to_vec())?;
    m.add("PIECE_PHASES", PIECE_PHASES.to_vec())?;
    Ok(())
}
