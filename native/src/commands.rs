//! The command layers' running tables and tiling (scsitrace/command_stream.py's `Tables`,
//! `Tiler` and `Kept`, by their rules), fed command by command by a layer's engine without a
//! polars frame per batch: the kernel-log engine (text/scsilog_engine.rs) and the streamed
//! Bulk-Only path's command stage (usb/commands.rs).
//!
//! - `Sums`: per device the commands, paired ones and their response sum; the latency and
//!   per-opcode SRT `Samples` (an opcode named by its lowest-io command's CDB); paired
//!   commands and data bytes.
//! - `Tiler`: stage pieces tiled per device once no command still to come can start before
//!   them (each device's covered time carried as a leading piece whose segment is dropped;
//!   the placing rule is the bus tiling's `DeviceTiling`), devices in name order; the time and
//!   segment count per phase; every 2^k-th segment kept (at most `keep`).
//! - `Thinned`: every 2^k-th row by its io number (at most `keep`), whatever order they come in.
use std::sync::Arc;

use arrow_array::{ArrayRef, StringArray};
use pyo3::prelude::*;

use crate::arrow::{self, Columns, NULL};
use crate::bus::tiling::DeviceTiling;
use crate::stat::{Samples, DEFAULT_CAP};

/// Every other element kept (the 0th, 2nd, ...): a kept sample whose stride doubles.
pub(crate) fn halve<T>(v: &mut Vec<T>) {
    let mut j = 0usize;
    v.retain(|_| {
        j += 1;
        j % 2 == 1
    });
}

/// One device's sums (command_stream.Tables.devices).
#[derive(Default)]
pub(crate) struct DeviceSums {
    pub n: i64,
    pub paired: i64,
    pub bytes: i64,
    pub rsum: i64,
    pub rn: i64,
    /// whether any of its commands said its data bytes
    pub sized: bool,
}

/// The response times of one opcode and the CDB of its lowest-io command (its name).
pub(crate) struct OpcodeTimes {
    pub samples: Samples,
    pub io: i64,
    pub cdb: Vec<u8>,
}

/// command_stream.Tables' sums (device codes are the caller's).
pub(crate) struct Sums {
    pub devices: Vec<DeviceSums>,
    pub srt: Vec<Option<OpcodeTimes>>,
    pub latency: Samples,
    pub paired: i64,
    pub data_bytes: i64,
}

impl Sums {
    pub(crate) fn new() -> Sums {
        Sums { devices: Vec::new(), srt: (0..256).map(|_| None).collect(), latency: Samples::with_cap(DEFAULT_CAP),
               paired: 0, data_bytes: 0 }
    }

    /// A command of device `d` (a code below `devices.len()`, see `device`): its data bytes
    /// (0 when unknown), its response time when paired.
    #[inline]
    pub(crate) fn command(&mut self, d: u32, bytes: i64, response: Option<i64>) {
        let dv = &mut self.devices[d as usize];
        dv.n += 1;
        dv.bytes = dv.bytes.wrapping_add(bytes);
        self.data_bytes = self.data_bytes.wrapping_add(bytes);
        if let Some(r) = response {
            dv.paired += 1;
            dv.rsum = dv.rsum.wrapping_add(r);
            dv.rn += 1;
            self.paired += 1;
            self.latency.push(r);
        }
    }

    /// A command whose data bytes may be unknown (None) and which may be paired without a
    /// response time (Tables.add's rule: `paired` counts it, the response sums and the latency
    /// take only a known time).
    #[inline]
    pub(crate) fn sized_command(&mut self, d: u32, bytes: Option<i64>, paired: bool, response: Option<i64>) {
        let dv = &mut self.devices[d as usize];
        dv.n += 1;
        if let Some(b) = bytes {
            dv.bytes = dv.bytes.wrapping_add(b);
            dv.sized = true;
            self.data_bytes = self.data_bytes.wrapping_add(b);
        }
        if paired {
            dv.paired += 1;
            self.paired += 1;
        }
        if let Some(r) = response {
            dv.rsum = dv.rsum.wrapping_add(r);
            dv.rn += 1;
            self.latency.push(r);
        }
    }

    /// A paired command's response time under its opcode (`cdb` its CDB, first byte the opcode).
    #[inline]
    pub(crate) fn opcode_time(&mut self, io: i64, cdb: &[u8], response: i64) {
        opcode_time(&mut self.srt, io, cdb, response);
    }

    /// A new device's code.
    pub(crate) fn device(&mut self) -> u32 {
        self.devices.push(DeviceSums::default());
        (self.devices.len() - 1) as u32
    }

    /// The latency Samples, taken out.
    pub(crate) fn take_latency(&mut self) -> Samples {
        std::mem::replace(&mut self.latency, Samples::with_cap(DEFAULT_CAP))
    }

    /// Per device (Columns: name, n, paired, bytes, rsum, rn, in code order; `names` by code).
    pub(crate) fn device_columns(&self, names: &[String]) -> PyResult<Columns> {
        let col = |get: fn(&DeviceSums) -> i64| arrow::ints(self.devices.iter().map(get).collect());
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(names.iter().map(String::as_str)));
        Columns::new(vec![("name", names), ("n", col(|d| d.n)), ("paired", col(|d| d.paired)), ("bytes", col(|d| d.bytes)),
                          ("rsum", col(|d| d.rsum)), ("rn", col(|d| d.rn))])
    }
}

/// A time under its command's opcode in `srt` (`cdb` its CDB, first byte the opcode); the
/// opcode named by its lowest-io command's CDB.
#[inline]
pub(crate) fn opcode_time(srt: &mut [Option<OpcodeTimes>], io: i64, cdb: &[u8], time: i64) {
    let entry = srt[cdb[0] as usize].get_or_insert_with(|| {
        OpcodeTimes { samples: Samples::with_cap(DEFAULT_CAP), io, cdb: cdb.to_vec() }
    });
    if io < entry.io {
        entry.io = io;
        entry.cdb = cdb.to_vec();
    }
    entry.samples.push(time);
}

/// A stage piece: device code, order among pieces of equal start (`block`), phase code, io,
/// [start, end), bytes (NULL: none).
#[derive(Clone, Copy)]
pub(crate) struct Piece {
    pub dev: u32,
    pub block: u8,
    pub phase: u8,
    pub io: i64,
    pub start: i64,
    pub end: i64,
    pub bytes: i64,
}

/// A kept segment (its number is implicit: the j-th kept is segment j x stride).
#[derive(Clone, Copy)]
pub(crate) struct Seg {
    pub dev: u32,
    pub phase: u8,
    pub io: i64,
    pub start: i64,
    pub end: i64,
    pub bytes: i64,
}

/// command_stream.Tiler (see the module's doc); `idle` is the IDLE phase code.
pub(crate) struct Tiler {
    keep: i64,
    idle: u8,
    names: Vec<String>,
    rank: Vec<u32>, // each device's rank by name (the order the Tiler sorts devices in)
    covered: Vec<Option<i64>>, // where each device's last non-IDLE segment ends (Tiler.covered)
    waiting: Vec<Piece>,
    pub totals: Vec<i64>,
    pub counts: Vec<i64>,
    segs: Vec<Seg>,
    seg_seen: i64,
    pub seg_stride: i64,
}

impl Tiler {
    pub(crate) fn new(n_phases: usize, idle: u8, keep: usize) -> Tiler {
        let keep = keep.max(1);
        Tiler { keep: keep as i64, idle, names: Vec::new(), rank: Vec::new(), covered: Vec::new(),
                waiting: Vec::new(), totals: vec![0; n_phases], counts: vec![0; n_phases],
                segs: Vec::with_capacity(keep), seg_seen: 0, seg_stride: 1 }
    }

    /// A new device (its code: the next); the devices' ranks by name made anew.
    pub(crate) fn device(&mut self, name: String) -> u32 {
        self.names.push(name);
        self.covered.push(None);
        let mut order: Vec<u32> = (0..self.names.len() as u32).collect();
        order.sort_by(|&x, &y| self.names[x as usize].cmp(&self.names[y as usize]));
        self.rank = vec![0; order.len()];
        for (r, &d) in order.iter().enumerate() {
            self.rank[d as usize] = r as u32;
        }
        (self.names.len() - 1) as u32
    }

    #[inline]
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    #[inline]
    pub(crate) fn push(&mut self, p: Piece) {
        self.waiting.push(p);
    }

    /// Tiler.add + _tile: the waiting pieces that start before `before` (NULL: all of them),
    /// by (device name, start, block, io), each device's tiling resumed from the carried piece.
    pub(crate) fn tile(&mut self, before: i64) {
        let mut ready: Vec<Piece>;
        if before == NULL {
            ready = std::mem::take(&mut self.waiting);
        } else {
            ready = self.waiting.iter().filter(|p| p.start < before).copied().collect();
            self.waiting.retain(|p| p.start >= before);
        }
        if ready.is_empty() {
            return;
        }
        let rank = &self.rank;
        let key = |p: &Piece| (rank[p.dev as usize], p.start, p.block, p.io);
        if !ready.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            ready = by_rank(ready, rank);
            // each device's pieces (in the order they came: commands in start order, mostly)
            let mut k = 0;
            while k < ready.len() {
                let r = rank[ready[k].dev as usize];
                let n = ready[k..].iter().take_while(|p| rank[p.dev as usize] == r).count();
                let part = &mut ready[k..k + n];
                if !part.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
                    part.sort_unstable_by_key(key);
                }
                k += n;
            }
        }
        let mut k = 0;
        while k < ready.len() {
            let d = ready[k].dev;
            let mut tiling = DeviceTiling::new();
            if let Some(c) = self.covered[d as usize] {
                tiling.place(0, c); // the carried piece [0, covered): its segment is dropped
            }
            let mut covered = NULL;
            while k < ready.len() && ready[k].dev == d {
                let p = ready[k];
                k += 1;
                let Some((idle_from, s)) = tiling.place(p.start, p.end) else { continue };
                if idle_from < s {
                    self.segment(Seg { dev: d, phase: self.idle, io: NULL, start: idle_from, end: s, bytes: NULL });
                }
                self.segment(Seg { dev: d, phase: p.phase, io: p.io, start: s, end: p.end, bytes: p.bytes });
                covered = covered.max(p.end);
            }
            if covered != NULL {
                let c = &mut self.covered[d as usize];
                *c = Some(c.map_or(covered, |c| c.max(covered)));
            }
        }
    }

    /// A segment counted (Tiler._segments) and kept when its number is a multiple of the stride.
    fn segment(&mut self, s: Seg) {
        self.totals[s.phase as usize] += s.end - s.start;
        self.counts[s.phase as usize] += 1;
        let n = self.seg_seen;
        self.seg_seen += 1;
        while n % self.seg_stride == 0 && self.segs.len() as i64 == self.keep {
            self.seg_stride *= 2;
            halve(&mut self.segs);
        }
        if n % self.seg_stride == 0 {
            self.segs.push(s);
        }
    }

    /// The end (Tiler.finish): every waiting piece tiled, then each device's IDLE up to
    /// `elapsed` (devices by name).
    pub(crate) fn finish(&mut self, elapsed: i64) {
        self.tile(NULL);
        let mut order: Vec<u32> = (0..self.names.len() as u32).collect();
        order.sort_by_key(|&d| self.rank[d as usize]);
        for d in order {
            if let Some(c) = self.covered[d as usize] {
                if elapsed > c {
                    self.segment(Seg { dev: d, phase: self.idle, io: NULL, start: c, end: elapsed, bytes: NULL });
                }
            }
        }
    }

    /// How many devices have segments.
    pub(crate) fn devices_tiled(&self) -> i64 {
        self.covered.iter().filter(|c| c.is_some()).count() as i64
    }

    /// The kept segments (Columns: dev, io, start, end, phase, bytes; io and bytes null where
    /// none) and the device names (dev indexes them), taken out of the tiler.
    pub(crate) fn segments(&mut self, py: Python) -> PyResult<KeptSegments> {
        let segs = std::mem::take(&mut self.segs);
        let col = |get: fn(&Seg) -> i64| segs.iter().map(get).collect::<Vec<i64>>();
        let segments = Columns::new(vec![
            ("dev", arrow::ints(col(|s| s.dev as i64))), ("io", arrow::ints_or_null(col(|s| s.io))),
            ("start", arrow::ints(col(|s| s.start))), ("end", arrow::ints(col(|s| s.end))),
            ("phase", arrow::ints(col(|s| s.phase as i64))), ("bytes", arrow::ints_or_null(col(|s| s.bytes)))])?;
        Ok(KeptSegments { segments: Py::new(py, segments)?, device_names: self.names.clone() })
    }
}

/// The pieces grouped by their device's rank (a counting sort: in each group, the order they came in).
fn by_rank(pieces: Vec<Piece>, rank: &[u32]) -> Vec<Piece> {
    let mut at = vec![0usize; rank.len() + 1];
    for p in &pieces {
        at[rank[p.dev as usize] as usize + 1] += 1;
    }
    for r in 1..at.len() {
        at[r] += at[r - 1];
    }
    let mut out = pieces.clone();
    for p in pieces {
        let r = rank[p.dev as usize] as usize;
        out[at[r]] = p;
        at[r] += 1;
    }
    out
}

/// The kept segments and the device names their `dev` indexes.
#[pyclass(get_all)]
pub(crate) struct KeptSegments {
    segments: Py<Columns>,
    device_names: Vec<String>,
}

/// command_stream.Kept keyed by io: the rows whose io is a multiple of the stride, the stride
/// doubling whenever more than `keep` would be kept (rows may come in any io order).
pub(crate) struct Thinned<T> {
    pub rows: Vec<(i64, T)>,
    pub stride: i64,
    keep: usize,
}

impl<T> Thinned<T> {
    pub(crate) fn new(keep: usize) -> Thinned<T> {
        Thinned { rows: Vec::new(), stride: 1, keep: keep.max(1) }
    }

    #[inline]
    pub(crate) fn offer(&mut self, io: i64, make: impl FnOnce() -> T) {
        while io % self.stride == 0 && self.rows.len() == self.keep {
            self.stride *= 2;
            let stride = self.stride;
            self.rows.retain(|(n, _)| n % stride == 0);
        }
        if io % self.stride == 0 {
            self.rows.push((io, make()));
        }
    }
}
