//! The streaming btt stage machine (scsitrace/block/machine.py): events in processing order,
//! fed as chunks of any size, carried across chunk edges; memory bounded by what is in flight.
//!
//! Rules (docs/blktrace.md, "The stage machine"): a Q is tracked by (device, start sector),
//! a later Q at the same start replaces it; G, S, I, M/F (and an A, on the device it came
//! from) find their Q by that key, else the latest live Q of the device containing the
//! sector among its last LOOKBACK Qs; a D applies to every live Q its range contains (I2D,
//! else M2D), a C completes every live Q its range contains (Q2C, D2C); a sample is
//! `to - from`, or 1 ns when `to <= from` (btt's tdelta). btt's pre-culling: a device's
//! events before its first Q or A, Q G S I M D C records of 0 bytes, BLK_TC_PC records.
//!
//! Live Qs of a device sit in an ordered map by start sector: the key lookup and the range
//! of a D or C are one ordered-map query each. Besides the machine, per device, process and
//! over all: btt's avg_info of every stage (count, min, max, sum), record counts, queue
//! depth, dispatched sizes, seeks, busy runs (the union of D..C intervals, closed when no
//! request in flight can touch them any more), the latency samples (crate::stat::Samples),
//! and the per-I/O rows, handed out in Q order as they finish.
use std::collections::VecDeque;

use arrow_array::types::{Int16Type, UInt32Type};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::arrow::{ints, ints_or_null, values_of, Columns, NULL};
use crate::hash::IntMap;
use crate::stat::Samples;

const NONE: i64 = NULL;            // a missing time inside the machine: a null in the columns it hands out
const SECTOR: i64 = 512;
const LOOKBACK: usize = 256; // Qs a containment lookup looks back at, per device
const TC_PC: u32 = (1 << 9) << 16;
const TC_WRITE: u32 = (1 << 1) << 16;
const SEEK_EXACT: usize = 1 << 21; // seek distances kept for an exact median, per device
const PENDING_RUNS: usize = 1 << 16; // busy runs waiting per device for requests in flight
const READY_ROWS: usize = 1 << 18; // finished rows waiting for an older Q still in flight

const K_OTHER: u8 = 0;
const K_Q: u8 = 1;
const K_G: u8 = 2;
const K_S: u8 = 3;
const K_I: u8 = 4;
const K_M: u8 = 5;
const K_D: u8 = 6;
const K_C: u8 = 7;
const K_A: u8 = 8;
const K_R: u8 = 9;

/// What each action code (blktrace __BLK_TA_*) is to the machine.
fn kind_of(code: u32) -> u8 {
    match code {
        1 => K_Q,
        2 | 3 => K_M,
        4 => K_G,
        5 => K_S,
        6 => K_R,
        7 => K_D,
        8 => K_C,
        12 => K_I,
        15 => K_A,
        _ => K_OTHER,
    }
}

// scsitrace/block/stats.py STAT_NAMES
pub const N_NAMES: usize = 13;
const Q2QDM: usize = 0;
const Q2ADM: usize = 1;
const Q2CDM: usize = 2;
const Q2Q: usize = 3;
const Q2A: usize = 4;
const Q2G: usize = 5;
const S2G: usize = 6;
const G2I: usize = 7;
const Q2M: usize = 8;
const I2D: usize = 9;
const M2D: usize = 10;
const D2C: usize = 11;
const Q2C: usize = 12;

const SEEN_G: u8 = 1;
const SEEN_S: u8 = 2;
const SEEN_I: u8 = 4;
const SEEN_M: u8 = 8;
const SEEN_D: u8 = 16;
const CLOSED: u8 = 32;
const JOINED: u8 = 64; // a request's first bio that a later bio front-merged into (F): no longer its start
const SEEN_A: u8 = 128;

#[inline]
fn tdelta(from: i64, to: i64) -> i64 {
    if from < to {
        to - from
    } else {
        1
    }
}


/// btt's avg_info of every stage name: count, min, max, sum.
#[derive(Clone)]
struct Totals([[i64; 4]; N_NAMES]);

impl Totals {
    fn new() -> Totals {
        Totals([[0, i64::MAX, i64::MIN, 0]; N_NAMES])
    }
    #[inline]
    fn add(&mut self, name: usize, v: i64) {
        let t = &mut self.0[name];
        t[0] += 1;
        t[1] = t[1].min(v);
        t[2] = t[2].max(v);
        t[3] += v;
    }
}

/// One per-I/O row (scsitrace/block/tables.py ios_frame's input), NONE where it has none.
#[derive(Clone, Copy)]
struct Row {
    q: i64,
    device: u32,
    action: u32,
    sector: i64,
    bytes: i64,
    pid: i64,
    q_t: i64,
    q2g: i64,
    g2i: i64,
    q2m: i64,
    i2d: i64,
    d_t: i64,
    c_t: i64,
    /// the completion's error field (an errno, negative; 0: none)
    c_error: i16,
}

/// What a machine keeps and hands out (scsitrace/block/machine.py `MachineOptions`, read by
/// attribute): device: only that dev_t; lo, hi: events with lo <= t_ns <= hi; pids: only the
/// Qs (and their samples, rows, tables) of these pids; emit_rows: hand the finished per-I/O
/// rows out (take_rows); keep_rows: per-I/O rows (and busy runs) kept for the reports, evenly
/// thinned beyond it (0: none kept, for a run whose reports read none); pending_runs, ready_rows: the bounds of the busy runs waiting per device
/// and of the finished rows waiting behind an older Q (None: PENDING_RUNS, READY_ROWS; tests
/// lower them to reach the fallbacks); btt_compat: btt's pairing where requests in flight
/// meet on the same sectors.
#[derive(FromPyObject)]
pub struct MachineOptions {
    #[pyo3(attribute)]
    device: Option<u32>,
    #[pyo3(attribute)]
    lo: Option<i64>,
    #[pyo3(attribute)]
    hi: Option<i64>,
    #[pyo3(attribute)]
    pids: Option<Vec<i64>>,
    #[pyo3(attribute)]
    emit_rows: bool,
    #[pyo3(attribute)]
    keep_rows: usize,
    #[pyo3(attribute)]
    pending_runs: Option<usize>,
    #[pyo3(attribute)]
    ready_rows: Option<usize>,
    #[pyo3(attribute)]
    btt_compat: bool,
}

/// What the tables are built from, once the stream has ended (`Machine.finish`): per device
/// (sorted by dev_t) and per process (in order of their first Q) arrays, the latency samples,
/// the busy runs kept, the kept per-I/O rows and the counts of what the bounds cost.
#[pyclass(get_all, module = "scsitrace._native.block")]
pub struct Run {
    events: i64,
    errors: Py<Columns>,        // kept requests completed with an error: error, n
    all_devices: Vec<u32>,
    all_t_min: Option<i64>,     // the first and last event time of the trace (before the filters)
    all_t_max: Option<i64>,
    start_ns: i64,
    end_ns: i64,
    devices: Py<PyArray1<i64>>,
    dm: Vec<bool>,
    counts: Py<PyArray1<i64>>,  // (devices, 256) records per action code, flat
    depth_seen: Vec<bool>,
    max_depth: Py<PyArray1<i64>>,
    depth_held: Py<PyArray1<i64>>,
    seek_mean: Vec<Option<f64>>,
    seek_median: Vec<Option<f64>>,
    seek_median_exact: bool,
    seeks: Vec<i64>,
    done: Py<PyArray1<i64>>,
    bytes: Py<PyArray1<i64>>,
    writes: Py<PyArray1<i64>>,
    busy_ns: Py<PyArray1<i64>>,
    per_dev: Py<PyArray1<i64>>, // (N_NAMES, devices, 4) totals, flat
    overall: Py<PyArray1<i64>>, // (N_NAMES, 1, 4)
    pids: Py<PyArray1<i64>>,
    pid_kept: Vec<bool>,
    pid_queued: Py<PyArray1<i64>>,
    pid_done: Py<PyArray1<i64>>,
    pid_bytes: Py<PyArray1<i64>>,
    pid_q2c_sum: Py<PyArray1<i64>>,
    pid_q2c_max: Py<PyArray1<i64>>,
    pid_d2c_sum: Py<PyArray1<i64>>,
    pid_d2c_n: Py<PyArray1<i64>>,
    per_pid: Py<PyArray1<i64>>, // (N_NAMES, pids, 4)
    sizes: Py<PyArray1<i64>>,   // (64, 2): dispatched requests up to 2**k bytes, writes among them
    kept_qs: i64,
    any_kept_dm: bool,
    q2c: Py<Samples>,
    d2c: Py<Samples>,
    q2c_dm: Py<Samples>,
    d2c_dm: Py<Samples>,
    run_device: Py<PyArray1<u32>>,
    run_start: Py<PyArray1<i64>>,
    run_end: Py<PyArray1<i64>>,
    runs_dropped: i64,
    runs_forced: i64,
    rows: Py<KeptRows>,
    rows_stride: i64,
    rows_out_of_order: i64,
    ambiguous: i64,
    ambiguous_same: i64,
}

/// One chunk of events as it crosses from Python: scsitrace/block/events.py MACHINE_COLUMNS,
/// each column read by its name.
#[derive(FromPyObject)]
pub struct EventChunk<'py> {
    #[pyo3(item)]
    t_ns: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    action: PyReadonlyArray1<'py, u32>,
    #[pyo3(item)]
    device: PyReadonlyArray1<'py, u32>,
    #[pyo3(item)]
    sector: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    bytes: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    pid: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    pdu_dev: PyReadonlyArray1<'py, u32>,
    #[pyo3(item)]
    pdu_sector: PyReadonlyArray1<'py, i64>,
    #[pyo3(item)]
    error: PyReadonlyArray1<'py, i16>,
}

/// The chunk's columns as slices of one length.
#[derive(Clone, Copy)]
struct Events<'a> {
    t: &'a [i64],
    action: &'a [u32],
    device: &'a [u32],
    sector: &'a [i64],
    nbytes: &'a [i64],
    pid: &'a [i64],
    pdu_dev: &'a [u32],
    pdu_sector: &'a [i64],
    error: &'a [i16],
}

impl<'py> EventChunk<'py> {
    fn slices(&self) -> PyResult<Events<'_>> {
        let e = Events { t: self.t_ns.as_slice()?, action: self.action.as_slice()?, device: self.device.as_slice()?,
                         sector: self.sector.as_slice()?, nbytes: self.bytes.as_slice()?, pid: self.pid.as_slice()?,
                         pdu_dev: self.pdu_dev.as_slice()?, pdu_sector: self.pdu_sector.as_slice()?,
                         error: self.error.as_slice()? };
        let n = e.t.len();
        if [e.action.len(), e.device.len(), e.sector.len(), e.nbytes.len(), e.pid.len(), e.pdu_dev.len(),
            e.pdu_sector.len(), e.error.len()].iter().any(|&m| m != n) {
            return Err(pyo3::exceptions::PyValueError::new_err("block machine: columns of different lengths"));
        }
        Ok(e)
    }
}

#[derive(Clone, Copy)]
enum RowSlot {
    Waiting,
    Done(u32),
    Skip,
}

struct Bio {
    dev: u32,
    pid: u32,
    kept: bool,
    flags: u8,
    end: i64,
    g: i64,
    s: i64,
    i: i64,
    m: i64,
    row: Row,
}

/// The union of one device's D..C intervals: runs still open to merging (`pending`: disjoint,
/// by start), the requests in flight by their last D time (`inflight`, in D order: processing
/// order is time order; entries whose request has moved on are dropped lazily), and the time
/// of the runs closed.
struct Busy {
    pending: VecDeque<(i64, i64)>,
    inflight: VecDeque<(i64, i64, u32)>, // (d_t, q, slot)
    compact_at: usize,
    busy_ns: i64,
}

impl Busy {
    fn add(&mut self, mut s: i64, mut e: i64) {
        if self.pending.back().map_or(true, |&(_, b)| b < s) {
            self.pending.push_back((s, e)); // after every run: nothing to merge with
            return;
        }
        let i = self.pending.partition_point(|&(_, b)| b < s);
        let mut j = i;
        while j < self.pending.len() && self.pending[j].0 <= e {
            s = s.min(self.pending[j].0);
            e = e.max(self.pending[j].1);
            j += 1;
        }
        self.pending.drain(i..j);
        self.pending.insert(i, (s, e));
    }
}

/// One device's live bios by start sector: a sorted vector whose front advances lazily
/// (requests mostly arrive in order and leave oldest first, so inserts and removals shift
/// little, and the front's removal is a step; the vector is compacted once the gap in front
/// is as long as what follows it). `entries()` is the map, oldest first at equal starts.
struct LiveMap {
    v: Vec<(i64, u32)>,
    front: usize,
}

impl LiveMap {
    fn new() -> LiveMap {
        LiveMap { v: Vec::new(), front: 0 }
    }
    #[inline(always)]
    fn entries(&self) -> &[(i64, u32)] {
        &self.v[self.front..]
    }
    /// The index of the first entry at or after k.
    #[inline(always)]
    fn lower_bound(&self, k: i64) -> usize {
        self.entries().partition_point(|e| e.0 < k)
    }
    #[inline]
    fn find(&self, k: i64) -> Result<usize, usize> {
        let e = self.entries();
        match e.last() {
            Some(&(last, _)) if last < k => Err(e.len()),
            _ => {
                let i = self.lower_bound(k);
                if i < e.len() && e[i].0 == k { Ok(i) } else { Err(i) }
            }
        }
    }
    #[inline]
    fn get(&self, k: i64) -> Option<u32> {
        self.find(k).ok().map(|i| self.entries()[i].1)
    }
    fn insert(&mut self, k: i64, v: u32) {
        match self.find(k) {
            Ok(i) => self.v[self.front + i].1 = v,
            Err(i) => self.v.insert(self.front + i, (k, v)),
        }
    }
    #[inline]
    fn remove_at(&mut self, i: usize) {
        if i > 0 {
            self.v.remove(self.front + i);
            return;
        }
        self.front += 1;
        if self.front == self.v.len() {
            self.v.clear();
            self.front = 0;
        } else if self.front >= 64 && 2 * self.front >= self.v.len() {
            self.v.drain(..self.front);
            self.front = 0;
        }
    }
    /// Removes k when it maps to v (among the entries at k, when several share it).
    fn remove_if(&mut self, k: i64, v: u32) {
        let (lo, hi) = self.equal_range(k);
        if let Some(i) = (lo..hi).find(|&i| self.entries()[i].1 == v) {
            self.remove_at(i);
        }
    }
    /// The entries at k: [lo, hi), oldest first.
    #[inline]
    fn equal_range(&self, k: i64) -> (usize, usize) {
        let e = self.entries();
        match e.last() {
            Some(&(last, _)) if last < k => (e.len(), e.len()),
            _ => {
                // the entries at k are mostly one or none: counted, or searched when many
                let lo = self.lower_bound(k);
                let mut hi = lo;
                while hi < e.len() && e[hi].0 == k {
                    hi += 1;
                    if hi - lo == 8 {
                        return (lo, lo + e[lo..].partition_point(|x| x.0 <= k));
                    }
                }
                (lo, hi)
            }
        }
    }
    /// Adds v at k after the entries already there (bios in flight on the same start sector).
    fn push(&mut self, k: i64, v: u32) {
        let at = self.equal_range(k).1;
        self.v.insert(self.front + at, (k, v));
    }
}

struct Dev {
    value: u32,
    dm: bool,
    started: bool,
    live: LiveMap,                // start sector -> bio slot
    recent: VecDeque<(i64, u32)>, // last LOOKBACK Qs (q, slot), newest first
    last_q_t: i64,
    counts: Box<[i64; 256]>,
    // queue depth
    depth_seen: bool,
    depth: i64,
    peak: i64,
    held: i64,
    depth_last: i64,
    // seeks between Ds
    seek_end: i64,
    seek_seen: bool,
    seek_sum: i128,
    seek_n: i64,
    seek_nonzero: i64,
    seek_exact: Vec<i64>,
    seek_hist: Option<Samples>,
    // requests of kept processes
    totals: Totals,
    done: i64,
    bytes: i64,
    writes: i64,
    busy: Busy,
}

struct Pid {
    value: i64,
    kept: bool,
    last_q_t: i64,
    totals: Totals,
    queued: i64,
    done: i64,
    bytes: i64,
    q2c_sum: i64,
    q2c_max: i64,
    d2c_sum: i64,
    d2c_n: i64,
}

#[pyclass(module = "scsitrace._native.block")]
pub struct Machine {
    c_error: i16,           // the error field of the C event being processed
    errors: Vec<(i16, i64)>,  // kept requests completed with an error: (error field, count)
    // filters
    device: Option<u32>,
    lo: Option<i64>,
    hi: Option<i64>,
    keep: Option<IntMap<i64, ()>>,
    emit_rows: bool,
    keep_rows: usize,
    // state
    devs: Vec<Dev>,
    last_dev: (u32, usize),
    pids: Vec<Pid>,
    pid_ids: IntMap<i64, u32>,
    bios: Vec<Bio>,
    free: Vec<u32>,
    hits: Vec<u32>,
    nq: i64,
    last_q_t: i64,
    overall: Totals,
    events: i64,
    all_devices: Vec<u32>,
    all_t: (i64, i64),
    t_min: i64,
    t_max: i64,
    sizes: [[i64; 2]; 64],
    q2c: Samples,
    d2c: Samples,
    q2c_dm: Samples,
    d2c_dm: Samples,
    any_kept_dm: bool,
    kept_qs: i64,
    // busy runs kept for the segments table
    runs: Vec<(u32, i64, i64)>,
    runs_dropped: i64,
    runs_forced: i64,
    // rows
    rows: VecDeque<RowSlot>, // per Q from rows_base on: in flight, finished (its bio slot), not kept
    rows_base: i64,
    out_rows: Vec<Row>,
    kept_rows: Vec<Row>,
    stride: i64,
    rows_out_of_order: i64,
    pending_runs: usize, // PENDING_RUNS unless a test sets it
    ready_rows: usize,   // READY_ROWS unless a test sets it
    btt_compat: bool,    // btt's pairing where requests in flight meet on the same sectors
    ambiguous: i64,      // D and C events whose range held bios of another request (own_request)
    ambiguous_same: i64, // G S I M A events at a start sector where several bios were in flight
}

impl Machine {
    fn dev_index(&mut self, value: u32) -> usize {
        if self.last_dev.0 == value && self.last_dev.1 < self.devs.len() {
            return self.last_dev.1;
        }
        let idx = match self.devs.iter().position(|d| d.value == value) {
            Some(i) => i,
            None => {
                let major = value >> 20;
                self.devs.push(Dev {
                    value,
                    dm: major == 9 || major == 253 || major == 254,
                    started: false,
                    live: LiveMap::new(),
                    recent: VecDeque::with_capacity(LOOKBACK + 1),
                    last_q_t: NONE,
                    counts: Box::new([0; 256]),
                    depth_seen: false,
                    depth: 0,
                    peak: i64::MIN,
                    held: 0,
                    depth_last: 0,
                    seek_end: 0,
                    seek_seen: false,
                    seek_sum: 0,
                    seek_n: 0,
                    seek_nonzero: 0,
                    seek_exact: Vec::new(),
                    seek_hist: None,
                    totals: Totals::new(),
                    done: 0,
                    bytes: 0,
                    writes: 0,
                    busy: Busy { pending: VecDeque::new(), inflight: VecDeque::new(), compact_at: 4096, busy_ns: 0 },
                });
                self.devs.len() - 1
            }
        };
        self.last_dev = (value, idx);
        idx
    }

    fn find_dev(&self, value: u32) -> Option<usize> {
        self.devs.iter().position(|d| d.value == value)
    }

    fn pid_index(&mut self, value: i64) -> u32 {
        if let Some(&p) = self.pid_ids.get(&value) {
            return p;
        }
        let p = self.pids.len() as u32;
        let kept = self.keep.as_ref().map_or(true, |k| k.contains_key(&value));
        self.pids.push(Pid {
            value,
            kept,
            last_q_t: NONE,
            totals: Totals::new(),
            queued: 0,
            done: 0,
            bytes: 0,
            q2c_sum: 0,
            q2c_max: i64::MIN,
            d2c_sum: 0,
            d2c_n: 0,
        });
        self.pid_ids.insert(value, p);
        p
    }

    /// A sample of a bio's stage (name, or its md/dm alternative) to its device, process and all.
    #[inline(always)]
    fn sample(&mut self, slot: u32, name: usize, v: i64) {
        let b = &self.bios[slot as usize];
        if !b.kept {
            return;
        }
        let (d, p) = (b.dev as usize, b.pid as usize);
        self.devs[d].totals.add(name, v);
        self.pids[p].totals.add(name, v);
        self.overall.add(name, v);
    }

    /// btt's dip_find_sec: the live Q at the sector, else the latest live Q of the device
    /// containing it among its last LOOKBACK Qs.
    fn lookup(&self, d: usize, sector: i64) -> Option<u32> {
        let dev = &self.devs[d];
        for &(q, slot) in dev.recent.iter().take(2) {
            // the newest Qs first: a live bio at the sector is the one the key finds
            let b = &self.bios[slot as usize];
            if b.row.q == q && b.flags & CLOSED == 0 && b.row.sector == sector {
                return Some(slot);
            }
        }
        if let Some(slot) = dev.live.get(sector) {
            return Some(slot);
        }
        self.containing(d, sector)
    }

    /// The latest live Q of device d containing the sector among its last LOOKBACK Qs.
    fn containing(&self, d: usize, sector: i64) -> Option<u32> {
        for &(q, slot) in self.devs[d].recent.iter() {
            let b = &self.bios[slot as usize];
            if b.row.q == q && b.flags & CLOSED == 0 && b.row.sector <= sector && sector < b.end {
                return Some(slot);
            }
        }
        None
    }

    /// The bio a G, S, I, M/F or A at `sector` (ending at `end`) belongs to: with several
    /// bios in flight at that start sector (not btt's rules: a later Q replaces the earlier
    /// there), the oldest of that size without this stage yet, else the oldest without it,
    /// else the newest; counted as an ambiguous pairing.
    fn lookup_stage(&mut self, d: usize, sector: i64, end: i64, flag: u8) -> Option<u32> {
        if !self.btt_compat {
            let live = &self.devs[d].live;
            let (lo, hi) = live.equal_range(sector);
            // one live bio at the sector: the one `lookup` finds (a bio not closed is in the
            // map at its start); none: only the containment search can find one
            if hi - lo == 1 {
                return Some(live.entries()[lo].1);
            }
            if hi == lo {
                return self.containing(d, sector);
            }
            if hi - lo > 1 {
                self.ambiguous_same += 1;
                let bios = &self.bios;
                let open = |slot: &u32| bios[*slot as usize].flags & flag == 0;
                let slots = || (lo..hi).map(|i| live.entries()[i].1);
                let pick = slots().find(|s| open(s) && bios[*s as usize].end == end).or_else(|| slots().find(open));
                return Some(pick.unwrap_or(live.entries()[hi - 1].1));
            }
        }
        self.lookup(d, sector)
    }

    #[inline]
    fn in_flight(&self, entry: &(i64, i64, u32)) -> bool {
        let b = &self.bios[entry.2 as usize];
        b.row.q == entry.1 && b.flags & CLOSED == 0 && b.row.d_t == entry.0
    }

    /// The earliest last-D time of device d's requests in flight.
    fn first_in_flight(&mut self, d: usize) -> Option<i64> {
        let mut inflight = std::mem::take(&mut self.devs[d].busy.inflight);
        while let Some(e) = inflight.front() {
            if self.in_flight(e) {
                break;
            }
            inflight.pop_front();
        }
        let first = inflight.front().map(|e| e.0);
        self.devs[d].busy.inflight = inflight;
        first
    }

    fn close(&mut self, slot: u32) {
        let (d, start, kept, q) = {
            let b = &mut self.bios[slot as usize];
            b.flags |= CLOSED;
            (b.dev as usize, b.row.sector, b.kept, b.row.q)
        };
        let dev = &mut self.devs[d];
        dev.live.remove_if(start, slot);
        if kept {
            if q >= self.rows_base {
                self.rows[(q - self.rows_base) as usize] = RowSlot::Done(slot);
                return; // the slot is freed when its row goes out
            }
            self.rows_out_of_order += 1;
            let row = self.bios[slot as usize].row;
            self.emit(row);
        }
        self.free.push(slot);
    }

    fn queue(&mut self, d: usize, t: i64, sector: i64, nbytes: i64, pid: i64, action: u32) {
        let q = self.nq;
        self.nq += 1;
        let p = self.pid_index(pid);
        let kept = self.pids[p as usize].kept;
        let dm = self.devs[d].dm;
        let name = if dm { Q2QDM } else { Q2Q };
        if kept {
            if q > 0 {
                self.overall.add(name, tdelta(self.last_q_t, t));
            }
            let last = self.devs[d].last_q_t;
            if last != NONE {
                self.devs[d].totals.add(name, tdelta(last, t));
            }
            let last = self.pids[p as usize].last_q_t;
            if last != NONE {
                self.pids[p as usize].totals.add(name, tdelta(last, t));
            }
            self.pids[p as usize].queued += 1;
            self.any_kept_dm |= dm;
            self.kept_qs += 1;
        }
        self.last_q_t = t;
        self.devs[d].last_q_t = t;
        self.pids[p as usize].last_q_t = t;
        if self.btt_compat {
            if let Some(old) = self.devs[d].live.get(sector) {
                self.close(old); // btt: a Q at the sector of a live one replaces it
            }
        }
        let row = Row {
            q,
            device: self.devs[d].value,
            action,
            sector,
            bytes: nbytes,
            pid,
            q_t: t,
            q2g: NONE,
            g2i: NONE,
            q2m: NONE,
            i2d: NONE,
            d_t: NONE,
            c_t: NONE,
            c_error: 0,
        };
        let bio = Bio { dev: d as u32, pid: p, kept, flags: 0, end: sector + nbytes / SECTOR, g: NONE, s: NONE, i: NONE, m: NONE, row };
        let slot = match self.free.pop() {
            Some(s) => {
                self.bios[s as usize] = bio;
                s
            }
            None => {
                self.bios.push(bio);
                (self.bios.len() - 1) as u32
            }
        };
        let dev = &mut self.devs[d];
        if self.btt_compat {
            dev.live.insert(sector, slot);
        } else {
            dev.live.push(sector, slot);
        }
        if dev.recent.len() == LOOKBACK {
            dev.recent.pop_back();
        }
        dev.recent.push_front((q, slot));
        self.rows.push_back(if kept { RowSlot::Waiting } else { RowSlot::Skip });
    }

    fn bio_event(&mut self, k: u8, slot: u32, t: i64) {
        let (seen, q_t, s_t, g_t) = {
            let b = &self.bios[slot as usize];
            (b.flags, b.row.q_t, b.s, b.g)
        };
        let dm = self.devs[self.bios[slot as usize].dev as usize].dm;
        match k {
            K_G => {
                let v = tdelta(q_t, t);
                self.sample(slot, Q2G, v);
                if seen & SEEN_S != 0 {
                    self.sample(slot, S2G, tdelta(s_t, t));
                }
                let b = &mut self.bios[slot as usize];
                b.row.q2g = v;
                b.g = t;
                b.flags |= SEEN_G;
            }
            K_S => {
                let b = &mut self.bios[slot as usize];
                b.s = t;
                b.flags |= SEEN_S;
            }
            K_I => {
                if seen & SEEN_G != 0 {
                    let v = tdelta(g_t, t);
                    self.sample(slot, G2I, v);
                    self.bios[slot as usize].row.g2i = v;
                }
                let b = &mut self.bios[slot as usize];
                b.i = t;
                b.flags |= SEEN_I;
            }
            K_M => {
                let v = tdelta(q_t, t);
                self.sample(slot, Q2M, v);
                let b = &mut self.bios[slot as usize];
                b.row.q2m = v;
                b.m = t;
                b.flags |= SEEN_M;
            }
            _ => {
                self.sample(slot, if dm { Q2ADM } else { Q2A }, tdelta(q_t, t));
            }
        }
    }

    fn dispatch(&mut self, slot: u32, t: i64) {
        let (seen, i_t, m_t, old_d, kept, d) = {
            let b = &self.bios[slot as usize];
            (b.flags, b.i, b.m, b.row.d_t, b.kept, b.dev as usize)
        };
        if seen & SEEN_I != 0 {
            let v = tdelta(i_t, t);
            self.sample(slot, I2D, v);
            self.bios[slot as usize].row.i2d = v;
        } else if seen & SEEN_M != 0 {
            self.sample(slot, M2D, tdelta(m_t, t));
        }
        let _ = old_d;
        let q = {
            let b = &mut self.bios[slot as usize];
            b.row.d_t = t;
            b.flags |= SEEN_D;
            b.row.q
        };
        if kept {
            self.devs[d].busy.inflight.push_back((t, q, slot));
            if self.devs[d].busy.inflight.len() > self.devs[d].busy.compact_at {
                let mut inflight = std::mem::take(&mut self.devs[d].busy.inflight);
                inflight.retain(|e| self.in_flight(e));
                let busy = &mut self.devs[d].busy;
                busy.compact_at = (2 * inflight.len()).max(4096);
                busy.inflight = inflight;
            }
        }
    }

    fn complete(&mut self, slot: u32, t: i64) {
        let (seen, q_t, d_t, kept, d, p, nbytes, action) = {
            let b = &self.bios[slot as usize];
            (b.flags, b.row.q_t, b.row.d_t, b.kept, b.dev as usize, b.pid as usize, b.row.bytes, b.row.action)
        };
        let dm = self.devs[d].dm;
        let q2c = tdelta(q_t, t);
        self.sample(slot, if dm { Q2CDM } else { Q2C }, q2c);
        let d2c = if seen & SEEN_D != 0 { tdelta(d_t, t) } else { NONE };
        if d2c != NONE {
            self.sample(slot, D2C, d2c);
        }
        self.bios[slot as usize].row.c_t = t;
        self.bios[slot as usize].row.c_error = self.c_error;
        if kept {
            let (lq, ld) = if dm { (&mut self.q2c_dm, &mut self.d2c_dm) } else { (&mut self.q2c, &mut self.d2c) };
            lq.push(q2c);
            if d2c != NONE {
                ld.push(d2c);
            }
            if self.c_error != 0 {
                let e = self.c_error;
                match self.errors.iter_mut().find(|(code, _)| *code == e) {
                    Some((_, n)) => *n += 1,
                    None => self.errors.push((e, 1)),
                }
            }
            let pid = &mut self.pids[p];
            pid.done += 1;
            pid.bytes += nbytes;
            pid.q2c_sum += q2c;
            pid.q2c_max = pid.q2c_max.max(q2c);
            if d2c != NONE {
                pid.d2c_sum += d2c;
                pid.d2c_n += 1;
            }
            let dev = &mut self.devs[d];
            dev.done += 1;
            dev.bytes += nbytes;
            dev.writes += (action & TC_WRITE != 0) as i64;
            if d2c != NONE {
                dev.busy.add(d_t, t.max(d_t));
            }
        }
        self.close(slot);
    }

    /// Busy runs of device d that no request in flight can reach any more (all, at the end).
    fn settle_runs(&mut self, d: usize, now: Option<i64>) {
        let horizon = match now {
            None => i64::MAX,
            Some(t) => self.first_in_flight(d).map_or(t, |f| f.min(t)),
        };
        let pending_runs = self.pending_runs;
        let dev = &mut self.devs[d];
        loop {
            let first = dev.busy.pending.front().copied();
            let forced = dev.busy.pending.len() > pending_runs;
            match first {
                Some((a, b)) if b < horizon || forced => {
                    dev.busy.pending.pop_front();
                    dev.busy.busy_ns += b - a;
                    self.runs_forced += forced as i64;
                    if self.runs.len() < self.keep_rows {
                        self.runs.push((dev.value, a, b));
                    } else if self.keep_rows > 0 {
                        self.runs_dropped += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn range_event(&mut self, k: u8, d: usize, start: i64, stop: i64, t: i64) {
        let mut hits = std::mem::take(&mut self.hits);
        hits.clear();
        let live = &self.devs[d].live;
        let first = live.lower_bound(start);
        for &(s, slot) in &live.entries()[first..] {
            if s > stop {
                break;
            }
            if self.bios[slot as usize].end <= stop {
                hits.push(slot);
            }
        }
        if !self.btt_compat && hits.len() > 1 {
            self.own_request(&mut hits, k, start, stop);
        }
        for &slot in hits.iter() {
            if k == K_D {
                self.dispatch(slot, t);
            } else {
                self.complete(slot, t);
            }
        }
        if k == K_C && !hits.is_empty() {
            self.settle_runs(d, Some(t));
        }
        self.hits = hits;
    }

    /// A front merge (F) of `slot`: the request's first bio, which started where this one
    /// ends, is now inside it (a D or C of the request starts at the merged bio).
    fn front_merged(&mut self, d: usize, slot: u32) {
        let end = self.bios[slot as usize].end;
        let (lo, hi) = self.devs[d].live.equal_range(end);
        for i in lo..hi {
            let head = self.devs[d].live.entries()[i].1 as usize;
            if self.bios[head].flags & (SEEN_G | SEEN_I) != 0 && self.bios[head].flags & SEEN_D == 0 {
                self.bios[head].flags |= JOINED;
                break;
            }
        }
    }

    /// The bios of the request a D or C (range [start, stop)) is for, among the live bios its
    /// range holds (`hits`, by start sector, oldest first at equal starts). A bio that began a
    /// request of its own (its G or I, no merge, none merged in front of it) belongs to it
    /// only when it starts where the D or C starts; of several such bios there, one: for a D
    /// the oldest not yet issued since its last I, for a C the oldest issued (of the event's
    /// size first). Bios merged into a request (M, F, or front-merged into) belong as in btt;
    /// bios in no request yet (a Q alone) do not. When no bio of the range begins a request
    /// at its start, the event's request is not in view and btt's rule stands (every hit).
    /// Each event paired otherwise than btt is counted (`ambiguous`).
    fn own_request(&mut self, hits: &mut Vec<u32>, k: u8, start: i64, stop: i64) {
        let bios = &self.bios;
        let flags = |slot: u32| bios[slot as usize].flags;
        let member = |slot: u32| flags(slot) & (SEEN_M | JOINED) != 0;
        let first = |slot: u32| !member(slot) && flags(slot) & (SEEN_G | SEEN_I) != 0
            && bios[slot as usize].row.sector == start;
        if !hits.iter().any(|&slot| first(slot)) {
            return;
        }
        let before = hits.len();
        hits.retain(|&slot| member(slot) || first(slot));
        let firsts: Vec<usize> = (0..hits.len()).filter(|&i| first(hits[i])).collect();
        if firsts.len() > 1 {
            let ready = |slot: u32| {
                let b = &bios[slot as usize];
                if k == K_D { b.flags & SEEN_D == 0 || b.i > b.row.d_t } else { b.flags & SEEN_D != 0 }
            };
            let sized = |slot: u32| bios[slot as usize].end == stop;
            let keep = firsts.iter().copied().find(|&i| ready(hits[i]) && sized(hits[i]))
                .or_else(|| firsts.iter().copied().find(|&i| ready(hits[i])))
                .unwrap_or(firsts[0]);
            let keep_slot = hits[keep];
            hits.retain(|&slot| !first(slot) || slot == keep_slot);
        }
        if hits.len() != before {
            self.ambiguous += 1;
        }
    }

    fn depth_step(&mut self, d: usize, k: u8, t: i64) {
        let dev = &mut self.devs[d];
        if dev.depth_seen {
            dev.held += dev.depth * (t - dev.depth_last);
        }
        dev.depth += if k == K_D { 1 } else { -1 };
        dev.peak = dev.peak.max(dev.depth);
        dev.depth_last = t;
        dev.depth_seen = true;
    }

    fn dispatched(&mut self, d: usize, sector: i64, nbytes: i64, action: u32) {
        let n = nbytes.max(1);
        let k = (64 - ((n - 1) as u64).leading_zeros()) as usize; // smallest k with 2**k >= n
        let k = k.min(63);
        self.sizes[k][0] += 1;
        self.sizes[k][1] += (action & TC_WRITE != 0) as i64;
        let dev = &mut self.devs[d];
        if dev.seek_seen {
            let seek = (sector - dev.seek_end).abs();
            dev.seek_sum += seek as i128;
            dev.seek_n += 1;
            dev.seek_nonzero += (seek != 0) as i64;
            match &mut dev.seek_hist {
                Some(h) => h.push(seek),
                None if dev.seek_exact.len() < SEEK_EXACT => dev.seek_exact.push(seek),
                None => {
                    let mut h = Samples::with_cap(0);
                    dev.seek_exact.drain(..).for_each(|x| h.push(x));
                    h.push(seek);
                    dev.seek_exact.shrink_to_fit();
                    dev.seek_hist = Some(h);
                }
            }
        }
        dev.seek_end = sector + nbytes / SECTOR;
        dev.seek_seen = true;
    }

    fn run(&mut self, e: &Events) {
        let Events { t, action, device, sector, nbytes, pid, pdu_dev, pdu_sector, error } = *e;
        for i in 0..t.len() {
            let (ti, a, dv) = (t[i], action[i], device[i]);
            self.all_t = (self.all_t.0.min(ti), self.all_t.1.max(ti));
            if dv != self.last_dev.0 && !self.all_devices.contains(&dv) {
                self.all_devices.push(dv);
            }
            if self.device.map_or(false, |x| x != dv) || self.lo.map_or(false, |lo| ti < lo)
                || self.hi.map_or(false, |hi| ti > hi) {
                continue;
            }
            self.events += 1;
            self.t_min = self.t_min.min(ti);
            self.t_max = self.t_max.max(ti);
            let d = self.dev_index(dv);
            let code = a & 0xFF;
            self.devs[d].counts[code as usize] += 1;
            let k = kind_of(code);
            let culled = k == K_OTHER || a & TC_PC != 0 || (nbytes[i] <= 0 && k != K_R && k != K_A);
            let keep = !culled && (self.devs[d].started || k == K_Q || k == K_A);
            if !keep {
                continue;
            }
            self.devs[d].started = true;
            let s = sector[i];
            match k {
                K_Q => self.queue(d, ti, s, nbytes[i], pid[i], a),
                K_G | K_S | K_I | K_M => {
                    let flag = match k { K_G => SEEN_G, K_S => SEEN_S, K_I => SEEN_I, _ => SEEN_M };
                    if let Some(slot) = self.lookup_stage(d, s, s + nbytes[i] / SECTOR, flag) {
                        self.bio_event(k, slot, ti);
                        if code == 3 && !self.btt_compat {
                            self.front_merged(d, slot);
                        }
                    }
                }
                K_A => {
                    if let Some(src) = self.find_dev(pdu_dev[i]) {
                        let from = pdu_sector[i];
                        if let Some(slot) = self.lookup_stage(src, from, from + nbytes[i] / SECTOR, SEEN_A) {
                            self.bio_event(k, slot, ti);
                            self.bios[slot as usize].flags |= SEEN_A;
                        }
                    }
                }
                K_D | K_C => {
                    if k == K_D {
                        self.dispatched(d, s, nbytes[i], a);
                    } else {
                        self.c_error = error[i];
                    }
                    self.depth_step(d, k, ti);
                    self.range_event(k, d, s, s + nbytes[i] / SECTOR, ti);
                }
                _ => self.depth_step(d, K_R, ti),
            }
        }
        self.release_rows();
    }

    /// Finished rows of Qs older than every kept Q in flight go out, in Q order (when too
    /// many wait behind one in flight, the oldest go out and it follows when it finishes).
    fn release_rows(&mut self) {
        while let Some(front) = self.rows.front() {
            match *front {
                RowSlot::Waiting if self.rows.len() <= self.ready_rows => break,
                RowSlot::Done(slot) => {
                    let row = self.bios[slot as usize].row;
                    self.emit(row);
                    self.free.push(slot);
                }
                _ => {}
            }
            self.rows.pop_front();
            self.rows_base += 1;
        }
    }

    fn emit(&mut self, row: Row) {
        if self.emit_rows {
            self.out_rows.push(row);
        }
        if self.keep_rows > 0 && row.q & (self.stride - 1) == 0 {   // stride: a power of two, q >= 0
            self.kept_rows.push(row);
            if self.kept_rows.len() > self.keep_rows {
                let twice = 2 * self.stride;
                self.kept_rows.retain(|r| r.q % twice == 0);
                self.stride = twice;
            }
        }
    }
}

fn arr<'py, T: numpy::Element>(py: Python<'py>, v: Vec<T>) -> Bound<'py, PyArray1<T>> {
    PyArray1::from_vec_bound(py, v)
}

/// Per-I/O rows as a record batch (scsitrace/block/tables.py ios_frame's input): null where
/// a row has no value (no G, no D, not completed...).
fn rows_columns(rows: &[Row]) -> PyResult<Columns> {
    let col = |f: &dyn Fn(&Row) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
    let d2c = |r: &Row| if r.c_t != NONE && r.d_t != NONE { tdelta(r.d_t, r.c_t) } else { NONE };
    let q2c = |r: &Row| if r.c_t != NONE { tdelta(r.q_t, r.c_t) } else { NONE };
    Columns::new(vec![
        ("q", ints(col(&|r| r.q))),
        ("device", values_of::<UInt32Type>(rows.iter().map(|r| r.device).collect())),
        ("sector", ints(col(&|r| r.sector))),
        ("bytes", ints(col(&|r| r.bytes))),
        ("pid", ints(col(&|r| r.pid))),
        ("action", values_of::<UInt32Type>(rows.iter().map(|r| r.action).collect())),
        ("q_t", ints(col(&|r| r.q_t))),
        ("q2g_ns", ints_or_null(col(&|r| r.q2g))),
        ("g2i_ns", ints_or_null(col(&|r| r.g2i))),
        ("q2m_ns", ints_or_null(col(&|r| r.q2m))),
        ("i2d_ns", ints_or_null(col(&|r| r.i2d))),
        ("d_t", ints_or_null(col(&|r| r.d_t))),
        ("c_t", ints_or_null(col(&|r| r.c_t))),
        ("d2c_ns", ints_or_null(col(&d2c))),
        ("q2c_ns", ints_or_null(col(&q2c))),
        ("c_error", values_of::<Int16Type>(rows.iter().map(|r| r.c_error).collect())),
    ])
}

/// The per-I/O rows kept for the reports (`finish()["rows"]`), in Q order: held here and
/// turned into columns only when a report reads them (most runs never do; a million rows
/// are about 110 MB of columns).
#[pyclass(module = "scsitrace._native.block")]
pub struct KeptRows {
    rows: Vec<Row>,
}

#[pymethods]
impl KeptRows {
    fn __len__(&self) -> usize {
        self.rows.len()
    }

    /// The rows as a record batch (as `Machine.take_rows` hands them out).
    fn columns(&self) -> PyResult<Columns> {
        rows_columns(&self.rows)
    }
}

/// Totals of groups as one flat (N_NAMES, groups, 4) array, C order.
fn totals_array<'py>(py: Python<'py>, groups: &[&Totals]) -> Bound<'py, PyArray1<i64>> {
    let mut out = Vec::with_capacity(N_NAMES * groups.len() * 4);
    for name in 0..N_NAMES {
        for g in groups {
            out.extend_from_slice(&g.0[name]);
        }
    }
    arr(py, out)
}

fn median(values: &mut [i64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (_, &mut hi, _) = values.select_nth_unstable(n / 2);
    if n % 2 == 1 {
        return Some(hi as f64);
    }
    let lo = *values[..n / 2].iter().max().unwrap();
    Some((lo as f64 + hi as f64) / 2.0)
}

#[pymethods]
impl Machine {
    /// The machine of `options` (scsitrace/block/machine.py `MachineOptions`, read by name).
    #[new]
    fn new(options: MachineOptions) -> Machine {
        let MachineOptions { device, lo, hi, pids, emit_rows, keep_rows, pending_runs, ready_rows, btt_compat } = options;
        let (pending_runs, ready_rows) = (pending_runs.unwrap_or(PENDING_RUNS), ready_rows.unwrap_or(READY_ROWS));
        Machine {
            c_error: 0,
            errors: Vec::new(),
            device,
            lo,
            hi,
            keep: pids.map(|v| v.into_iter().map(|p| (p, ())).collect()),
            emit_rows,
            keep_rows,
            devs: Vec::new(),
            last_dev: (u32::MAX, usize::MAX),
            pids: Vec::new(),
            pid_ids: IntMap::default(),
            bios: Vec::new(),
            free: Vec::new(),
            hits: Vec::new(),
            nq: 0,
            last_q_t: NONE,
            overall: Totals::new(),
            events: 0,
            all_devices: Vec::new(),
            all_t: (i64::MAX, i64::MIN),
            t_min: i64::MAX,
            t_max: i64::MIN,
            sizes: [[0; 2]; 64],
            q2c: Samples::with_cap(crate::stat::DEFAULT_CAP),
            d2c: Samples::with_cap(crate::stat::DEFAULT_CAP),
            q2c_dm: Samples::with_cap(crate::stat::DEFAULT_CAP),
            d2c_dm: Samples::with_cap(crate::stat::DEFAULT_CAP),
            any_kept_dm: false,
            kept_qs: 0,
            runs: Vec::new(),
            runs_dropped: 0,
            runs_forced: 0,
            rows: VecDeque::new(),
            rows_base: 0,
            out_rows: Vec::new(),
            // room for every row it can hold, reserved once: growing by doubling would copy
            // the rows and hold both copies (pages of the room not written cost nothing)
            kept_rows: Vec::with_capacity(keep_rows.min(1 << 24) + (keep_rows > 0) as usize),
            stride: 1,
            rows_out_of_order: 0,
            pending_runs,
            ready_rows,
            btt_compat,
            ambiguous: 0,
            ambiguous_same: 0,
        }
    }

    /// One chunk of events (scsitrace/block/events.py MACHINE_COLUMNS, by name), in processing order.
    fn feed(&mut self, py: Python<'_>, chunk: EventChunk) -> PyResult<()> {
        let events = chunk.slices()?;
        py.allow_threads(|| self.run(&events));
        Ok(())
    }

    /// The per-I/O rows finished since the last call, in Q order (None when there are none).
    fn take_rows(&mut self) -> PyResult<Option<Columns>> {
        if self.out_rows.is_empty() {
            return Ok(None);
        }
        let rows = std::mem::take(&mut self.out_rows);
        Ok(Some(rows_columns(&rows)?))
    }

    /// Ends the stream: every Q still in flight is an I/O without completion. Returns what
    /// the tables are built from (scsitrace/block/machine.py `Run`).
    fn finish(&mut self, py: Python<'_>) -> PyResult<Run> {
        let live: Vec<(i64, u32)> = self
            .bios
            .iter()
            .enumerate()
            .filter(|(_, b)| b.flags & CLOSED == 0)
            .map(|(s, b)| (b.row.q, s as u32))
            .collect();
        for (_, slot) in live {
            let b = &mut self.bios[slot as usize];
            b.flags |= CLOSED;
            let (q, kept) = (b.row.q, b.kept);
            if kept && q >= self.rows_base {
                self.rows[(q - self.rows_base) as usize] = RowSlot::Done(slot);
            } else if kept {
                self.rows_out_of_order += 1;
                let row = self.bios[slot as usize].row;
                self.emit(row);
            }
        }
        self.release_rows();
        for d in 0..self.devs.len() {
            self.devs[d].busy.inflight.clear();
            self.settle_runs(d, None);
        }
        let (start, end) = if self.events > 0 { (self.t_min, self.t_max) } else { (0, 0) };
        let mut all = self.all_devices.clone();
        all.sort_unstable();
        let (err_codes, err_counts): (Vec<i16>, Vec<i64>) = self.errors.iter().copied().unzip();
        // devices, sorted by dev_t
        let mut order: Vec<usize> = (0..self.devs.len()).collect();
        order.sort_by_key(|&d| self.devs[d].value);
        let mut seek_mean = Vec::new();
        let mut seek_median = Vec::new();
        let mut seek_exact = true;
        for &d in &order {
            let dev = &mut self.devs[d];
            seek_mean.push(if dev.seek_n > 0 { Some(dev.seek_sum as f64 / dev.seek_n as f64) } else { None });
            seek_median.push(match &mut dev.seek_hist {
                Some(h) => {
                    seek_exact = false;
                    h.percentiles(&[50.0])[0].map(|v| v as f64)
                }
                None => median(&mut dev.seek_exact),
            });
        }
        let devs: Vec<&Dev> = order.iter().map(|&d| &self.devs[d]).collect();
        let per_dev = |f: &dyn Fn(&Dev) -> i64| arr(py, devs.iter().map(|d| f(d)).collect::<Vec<i64>>()).unbind();
        let pids = &self.pids;
        let per_pid = |f: &dyn Fn(&Pid) -> i64| arr(py, pids.iter().map(f).collect::<Vec<i64>>()).unbind();
        let mut runs = std::mem::take(&mut self.runs);
        runs.sort_unstable();
        let mut kept = std::mem::take(&mut self.kept_rows);
        kept.sort_unstable_by_key(|r| r.q);
        Ok(Run {
            events: self.events,
            errors: Py::new(py, Columns::new(vec![("error", values_of::<Int16Type>(err_codes)),
                                                  ("n", ints(err_counts))])?)?,
            all_devices: all,
            all_t_min: (self.all_t.0 <= self.all_t.1).then_some(self.all_t.0),
            all_t_max: (self.all_t.0 <= self.all_t.1).then_some(self.all_t.1),
            start_ns: start,
            end_ns: end,
            devices: per_dev(&|d| d.value as i64),
            dm: devs.iter().map(|d| d.dm).collect(),
            counts: arr(py, devs.iter().flat_map(|d| d.counts.iter().copied()).collect::<Vec<i64>>()).unbind(),
            depth_seen: devs.iter().map(|d| d.depth_seen).collect(),
            max_depth: per_dev(&|d| d.peak),
            depth_held: per_dev(&|d| if d.depth_seen { d.held + d.depth * (end.max(d.depth_last) - d.depth_last) } else { 0 }),
            seek_mean,
            seek_median,
            seek_median_exact: seek_exact,
            seeks: devs.iter().map(|d| d.seek_nonzero).collect(),
            done: per_dev(&|d| d.done),
            bytes: per_dev(&|d| d.bytes),
            writes: per_dev(&|d| d.writes),
            busy_ns: per_dev(&|d| d.busy.busy_ns),
            per_dev: totals_array(py, &devs.iter().map(|d| &d.totals).collect::<Vec<_>>()).unbind(),
            overall: totals_array(py, &[&self.overall]).unbind(),
            pids: per_pid(&|p| p.value),
            pid_kept: pids.iter().map(|p| p.kept).collect(),
            pid_queued: per_pid(&|p| p.queued),
            pid_done: per_pid(&|p| p.done),
            pid_bytes: per_pid(&|p| p.bytes),
            pid_q2c_sum: per_pid(&|p| p.q2c_sum),
            pid_q2c_max: per_pid(&|p| p.q2c_max),
            pid_d2c_sum: per_pid(&|p| p.d2c_sum),
            pid_d2c_n: per_pid(&|p| p.d2c_n),
            per_pid: totals_array(py, &pids.iter().map(|p| &p.totals).collect::<Vec<_>>()).unbind(),
            sizes: arr(py, self.sizes.iter().flat_map(|s| s.iter().copied()).collect::<Vec<i64>>()).unbind(),
            kept_qs: self.kept_qs,
            any_kept_dm: self.any_kept_dm,
            q2c: Py::new(py, self.q2c.clone())?,
            d2c: Py::new(py, self.d2c.clone())?,
            q2c_dm: Py::new(py, self.q2c_dm.clone())?,
            d2c_dm: Py::new(py, self.d2c_dm.clone())?,
            run_device: arr(py, runs.iter().map(|r| r.0).collect::<Vec<u32>>()).unbind(),
            run_start: arr(py, runs.iter().map(|r| r.1).collect::<Vec<i64>>()).unbind(),
            run_end: arr(py, runs.iter().map(|r| r.2).collect::<Vec<i64>>()).unbind(),
            runs_dropped: self.runs_dropped,
            runs_forced: self.runs_forced,
            rows: Py::new(py, KeptRows { rows: kept })?,
            rows_stride: self.stride,
            rows_out_of_order: self.rows_out_of_order,
            ambiguous: self.ambiguous,
            ambiguous_same: self.ambiguous_same,
        })
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<Machine>()?;
    m.add_class::<KeptRows>()?;
    m.add_class::<Run>()?;
    m.add_function(wrap_pyfunction!(merge_sorted_rows, m)?)?;
    Ok(())
}

/// Rows of the records of several files (files concatenated; file f is
/// times[bounds[f]..bounds[f + 1]], each in time order) in processing order: by time, then
/// file, then place in the file (scsitrace/block/events.py merge_rows). A k-way merge.
#[pyfunction]
fn merge_sorted_rows<'py>(py: Python<'py>, times: PyReadonlyArray1<i64>, bounds: PyReadonlyArray1<i64>)
                          -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (times, bounds) = (times.as_slice()?, bounds.as_slice()?);
    if bounds.is_empty() || bounds.windows(2).any(|w| w[0] > w[1]) || *bounds.last().unwrap() as usize != times.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("merge_sorted_rows: bad bounds"));
    }
    let dest = py.allow_threads(|| {
        let mut dest = vec![0i64; times.len()];
        let mut head: Vec<usize> = bounds[..bounds.len() - 1].iter().map(|&b| b as usize).collect();
        let ends: Vec<usize> = bounds[1..].iter().map(|&b| b as usize).collect();
        for r in 0..times.len() {
            let mut best = usize::MAX;
            for f in 0..head.len() {
                if head[f] < ends[f] && (best == usize::MAX || times[head[f]] < times[head[best]]) {
                    best = f;
                }
            }
            dest[head[best]] = r as i64;
            head[best] += 1;
        }
        dest
    });
    Ok(PyArray1::from_vec_bound(py, dest))
}
