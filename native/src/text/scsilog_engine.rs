//! The kernel-log layer's engine (scsitrace/scsilog/analysis.py `_KernelRun`; the SG_IO logs'
//! whole commands through `feed_commands`, `_SgioRun`): fed each
//! batch of kernel-log events (after --window), it pairs them by scsilog_pair.rs's rules (the
//! starts still waiting carried to the next batch), decodes each command's CDB (bus/cdb.rs),
//! adds up the command tables and tiles SERVICE/IDLE per device (commands.rs, the rules of
//! scsitrace/command_stream.py), keeps every 2^k-th command for the reports, counts the
//! completions (scsitrace/scsilog/completions.py's rules, the sense keys attached), and hands
//! back per batch only what Python still needs: the series' arrays of the paired commands,
//! and the commands' rows when an I/O sink wants them. --device, --target and --lun keep the
//! commands (and the completions) of the devices they name.

use arrow_array::types::UInt8Type;
use arrow_array::{ArrayRef, BinaryArray};
use pyo3::prelude::*;

use super::scsilog_pair::{kind_code, pair, strings, Block, DONE, NO_START, PAIRED, START, TIMED_OUT, TIMEOUT};
use crate::arrow::{ints, ints_or_null, values_of, Columns, Table, NULL};
use crate::bus::cdb::CdbDecoder;
use crate::commands::{opcode_time, KeptSegments, OpcodeTimes, Piece, Sums, Thinned, Tiler};
use crate::hash::IntMap;
use crate::stat::Samples;

const SENSE: u8 = 5; // an event kind of its own here: a "Sense Key" line (the key in `status`)
const NONE: u32 = u32::MAX; // no string
const SERVICE: u8 = 0;
const IDLE: u8 = 2; // after SERVICE and "~carried" (command_stream.Tiler's phases)

/// A CDB as an event carries it: none, up to 16 bytes in place, or more on the heap.
#[derive(Clone)]
enum Cdb {
    Null,
    Short(u8, [u8; 16]),
    Long(Box<[u8]>),
}

impl Cdb {
    #[inline]
    fn of(c: Option<&[u8]>) -> Cdb {
        match c {
            None => Cdb::Null,
            Some(c) if c.len() <= 16 => {
                let mut b = [0u8; 16];
                b[..c.len()].copy_from_slice(c);
                Cdb::Short(c.len() as u8, b)
            }
            Some(c) => Cdb::Long(Box::from(c)),
        }
    }

    #[inline]
    fn get(&self) -> Option<&[u8]> {
        match self {
            Cdb::Null => None,
            Cdb::Short(n, b) => Some(&b[..*n as usize]),
            Cdb::Long(b) => Some(b),
        }
    }
}

/// A block's events (but sense lines) as the engine holds them, column by column: the starts
/// carried from earlier blocks first (`io` their number; NULL for a block's own), so the
/// pairing reads the columns as they are.
#[derive(Default)]
struct Events {
    t: Vec<i64>,
    pos: Vec<i64>,
    tag: Vec<i64>,
    io: Vec<i64>,
    rtn: Vec<i64>,
    dev: Vec<u32>,
    status: Vec<u32>,
    host: Vec<u32>,
    kind: Vec<u8>,
    cdb: Vec<Cdb>,
}

impl Events {
    fn reserve(&mut self, n: usize) {
        self.t.reserve(n);
        self.pos.reserve(n);
        self.tag.reserve(n);
        self.io.reserve(n);
        self.rtn.reserve(n);
        self.dev.reserve(n);
        self.status.reserve(n);
        self.host.reserve(n);
        self.kind.reserve(n);
        self.cdb.reserve(n);
    }

    /// The events at `rows`, numbered `io`.
    fn gather(&self, rows: &[i64], io: &[i64]) -> Events {
        let at = |k: &i64| *k as usize;
        Events {
            t: rows.iter().map(|k| self.t[at(k)]).collect(), pos: rows.iter().map(|k| self.pos[at(k)]).collect(),
            tag: rows.iter().map(|k| self.tag[at(k)]).collect(), io: io.to_vec(),
            rtn: rows.iter().map(|k| self.rtn[at(k)]).collect(), dev: rows.iter().map(|k| self.dev[at(k)]).collect(),
            status: rows.iter().map(|k| self.status[at(k)]).collect(),
            host: rows.iter().map(|k| self.host[at(k)]).collect(), kind: rows.iter().map(|k| self.kind[at(k)]).collect(),
            cdb: rows.iter().map(|k| self.cdb[at(k)].clone()).collect(),
        }
    }
}

/// One command as analysis.py `pair` gathers it: its first event's device, tag, CDB, line
/// and time, its end's time, status, host byte and rtn (NULL/NONE: none), reason code, io.
#[derive(Clone)]
struct Row {
    io: i64,
    pos: i64,
    t: i64,
    end_t: i64,
    tag: i64,
    rtn: i64,
    dev: u32,
    status: u32,
    host: u32,
    reason: u8,
    cdb: Cdb,
}

/// A device of the log: its name, whether the selection keeps it, its code in the tables
/// and tiler (kept devices), its commands (all).
struct Device {
    name: String,
    keep: bool,
    stage: u32,
    commands: i64,
}

/// completions.py's end of a command waiting for a later end of its (device, tag).
#[derive(Clone, Copy)]
struct End {
    dev: u32,
    tag: i64,
    pos: i64,
    opcode: i64,
    name_at: i64,
    result: u32,
    host: u32,
    sense: u32,
    sensed: bool, // a sense line of this batch found it
}

#[derive(Clone, Copy)]
struct Sense {
    dev: u32,
    tag: i64,
    pos: i64,
    key: u32,
    age: i64,
}

type CountKey = (u32, i64, i64, u32, u32, u32);

/// completions.py `Completions` (see its doc).
#[derive(Default)]
struct Completions {
    waiting: Vec<End>,
    senses: Vec<Sense>,
    counts: IntMap<CountKey, i64>,
    order: Vec<CountKey>,
    starts: i64,
    ends: i64,
    lost_senses: i64,
}

impl Completions {
    fn count(&mut self, e: &End) {
        let key = (e.dev, e.opcode, e.name_at, e.result, e.host, e.sense);
        let n = self.counts.entry(key).or_insert(0);
        if *n == 0 {
            self.order.push(key);
        }
        *n += 1;
    }

    /// A batch's ends and sense lines (each in line order): each sense line to the last end of
    /// its (device, tag) before it; the ends that a later end of theirs follows counted.
    fn add(&mut self, new_ends: Vec<End>, new_senses: Vec<Sense>) {
        if new_ends.is_empty() && new_senses.is_empty() && self.senses.is_empty() {
            return;
        }
        let mut ends = std::mem::take(&mut self.waiting);
        ends.extend(new_ends);
        ends.sort_by_key(|e| e.pos);
        let mut senses: Vec<Sense> = self.senses.drain(..).map(|s| Sense { age: s.age + 1, ..s }).collect();
        senses.extend(new_senses);
        senses.sort_by_key(|s| s.pos);
        for e in ends.iter_mut() {
            e.sensed = false;
        }
        let mut current: IntMap<(u32, i64), usize> = IntMap::default();
        let mut unmatched = Vec::new();
        let mut j = 0;
        for s in senses {
            while j < ends.len() && ends[j].pos <= s.pos {
                current.insert((ends[j].dev, ends[j].tag), j);
                j += 1;
            }
            match current.get(&(s.dev, s.tag)) {
                Some(&k) => {
                    let e = &mut ends[k];
                    if !e.sensed {
                        e.sensed = true;
                        if e.sense == NONE {
                            e.sense = s.key;
                        }
                    }
                }
                None => unmatched.push(s),
            }
        }
        self.lost_senses += unmatched.iter().filter(|s| s.age >= 1).count() as i64;
        self.senses = unmatched.into_iter().filter(|s| s.age < 1).collect();
        let mut last: IntMap<(u32, i64), usize> = IntMap::default();
        for (k, e) in ends.iter().enumerate() {
            last.insert((e.dev, e.tag), k);
        }
        for (k, e) in ends.iter().enumerate() {
            if last[&(e.dev, e.tag)] == k {
                self.waiting.push(*e);
            } else {
                self.count(e);
            }
        }
    }

    fn finish(&mut self) {
        let waiting = std::mem::take(&mut self.waiting);
        for e in &waiting {
            self.count(e);
        }
        self.lost_senses += self.senses.len() as i64;
        self.senses.clear();
    }
}

/// The completed commands the bandwidth views read (bandwidth.Collected), at most `limit`.
struct ViewRow {
    io: i64,
    start: i64,
    end: i64,
    dev: u32,
    op: i8,
    bytes: i64, // NULL: unknown
    resp: i64,
}

/// What `add` made of a batch: the series' columns, the rows for Python, the commands kept.
struct Added {
    series: [Vec<i64>; 6],
    rows: Vec<Row>,
    commands: i64,
}

/// What one batch hands back: the series' arrays of its paired commands (`series`: start_ns,
/// end_ns, resp, lba, op (a code of the op kinds given), device (the engine's device code;
/// null for an unnamed device); None unless asked), its commands' rows (`rows`, see
/// `ScsilogEngine.rows_of`; None unless asked), how many commands the selection kept
/// (`commands`), and the lowest io a command still to come can have (`lowest`).
#[pyclass(get_all)]
struct Batch {
    series: Option<Py<Columns>>,
    rows: Option<Py<Columns>>,
    commands: i64,
    lowest: i64,
}

#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct EngineConfig {
    /// the CDB rules (scsi.py `_decoder`)
    decoder: Py<CdbDecoder>,
    /// each opcode's op kind code (scsi.op_kind_expr's, as indexes into the caller's names)
    op_kind: Vec<i8>,
    /// --device, --target, --lun as the log prints them
    device: Option<String>,
    target: Option<String>,
    lun: Option<String>,
    series: bool,
    rows: bool,
    /// at most this many commands kept for the reports; completed ones for the views
    keep: usize,
    collect: usize,
}

/// See the module's doc.
#[pyclass(module = "scsitrace._native.text")]
pub struct ScsilogEngine {
    decoder: CdbDecoder,
    op_kind: [i8; 256],
    filters: [Option<String>; 3],
    series: bool,
    rows: bool,
    devices: Vec<Device>,
    index: IntMap<String, u32>,
    strs: Vec<String>,
    str_index: IntMap<String, u32>,
    timed_out: u32,
    carry: Events,
    next_io: i64,
    seen: i64,
    commands: i64,
    sums: Sums,
    tiler: Tiler,
    kept: Thinned<Row>,
    timeouts: Vec<Row>,
    reasons: IntMap<(u8, i64), i64>,
    completions: Completions,
    collect: usize,
    collected: Vec<ViewRow>,
    over: bool,
    given: Given,
    kept_limit: usize,
}

/// What the engine adds up of whole commands (`feed_commands`, the SG_IO logs) beside the
/// kernel log's sums: the driver's own durations per opcode, the reasons as the parser
/// words them, the io numbers kept for the reports (the rows stay in Python), the commands
/// that timed out.
#[derive(Default)]
struct Given {
    fed: bool,
    driver: Vec<Option<OpcodeTimes>>,
    reasons: IntMap<u32, i64>,
    reason_order: Vec<u32>,
    kept: Option<Thinned<()>>,
    timeouts: Vec<(i64, i64, u32, Cdb)>,
    sized: bool,
}

/// A batch of whole commands as Python reads it back: the series' arrays of its completed
/// commands (as `Batch.series`, with `bytes`: -1 when unknown), the rows to keep for the
/// reports (`row`: index in the batch, `io`), the io of its first command, the kept rows'
/// stride after it.
#[pyclass(get_all)]
struct CommandsBatch {
    series: Option<Py<Columns>>,
    kept: Py<Columns>,
    first_io: i64,
    stride: i64,
}

impl ScsilogEngine {
    /// A row for the bandwidth views, kept while there are at most `collect` (past that they
    /// are let go, `over`: the views say so).
    fn collect_row(&mut self, row: ViewRow) {
        if self.over || self.collect == 0 {
            return;
        }
        if self.collected.len() == self.collect {
            self.over = true;
            self.collected = Vec::new();
        } else {
            self.collected.push(row);
        }
    }

    fn string(&mut self, s: Option<&str>) -> u32 {
        let Some(s) = s else { return NONE };
        if let Some(&c) = self.str_index.get(s) {
            return c;
        }
        let c = self.strs.len() as u32;
        self.strs.push(s.to_string());
        self.str_index.insert(s.to_string(), c);
        c
    }

    fn device(&mut self, name: &str) -> u32 {
        if let Some(&d) = self.index.get(name) {
            return d;
        }
        let part = |k: usize| name.split(':').nth(k);
        let [device, target, lun] = &self.filters;
        let keep = device.as_deref().map_or(true, |v| v == name)
            && target.as_deref().map_or(true, |v| part(2) == Some(v))
            && lun.as_deref().map_or(true, |v| part(3) == Some(v));
        let d = self.devices.len() as u32;
        let stage = if keep {
            self.sums.device();
            self.tiler.device(name.to_string())
        } else {
            NONE
        };
        self.devices.push(Device { name: name.to_string(), keep, stage, commands: 0 });
        self.index.insert(name.to_string(), d);
        d
    }

    /// A batch of events (see `feed`) after the carried starts (senses apart), and the
    /// completions' ends and sense lines of the kept devices.
    fn events(&mut self, events: &Table) -> PyResult<(Events, Vec<End>, Vec<Sense>)> {
        let t_ns = events.i64s("t_ns")?;
        let pos = events.i64s("pos")?;
        let tag = events.i64s_or_null("tag")?;
        let rtn = events.i64s_or_null("rtn")?;
        let kinds = strings(events, "kind")?;
        let devices = strings(events, "device")?;
        let status = strings(events, "status")?;
        let host = strings(events, "host_byte")?;
        let cdb = events.bytes("cdb")?;
        let mut out = std::mem::take(&mut self.carry);
        out.reserve(t_ns.len());
        let (mut ends, mut senses) = (Vec::new(), Vec::new());
        let mut last_dev: (Option<&str>, u32) = (None, 0);
        let mut last_status: (Option<&str>, u32) = (None, NONE);
        let mut last_host = last_status;
        for i in 0..t_ns.len() {
            let kind = if kinds[i] == Some("sense") { SENSE } else { kind_code(kinds[i]) };
            let name = devices[i].unwrap_or("");
            let dev = if last_dev.0 == Some(name) { last_dev.1 } else {
                let d = self.device(name);
                last_dev = (Some(name), d);
                d
            };
            // (the last string of each column at hand: starts, which have none, between ends)
            let st = match status[i] {
                None => NONE,
                s if s == last_status.0 => last_status.1,
                s => {
                    last_status = (s, self.string(s));
                    last_status.1
                }
            };
            let hb = match host[i] {
                None => NONE,
                s if s == last_host.0 => last_host.1,
                s => {
                    last_host = (s, self.string(s));
                    last_host.1
                }
            };
            let keep = self.devices[dev as usize].keep;
            let c = cdb.get(i);
            if keep {
                let tg = if tag[i] == NULL { -1 } else { tag[i] };
                match kind {
                    START => self.completions.starts += 1,
                    DONE | TIMEOUT => {
                        let d = self.decoder.bytes(c);
                        let result = if kind == TIMEOUT { self.timed_out } else { st };
                        ends.push(End { dev, tag: tg, pos: pos[i], opcode: d.opcode.unwrap_or(NULL), name_at: d.name_at,
                                        result, host: hb, sense: NONE, sensed: false });
                    }
                    SENSE => senses.push(Sense { dev, tag: tg, pos: pos[i], key: st, age: 0 }),
                    _ => {}
                }
            }
            if kind == SENSE {
                continue;
            }
            self.seen = self.seen.max(t_ns[i]);
            out.t.push(t_ns[i]);
            out.pos.push(pos[i]);
            out.tag.push(tag[i]);
            out.io.push(NULL);
            out.rtn.push(rtn[i]);
            out.dev.push(dev);
            out.status.push(st);
            out.host.push(hb);
            out.kind.push(kind);
            out.cdb.push(Cdb::of(c));
        }
        self.completions.ends += ends.len() as i64;
        Ok((out, ends, senses))
    }

    /// A block's events (the carried starts first) paired (`last`: the log has ended): the
    /// finished commands, the starts still waiting carried.
    fn pair(&mut self, e: Events, last: bool) -> Vec<Row> {
        let (cmds, waiting, next_io) = pair(&Block { t_ns: &e.t, pos: &e.pos, tag: &e.tag, io: &e.io, kind: &e.kind,
                                                     device: &e.dev }, self.next_io, last);
        self.next_io = next_io;
        let rows = (0..cmds.row.len()).map(|k| {
            let b = cmds.row[k] as usize;
            let end = cmds.end[k];
            let at = |col: &[i64]| if end == NULL { NULL } else { col[end as usize] };
            let code = |col: &[u32]| if end == NULL { NONE } else { col[end as usize] };
            Row { io: cmds.io[k], pos: e.pos[b], t: e.t[b], end_t: at(&e.t), tag: e.tag[b], rtn: at(&e.rtn),
                  dev: e.dev[b], status: code(&e.status), host: code(&e.host), reason: cmds.reason[k],
                  cdb: e.cdb[b].clone() }
        }).collect();
        self.carry = e.gather(&waiting.row, &waiting.io);
        rows
    }

    /// The finished commands added up (tables, kept rows, tiling pieces, views); the series'
    /// arrays and the rows of the kept devices' commands when asked for.
    fn add(&mut self, rows: Vec<Row>) -> Added {
        let mut series: [Vec<i64>; 6] = Default::default();
        let mut out = Vec::new();
        let mut n = 0;
        for r in rows {
            let dv = &mut self.devices[r.dev as usize];
            dv.commands += 1;
            if !dv.keep {
                continue;
            }
            let d = dv.stage;
            n += 1;
            self.commands += 1;
            *self.reasons.entry((r.reason, if r.reason == super::scsilog_pair::DISPATCH_ERROR { r.rtn } else { NULL }))
                .or_insert(0) += 1;
            // paired: start -> done (a command without start has no start time)
            let start = if r.reason == NO_START { NULL } else { r.t };
            let end = if r.reason == PAIRED || r.reason == NO_START { r.end_t } else { NULL };
            let response = (r.reason == PAIRED).then(|| end - start);
            self.sums.command(d, 0, response);
            let decoded = self.decoder.bytes(r.cdb.get());
            if let Some(resp) = response {
                if let (Some(_), Some(c)) = (decoded.opcode, r.cdb.get()) {
                    self.sums.opcode_time(r.io, c, resp);
                }
                self.tiler.push(Piece { dev: d, block: 0, phase: SERVICE, io: r.io, start, end, bytes: NULL });
                let op = decoded.opcode.map_or(-1, |o| self.op_kind[o as usize]);
                if self.series {
                    for (col, v) in series.iter_mut().zip([start, end, resp, decoded.lba.unwrap_or(NULL), op as i64,
                                                             r.dev as i64]) {
                        col.push(v);
                    }
                }
                self.collect_row(ViewRow { io: r.io, start, end, dev: r.dev, op, bytes: NULL, resp });
            }
            if r.reason == TIMED_OUT {
                self.timeouts.push(r.clone());
            }
            let io = r.io;
            if self.rows {
                out.push(r.clone());
            }
            self.kept.offer(io, || r);
        }
        let [_, _, _, _, _, dev] = &mut series;
        for d in dev.iter_mut() {
            if self.devices[*d as usize].name.is_empty() {
                *d = NULL;
            }
        }
        Added { series, rows: out, commands: n }
    }

    /// A batch's `Added` as Python reads it; `lowest` (NULL: the log has ended).
    fn batch(&self, py: Python, added: Added, lowest: i64) -> PyResult<Batch> {
        let series = if self.series {
            let [start, end, resp, lba, op, dev] = added.series;
            Some(Py::new(py, Columns::new(vec![
                ("start_ns", ints(start)), ("end_ns", ints(end)), ("resp", ints(resp)), ("lba", ints_or_null(lba)),
                ("op", ints(op)), ("device", ints_or_null(dev))])?)?)
        } else {
            None
        };
        let rows = if self.rows { Some(Py::new(py, self.rows_columns(added.rows.iter())?)?) } else { None };
        Ok(Batch { series, rows, commands: added.commands, lowest })
    }

    /// Rows as analysis.py's `pair` gathers them (see `rows_of`).
    fn rows_columns<'a>(&self, rows: impl Iterator<Item = &'a Row> + Clone) -> PyResult<Columns> {
        let s = |c: u32| (c != NONE).then(|| self.strs[c as usize].as_str());
        let strs = |get: fn(&Row) -> u32| -> ArrayRef {
            std::sync::Arc::new(arrow_array::StringArray::from_iter(rows.clone().map(|r| s(get(r)))))
        };
        let col = |get: fn(&Row) -> i64| rows.clone().map(get).collect::<Vec<i64>>();
        let device: ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from_iter_values(
            rows.clone().map(|r| self.devices[r.dev as usize].name.as_str())));
        let cdb: ArrayRef = std::sync::Arc::new(BinaryArray::from_iter(rows.clone().map(|r| r.cdb.get())));
        Columns::new(vec![
            ("device", device), ("tag", ints_or_null(col(|r| r.tag))), ("cdb", cdb), ("pos", ints(col(|r| r.pos))),
            ("t_ns", ints(col(|r| r.t))), ("n_t", ints_or_null(col(|r| r.end_t))), ("n_status", strs(|r| r.status)),
            ("n_host", strs(|r| r.host)), ("n_rtn", ints_or_null(col(|r| r.rtn))),
            ("reason", values_of::<UInt8Type>(rows.clone().map(|r| r.reason).collect())), ("io", ints(col(|r| r.io)))])
    }

    /// The earliest time a command still to come can start: the latest event seen, the
    /// parser's `held` (NULL: none), the carried starts (NULL: none of these).
    fn before(&self, held: i64) -> i64 {
        [self.seen, held, self.carry.t.iter().copied().min().unwrap_or(NULL)]
            .into_iter().filter(|&v| v != NULL).min().unwrap_or(NULL)
    }

    /// `feed_commands`' pass: (the series' columns, the (row, io) of the rows kept).
    fn commands_of(&mut self, c: &Table) -> PyResult<([Vec<i64>; 7], Vec<(i64, i64)>)> {
        let devices = strings(c, "device")?;
        let reasons = strings(c, "reason")?;
        let cdb = c.bytes("cdb")?;
        let pos = c.i64s_or_null("pos")?;
        let [start, end, response, bytes, data_bytes, driver] =
            ["start_ns", "end_ns", "response_ns", "bytes", "data_bytes", "driver_ns"].map(|k| c.i64s_or_null(k));
        let (start, end, response, bytes, data_bytes, driver) = (start?, end?, response?, bytes?, data_bytes?, driver?);
        let opt = |v: i64| (v != NULL).then_some(v);
        // ios_frame's numbering: by (start, else end; nulls first), then line
        let key = |i: usize| (opt(start[i]).or(opt(end[i])), opt(pos[i]));
        let mut order: Vec<usize> = (0..c.len()).collect();
        if !order.windows(2).all(|w| key(w[0]) <= key(w[1])) {
            order.sort_by_key(|&i| key(i));
        }
        let g = &mut self.given;
        if !g.fed {
            g.fed = true;
            g.driver = (0..256).map(|_| None).collect();
            g.kept = Some(Thinned::new(self.kept_limit));
        }
        let mut series: [Vec<i64>; 7] = Default::default();
        let mut kept = Vec::new();
        let mut last_dev: (Option<&str>, u32) = (None, 0);
        for (k, &i) in order.iter().enumerate() {
            let io = self.next_io + k as i64;
            let name = devices[i].unwrap_or("");
            let dev = if last_dev.0 == Some(name) { last_dev.1 } else {
                let d = self.device(name);
                last_dev = (Some(name), d);
                d
            };
            self.devices[dev as usize].commands += 1;
            let d = self.devices[dev as usize].stage;
            self.commands += 1;
            let reason = self.string(reasons[i]);
            let g = &mut self.given;
            let n = g.reasons.entry(reason).or_insert(0);
            if *n == 0 {
                g.reason_order.push(reason);
            }
            *n += 1;
            let paired = reasons[i].is_none();
            let (s, e) = (opt(start[i]), opt(end[i]));
            let elapsed = s.zip(e).map(|(s, e)| e - s);
            let resp = if paired { opt(response[i]).or(elapsed) } else { None };
            let size = opt(data_bytes[i]);
            g.sized |= size.is_some();
            self.sums.sized_command(d, size, paired, resp);
            let c = cdb.get(i);
            let decoded = self.decoder.bytes(c);
            if let (true, Some(_), Some(c)) = (paired, decoded.opcode, c) {
                if let Some(r) = resp {
                    self.sums.opcode_time(io, c, r);
                }
                if let Some(t) = opt(driver[i]) {
                    opcode_time(&mut self.given.driver, io, c, t);
                }
            }
            if reasons[i].is_some_and(|r| r.starts_with("timed out")) {
                self.given.timeouts.push((io, start[i], dev, Cdb::of(c)));
            }
            if let (true, Some(s), Some(e)) = (paired, s, e) {
                self.tiler.push(Piece { dev: d, block: 0, phase: SERVICE, io, start: s, end: e, bytes: data_bytes[i] });
                let op = decoded.opcode.map_or(-1, |o| self.op_kind[o as usize]);
                let r = resp.unwrap_or(e - s);
                let b = size.or(opt(bytes[i]));
                if self.series {
                    let unnamed = self.devices[dev as usize].name.is_empty();
                    for (col, v) in series.iter_mut().zip([s, e, r, decoded.lba.unwrap_or(NULL), op as i64,
                                                           if unnamed { NULL } else { dev as i64 }, b.unwrap_or(-1)]) {
                        col.push(v);
                    }
                }
                self.collect_row(ViewRow { io, start: s, end: e, dev, op, bytes: b.unwrap_or(NULL), resp: r });
            }
            if let Some(t) = self.given.kept.as_mut() {
                t.offer(io, || ());
                if t.rows.last().is_some_and(|r| r.0 == io) {
                    kept.push((i as i64, io));
                }
            }
        }
        self.next_io += c.len() as i64;
        let stride = self.given.kept.as_ref().map_or(1, |k| k.stride);
        kept.retain(|(_, io)| io % stride == 0);
        Ok((series, kept))
    }

    fn lowest(&self) -> i64 {
        self.carry.io.iter().copied().min().unwrap_or(self.next_io)
    }
}

#[pymethods]
impl ScsilogEngine {
    #[new]
    fn new(py: Python, config: EngineConfig) -> PyResult<Self> {
        let op_kind: [i8; 256] = config.op_kind.try_into()
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("ScsilogEngine: op_kind needs 256 codes"))?;
        let mut e = ScsilogEngine {
            decoder: config.decoder.borrow(py).clone(), op_kind, filters: [config.device, config.target, config.lun],
            series: config.series, rows: config.rows, devices: Vec::new(), index: IntMap::default(), strs: Vec::new(),
            str_index: IntMap::default(), timed_out: 0, carry: Events::default(), next_io: 0, seen: NULL, commands: 0,
            sums: Sums::new(), tiler: Tiler::new(3, IDLE, config.keep), kept: Thinned::new(config.keep),
            timeouts: Vec::new(), reasons: IntMap::default(), completions: Completions::default(), collect: config.collect,
            collected: Vec::new(), over: false, given: Given::default(),
            kept_limit: config.keep,
        };
        e.timed_out = e.string(Some("timed out"));
        Ok(e)
    }

    /// A batch of events (the parser's columns t_ns, kind, device, tag, cdb, host_byte,
    /// status, rtn, pos; --window applied) with `held`, the parser's earliest time still to
    /// come (None: none): paired, added up and tiled up to where no command still to come
    /// can start.
    #[pyo3(signature = (events, held=None))]
    fn feed(&mut self, py: Python, events: Table, held: Option<i64>) -> PyResult<Batch> {
        let added = py.allow_threads(|| -> PyResult<Added> {
            let (ev, ends, senses) = self.events(&events)?;
            self.completions.add(ends, senses);
            let rows = self.pair(ev, false);
            let added = self.add(rows);
            let before = self.before(held.unwrap_or(NULL));
            self.tiler.tile(before);
            Ok(added)
        })?;
        drop(events);
        self.batch(py, added, self.lowest())
    }

    /// A batch of whole commands (the sgio parser's columns device, cdb, pos, start_ns,
    /// end_ns, reason (null: paired), response_ns, bytes, data_bytes, driver_ns; --pid,
    /// --device and --window applied) numbered in (start or end, line) order from the last
    /// batch's, added up, and tiled up to `before` (None: everything): no command still to
    /// come starts earlier.
    #[pyo3(signature = (commands, before=None))]
    fn feed_commands(&mut self, py: Python, commands: Table, before: Option<i64>) -> PyResult<CommandsBatch> {
        let first_io = self.next_io;
        let (series, kept) = py.allow_threads(|| -> PyResult<_> {
            let out = self.commands_of(&commands)?;
            self.tiler.tile(before.unwrap_or(NULL));
            Ok(out)
        })?;
        drop(commands);
        let series = if self.series {
            let [start, end, resp, lba, op, dev, bytes] = series;
            Some(Py::new(py, Columns::new(vec![
                ("start_ns", ints(start)), ("end_ns", ints(end)), ("resp", ints(resp)), ("lba", ints_or_null(lba)),
                ("op", ints(op)), ("device", ints_or_null(dev)), ("bytes", ints(bytes))])?)?)
        } else {
            None
        };
        let (row, io): (Vec<i64>, Vec<i64>) = kept.into_iter().unzip();
        let stride = self.given.kept.as_ref().map_or(1, |k| k.stride);
        Ok(CommandsBatch { series, kept: Py::new(py, Columns::new(vec![("row", ints(row)), ("io", ints(io))])?)?,
                           first_io, stride })
    }

    /// A batch of no commands: the waiting pieces tiled up to `before` (None: all of them).
    #[pyo3(signature = (before=None))]
    fn tile(&mut self, before: Option<i64>) {
        self.tiler.tile(before.unwrap_or(NULL));
    }

    /// The log has ended: the carried starts finished (unpaired), everything tiled.
    fn end(&mut self, py: Python) -> PyResult<Batch> {
        let added = py.allow_threads(|| {
            let carried = std::mem::take(&mut self.carry);
            let rows = self.pair(carried, true);
            let added = self.add(rows);
            self.tiler.tile(NULL);
            self.completions.finish();
            added
        });
        self.batch(py, added, NULL)
    }

    /// Each device's IDLE up to `elapsed` (the log's end, from its start or the window's).
    fn finish(&mut self, elapsed: i64) {
        self.tiler.finish(elapsed);
    }

    /// What the tables read (see `EngineResults`).
    fn results(&mut self, py: Python) -> PyResult<EngineResults> {
        let devices = self.sums.device_columns(self.tiler.names())?;
        let (srt_ops, srt) = by_opcode(py, &self.sums.srt)?;
        let (driver_ops, driver) = by_opcode(py, &self.given.driver)?;
        let g = &self.given;
        let s = |v: u32| (v != NONE).then(|| self.strs[v as usize].as_str());
        let reason_texts = Columns::new(vec![
            ("reason", std::sync::Arc::new(arrow_array::StringArray::from_iter(g.reason_order.iter().map(|&r| s(r))))
             as ArrayRef),
            ("commands", ints(g.reason_order.iter().map(|r| g.reasons[r]).collect()))])?;
        let (kept_rows, stride) = match &g.kept {
            Some(k) => (k.rows.len() as i64, k.stride),
            None => (self.kept.rows.len() as i64, self.kept.stride),
        };
        let (mut code, mut rtn, mut count) = (Vec::new(), Vec::new(), Vec::new());
        for (&(c, r), &n) in &self.reasons {
            code.push(c);
            rtn.push(r);
            count.push(n);
        }
        let reasons = Columns::new(vec![("reason", values_of::<UInt8Type>(code)), ("n_rtn", ints_or_null(rtn)),
                                        ("commands", ints(count))])?;
        let c = &self.completions;
        let s = |v: u32| (v != NONE).then(|| self.strs[v as usize].as_str());
        let strs = |get: fn(&CountKey) -> u32| -> ArrayRef {
            std::sync::Arc::new(arrow_array::StringArray::from_iter(c.order.iter().map(|k| s(get(k)))))
        };
        let completions = Columns::new(vec![
            ("device", std::sync::Arc::new(arrow_array::StringArray::from_iter_values(
                c.order.iter().map(|k| self.devices[k.0 as usize].name.as_str()))) as ArrayRef),
            ("opcode", ints_or_null(c.order.iter().map(|k| k.1).collect())),
            ("name_at", ints(c.order.iter().map(|k| k.2).collect())),
            ("result", strs(|k| k.3)), ("host_byte", strs(|k| k.4)), ("sense_key", strs(|k| k.5)),
            ("count", ints(c.order.iter().map(|k| c.counts[k]).collect()))])?;
        let all = self.devices.iter();
        let log_devices = Columns::new(vec![
            ("device", std::sync::Arc::new(arrow_array::StringArray::from_iter_values(all.clone().map(|d| d.name.as_str()))) as ArrayRef),
            ("commands", ints(all.map(|d| d.commands).collect()))])?;
        Ok(EngineResults {
            commands: self.commands, devices: Py::new(py, devices)?, srt_opcodes: srt_ops,
            srt_samples: srt.iter().map(|s| s.0.clone_ref(py)).collect(), srt_io: srt.iter().map(|s| s.1).collect(),
            srt_cdb: srt.into_iter().map(|s| s.2).collect(),
            latency: Py::new(py, self.sums.latency.clone())?, paired: self.sums.paired,
            reasons: Py::new(py, reasons)?, totals: self.tiler.totals.clone(), counts: self.tiler.counts.clone(),
            n_dev: self.tiler.devices_tiled(), segment_stride: self.tiler.seg_stride, kept_rows, stride, completions: Py::new(py, completions)?, starts: c.starts, ends: c.ends,
            lost_senses: c.lost_senses, log_devices: Py::new(py, log_devices)?, collected_over: self.over,
            sized: self.sums.devices.iter().map(|d| d.sized).collect(), any_sized: g.sized,
            data_bytes: self.sums.data_bytes, reason_texts: Py::new(py, reason_texts)?, driver_opcodes: driver_ops,
            driver_samples: driver.iter().map(|s| s.0.clone_ref(py)).collect(),
            driver_cdb: driver.into_iter().map(|s| s.2).collect(),
        })
    }

    /// The kept commands' rows (as `rows_of`), in io order, taken out of the engine.
    fn kept(&mut self, py: Python) -> PyResult<Py<Columns>> {
        let mut kept = std::mem::take(&mut self.kept.rows);
        kept.sort_unstable_by_key(|(io, _)| *io);
        Py::new(py, self.rows_columns(kept.iter().map(|(_, r)| r))?)
    }

    /// The rows of the commands that timed out (as `rows_of`), in io order.
    fn timeouts(&mut self, py: Python) -> PyResult<Py<Columns>> {
        let mut t = std::mem::take(&mut self.timeouts);
        t.sort_unstable_by_key(|r| r.io);
        Py::new(py, self.rows_columns(t.iter())?)
    }

    /// The kept segments (commands.rs `Tiler.segments`).
    fn segments(&mut self, py: Python) -> PyResult<KeptSegments> {
        self.tiler.segments(py)
    }

    /// The completed commands for the views (columns io, device (an engine device code),
    /// op (an op kind code, null when unknown), start_ns, end_ns; in the order they came).
    fn collected(&mut self, py: Python) -> PyResult<Py<Columns>> {
        let c = std::mem::take(&mut self.collected);
        let col = |get: fn(&ViewRow) -> i64| c.iter().map(get).collect::<Vec<i64>>();
        Py::new(py, Columns::new(vec![
            ("io", ints(col(|r| r.io))), ("device", ints(col(|r| r.dev as i64))),
            ("op", ints_or_null(col(|r| if r.op < 0 { NULL } else { r.op as i64 }))),
            ("start_ns", ints(col(|r| r.start))), ("end_ns", ints(col(|r| r.end))),
            ("bytes", ints_or_null(col(|r| r.bytes))), ("response_ns", ints(col(|r| r.resp)))])?)
    }

    /// The whole commands (`feed_commands`) that timed out: io, start_ns, device, cdb, in io order.
    fn command_timeouts(&mut self, py: Python) -> PyResult<Py<Columns>> {
        let mut t = std::mem::take(&mut self.given.timeouts);
        t.sort_unstable_by_key(|r| r.0);
        let device: ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from_iter_values(
            t.iter().map(|r| self.devices[r.2 as usize].name.as_str())));
        let cdb: ArrayRef = std::sync::Arc::new(BinaryArray::from_iter(t.iter().map(|r| r.3.get())));
        Py::new(py, Columns::new(vec![("io", ints(t.iter().map(|r| r.0).collect())),
                                      ("start_ns", ints_or_null(t.iter().map(|r| r.1).collect())),
                                      ("device", device), ("cdb", cdb)])?)
    }

    /// Every device of the log by engine code (what `series` and `collected` index).
    fn device_names(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.name.clone()).collect()
    }
}

/// What the engine added up: the kept devices' sums (`devices`: name,
/// n, paired, bytes, rsum, rn), the SRT per opcode (`srt_*`: Samples, the lowest io, its
/// CDB), the `latency` Samples, the paired commands, the pairing reasons (code, rtn of a
/// dispatch error, count), the time and segment count per phase (SERVICE, ~carried, IDLE),
/// the devices tiled, the kept segments' and rows' strides and count, the completions (device,
/// opcode, name_at, result, host_byte, sense_key, count; starts, ends, lost sense lines), every
/// device of the log with its commands (`log_devices`, for --device/--target/--lun's notes),
/// whether the views' rows were let go (`collected_over`).
#[pyclass(get_all)]
struct EngineResults {
    commands: i64,
    devices: Py<Columns>,
    srt_opcodes: Vec<i64>,
    srt_samples: Vec<Py<Samples>>,
    srt_io: Vec<i64>,
    srt_cdb: Vec<Vec<u8>>,
    latency: Py<Samples>,
    paired: i64,
    reasons: Py<Columns>,
    totals: Vec<i64>,
    counts: Vec<i64>,
    n_dev: i64,
    segment_stride: i64,
    kept_rows: i64,
    stride: i64,
    completions: Py<Columns>,
    starts: i64,
    ends: i64,
    lost_senses: i64,
    log_devices: Py<Columns>,
    collected_over: bool,
    sized: Vec<bool>,
    any_sized: bool,
    data_bytes: i64,
    reason_texts: Py<Columns>,
    driver_opcodes: Vec<i64>,
    driver_samples: Vec<Py<Samples>>,
    driver_cdb: Vec<Vec<u8>>,
}

/// The opcodes with times (ascending) and each one's (Samples, lowest io, its CDB).
fn by_opcode(py: Python, srt: &[Option<OpcodeTimes>]) -> PyResult<(Vec<i64>, Vec<(Py<Samples>, i64, Vec<u8>)>)> {
    let mut ops = Vec::new();
    let mut out = Vec::new();
    for (op, entry) in srt.iter().enumerate() {
        if let Some(e) = entry {
            ops.push(op as i64);
            out.push((Py::new(py, e.samples.clone())?, e.io, e.cdb.clone()));
        }
    }
    Ok((ops, out))
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<ScsilogEngine>()?;
    Ok(())
}
