//! The command stage of the streamed Bulk-Only path (scsitrace/usb/streamed.py), fed each
//! batch of finished commands by the machine (stream.rs) without a polars frame per batch:
//! the running tables of scsitrace/command_stream.py `Tables` (pairing reasons, and the
//! command layers' shared sums: per device, the latency and per-opcode SRT `Samples`), the
//! stage tiling of its `Tiler` (the shared tiler of native/src/commands.rs, which the
//! kernel-log engine uses too), and what its `Kept` keeps for the reports (every 2^k-th
//! command and segment, at most `keep` of each), held as raw rows: polars rows are built
//! at the end for the kept ones only. The same batches in, the same figures out as the
//! Python accumulators (tests/test_usbmon_chunks.py checks them against the whole path).
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::arrow::{self, Columns};
pub(super) use crate::commands::KeptSegments;
use crate::commands::{halve, Piece, Sums, Tiler};
use super::machine::{aggregates, bot_reason, le32, piece, BotCommands, stage_bounds_of, StageTimes, BOT_REASONS, CBW_BYTES, CSW_BYTES, DATA_BYTES, DATA_C,
                     DATA_IN, DATA_S, LAST, NULL, N_AGG, N_CSW, PAIRED, STALLS, STS_C, STS_S};

const _: () = assert!(std::mem::size_of::<Kept>() == 128);

use crate::hash::IntMap;
use crate::stat::Samples;

/// After machine.rs PIECE_PHASES: "~carried" (5) and IDLE (6), as command_stream.Tiler.
const IDLE: u8 = 6;
const N_PHASES: usize = 7;

/// One finished Bulk-Only command as the machine hands it over (times absolute).
#[derive(Clone)]
pub(super) struct Cmd {
    pub a: [i64; N_AGG],
    pub cbw: [u8; CBW_BYTES],
    pub csw: [u8; CSW_BYTES],
    pub csw_size: i64,
    pub bus: i64,
    pub dev: i64,
    pub pos: i64,
    pub cmd_s: i64,
    pub cmd_c: i64,
}

impl Cmd {
    /// machine.rs `bot_reason` of the command (an index into BOT_REASONS).
    fn reason(&self) -> usize {
        bot_reason(self.a[N_CSW], self.a[LAST] == 1, self.csw_size, le32(&self.csw, 4), le32(&self.cbw, 4), self.a[STS_C])
    }
}

/// `cmds` as scsitrace/usb/bot.py `bot_commands(xf, streamed)` reads them (a `BotCommands`:
/// bot_pass' aggregates, csw_size, bus, dev, pos, cmd_s, cmd_c and `io` when given; times
/// from `origin`, null unknown), filled in one pass and handed over without a copy.
pub(super) fn bot_commands<I: ExactSizeIterator<Item = Cmd>>(py: Python, cmds: I, origin: i64, io: Option<Vec<i64>>)
                                                             -> PyResult<BotCommands> {
    let n = cmds.len();
    let rel = |t: i64| if t == NULL { NULL } else { t - origin };
    let mut agg: Vec<Vec<i64>> = (0..N_AGG).map(|_| Vec::with_capacity(n)).collect();
    let mut ints: Vec<Vec<i64>> = (0..6).map(|_| Vec::with_capacity(n)).collect();
    let (mut cbw, mut csw) = (Vec::with_capacity(n * CBW_BYTES), Vec::with_capacity(n * CSW_BYTES));
    for c in cmds {
        for (j, (col, v)) in agg.iter_mut().zip(c.a).enumerate() {
            col.push(if matches!(j, STS_S | STS_C | DATA_S | DATA_C) { rel(v) } else { v });
        }
        for (col, v) in ints.iter_mut().zip([c.csw_size, c.bus, c.dev, c.pos, rel(c.cmd_s), rel(c.cmd_c)]) {
            col.push(v);
        }
        cbw.extend_from_slice(&c.cbw);
        csw.extend_from_slice(&c.csw);
    }
    let [csw_size, bus, dev, pos, cmd_s, cmd_c]: [Vec<i64>; 6] = ints.try_into().unwrap();
    let mut extra = vec![("bus", arrow::ints(bus)), ("dev", arrow::ints(dev)), ("pos", arrow::ints(pos)),
                         ("cmd_s", arrow::ints_or_null(cmd_s)), ("cmd_c", arrow::ints_or_null(cmd_c))];
    if let Some(io) = io {
        extra.push(("io", arrow::ints(io)));
    }
    let commands = aggregates(agg, csw_size, extra)?;
    Ok(BotCommands { commands: Py::new(py, commands)?, cbw: PyArray1::from_vec_bound(py, cbw).unbind(),
                     csw: PyArray1::from_vec_bound(py, csw).unbind(),
                     kind: PyArray1::from_vec_bound(py, Vec::<i8>::new()).unbind() })
}

/// A command kept for the reports in 128 bytes (its io and Cmd: 192): what its ios row is
/// built from (its io is implicit: the j-th kept is io j x stride). Back as a Cmd, `first`
/// is its io and `csw` -1 (no row reads either; `first` only counts), `n_csw` saturates at
/// u32::MAX (only whether it is 0 is read).
#[derive(Clone)]
struct Kept {
    t: [i64; 6], // cmd_s, cmd_c, sts_s, sts_c, data_s, data_c
    data_bytes: i64,
    pos: i64,
    stalls: i64,
    n_csw: u32,
    bus: u16,
    dev: u8,
    last: bool,
    csw_size: i8,
    data_in: i8,
    cbw: [u8; CBW_BYTES],
    csw: [u8; CSW_BYTES],
}

impl Kept {
    fn of(c: &Cmd) -> Kept {
        let a = &c.a;
        Kept { t: [c.cmd_s, c.cmd_c, a[STS_S], a[STS_C], a[DATA_S], a[DATA_C]], data_bytes: a[DATA_BYTES],
               pos: c.pos, stalls: a[STALLS], n_csw: a[N_CSW].clamp(0, u32::MAX as i64) as u32, bus: c.bus as u16,
               dev: c.dev as u8, last: a[LAST] == 1, csw_size: c.csw_size as i8, data_in: a[DATA_IN] as i8,
               cbw: c.cbw, csw: c.csw }
    }

    fn cmd(&self, io: i64) -> Cmd {
        let t = &self.t;
        let a = [io, self.last as i64, -1, self.n_csw as i64, t[2], t[3], t[4], t[5], self.data_bytes,
                 self.stalls, self.data_in as i64];
        Cmd { a, cbw: self.cbw, csw: self.csw, csw_size: self.csw_size as i64, bus: self.bus as i64,
              dev: self.dev as i64, pos: self.pos, cmd_s: t[0], cmd_c: t[1] }
    }
}

pub(super) struct CommandStage {
    keep: i64,
    rows: i64,
    reasons: [i64; BOT_REASONS.len()],
    index: IntMap<(i64, i64, i64), u32>,
    last: ((i64, i64, i64), u32),  // the last command's device
    sums: Sums,
    anomalous: Vec<Cmd>,       // commands with stalls or a PHASE ERROR CSW (bot_commands' anomalies)
    kept: Vec<Kept>,           // at most `keep`, reserved at once: only the pages written are resident
    stride: i64,
    tiler: Tiler,
}

impl CommandStage {
    pub(super) fn new(keep: usize) -> CommandStage {
        let keep = keep.max(1);
        CommandStage {
            keep: keep as i64, rows: 0, reasons: [0; BOT_REASONS.len()], index: IntMap::default(),
            last: ((-1, -1, -1), 0), sums: Sums::new(), anomalous: Vec::new(), kept: Vec::with_capacity(keep),
            stride: 1, tiler: Tiler::new(N_PHASES, IDLE, keep),
        }
    }

    fn device(&mut self, bus: i64, dev: i64, lun: i64) -> u32 {
        if self.last.0 == (bus, dev, lun) {
            return self.last.1;
        }
        if let Some(&d) = self.index.get(&(bus, dev, lun)) {
            self.last = ((bus, dev, lun), d);
            return d;
        }
        let d = self.sums.device();
        self.tiler.device(format!("{bus}:{dev}:{lun}"));
        self.index.insert((bus, dev, lun), d);
        d
    }

    /// A batch of finished commands, in io order (times absolute; `origin` the capture's
    /// first event), then the tiling of the pieces that start before `before` (relative;
    /// NULL: all of them, the capture ended).
    pub(super) fn add(&mut self, cmds: &[Cmd], before: i64, origin: i64) {
        let rel = |t: i64| if t == NULL { NULL } else { t - origin };
        for c in cmds {
            let io = self.rows;
            self.rows += 1;
            let a = &c.a;
            let reason = c.reason();
            self.reasons[reason] += 1;
            let lun = (c.cbw[13] & 0x0F) as i64;
            let d = self.device(c.bus, c.dev, lun);
            let response = (reason == PAIRED).then(|| a[STS_C] - c.cmd_s);
            self.sums.command(d, a[DATA_BYTES], response);
            if let Some(response) = response {
                let cb_len = ((c.cbw[14] & 0x1F) as usize).min(16);
                if cb_len >= 1 {
                    self.sums.opcode_time(io, &c.cbw[15..15 + cb_len], response);
                }
            }
            if a[STALLS] > 0 || (c.csw_size > 12 && c.csw[12] == 2) {
                self.anomalous.push(c.clone());
            }
            while io % self.stride == 0 && self.kept.len() as i64 == self.keep {
                self.stride *= 2; // one more would be too many: thinned first (the same rows in the end)
                halve(&mut self.kept);
            }
            if io % self.stride == 0 {
                self.kept.push(Kept::of(c));
            }
            // the stage pieces (scsitrace/usb/stages.py: _with_stages, stage_pieces by command)
            let (cmd_s, cmd_c, sts_s, sts_c, data_s, data_c) =
                (rel(c.cmd_s), rel(c.cmd_c), rel(a[STS_S]), rel(a[STS_C]), rel(a[DATA_S]), rel(a[DATA_C]));
            let (cmd_c, d0, s0) = stage_bounds_of(cmd_c, data_s, data_c, sts_s);
            let data_in = if a[DATA_IN] >= 0 { a[DATA_IN] == 1 } else { c.cbw[12] & 0x80 != 0 };
            let times = StageTimes { cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in };
            for block in 0..5usize {
                let (start, end, stage) = piece(block, &times);
                if start == NULL || end == NULL {
                    continue;
                }
                let bytes = if block == 2 { a[DATA_BYTES] } else { NULL };
                let phase = stage as u8;
                self.tiler.push(Piece { dev: d, block: block as u8, phase, io, start, end, bytes });
            }
        }
        self.tiler.tile(before);
    }

    /// The end (Tiler.finish): every waiting piece tiled, then each device's IDLE up to `elapsed`.
    pub(super) fn finish(&mut self, elapsed: i64) {
        self.tiler.finish(elapsed);
    }

    /// Everything accumulated, for scsitrace/usb/streamed.py (taken out of the stage; the
    /// anomalous commands' times from `origin`).
    pub(super) fn results(&mut self, py: Python, origin: i64) -> PyResult<StageResults> {
        let devices = self.sums.device_columns(self.tiler.names())?;
        let mut srt = Vec::new();
        for (op, entry) in self.sums.srt.iter_mut().enumerate() {
            if let Some(e) = entry.take() {
                let mut cdb = e.cdb.clone();
                cdb.resize(16, 0);
                srt.push(Py::new(py, SrtEntry { opcode: op as i64, samples: Py::new(py, e.samples)?, io: e.io, cdb,
                                                cb_len: e.cdb.len() as i64 })?);
            }
        }
        let latency = self.sums.take_latency();
        let anomalous = std::mem::take(&mut self.anomalous);
        Ok(StageResults {
            rows: self.rows, reasons: self.reasons.to_vec(), devices: Py::new(py, devices)?,
            n_dev: self.tiler.devices_tiled(), srt,
            latency: Py::new(py, latency)?, paired: self.sums.paired, data_bytes: self.sums.data_bytes,
            totals: self.tiler.totals.clone(), counts: self.tiler.counts.clone(), segment_stride: self.tiler.seg_stride,
            kept_rows: self.kept.len() as i64, stride: self.stride,
            anomalous: Py::new(py, bot_commands(py, anomalous.into_iter(), origin, None)?)?,
        })
    }

    /// The kept segments (commands.rs `Tiler.segments`), taken out of the stage.
    pub(super) fn segments(&mut self, py: Python) -> PyResult<KeptSegments> {
        self.tiler.segments(py)
    }

    /// The kept commands (as `take` hands them over, with their `io`), taken out of the stage.
    pub(super) fn kept(&mut self, py: Python, origin: i64) -> PyResult<BotCommands> {
        let kept = std::mem::take(&mut self.kept);
        let stride = self.stride;
        let io = (0..kept.len() as i64).map(|j| j * stride).collect();
        bot_commands(py, kept.iter().enumerate().map(|(j, k)| k.cmd(j as i64 * stride)), origin, Some(io))
    }
}

/// What the command stage accumulated (scsitrace/usb/streamed.py `_tables` reads it): the
/// commands (`rows`) and pairing `reasons` (counts by reason code), per device (`devices`:
/// name, commands, paired, data bytes, response sum and count), how many devices have
/// segments (`n_dev`), per opcode the response `Samples` (`srt`), the `latency` Samples, the
/// paired commands and data bytes, the stage `totals` and segment `counts` per phase code,
/// the kept segments' and commands' strides and the kept commands' count, and the commands
/// with anomalies (`anomalous`).
#[pyclass(get_all)]
pub(super) struct StageResults {
    rows: i64,
    reasons: Vec<i64>,
    devices: Py<Columns>,
    n_dev: i64,
    srt: Vec<Py<SrtEntry>>,
    latency: Py<Samples>,
    paired: i64,
    data_bytes: i64,
    totals: Vec<i64>,
    counts: Vec<i64>,
    segment_stride: i64,
    kept_rows: i64,
    stride: i64,
    anomalous: Py<BotCommands>,
}

/// The response times of one opcode: its Samples, the first command's io, its CDB bytes
/// (16, `cb_len` of them used).
#[pyclass(get_all)]
pub(super) struct SrtEntry {
    opcode: i64,
    samples: Py<Samples>,
    io: i64,
    cdb: Vec<u8>,
    cb_len: i64,
}
