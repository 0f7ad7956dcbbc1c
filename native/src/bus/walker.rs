//! Stage 2 of the bus machine (scsitrace/bus/machine.py): the walk over the phase runs that
//! rebuilds connections and I/Os. `Walker` is fed runs in batches (the last run of a batch
//! waits for the next batch's first key: the phase of a run looks one run ahead) and hands
//! back the segments, ios and anomalies as columns. The machine as data (legal successors,
//! the category of each phase, the phase of each MSG C/D I/O code, the message classes,
//! which opcodes carry a LUN) comes from machine.py and scsi.py; the phases are numbered as
//! in `PHASES`, exported as `WALK_PHASES`.
use std::sync::Arc;

use arrow_array::types::{Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt8Type};
use arrow_array::{Array, ArrayRef, BooleanArray, GenericListArray, OffsetSizeTrait, PrimitiveArray, StringArray};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::arrow::{ints, options_of, values_of, Columns, Table};
use crate::hash::IntMap;

const PHASES: [&str; 15] = ["START", "RESET", "BUS FREE", "ARBITRATION", "SELECTION", "RESELECTION", "DATA OUT",
                            "DATA IN", "COMMAND", "STATUS", "MESSAGE OUT", "MESSAGE IN", "RESERVED",
                            "CONNECTED, NO TRANSFER", "ABORT (SEL)"];
const START: u8 = 0;
const RESET: u8 = 1;
const BUS_FREE: u8 = 2;
const ARBITRATION: u8 = 3;
const SELECTION: u8 = 4;
const RESELECTION: u8 = 5;
const DATA_OUT: u8 = 6;
const DATA_IN: u8 = 7;
const COMMAND: u8 = 8;
const STATUS: u8 = 9;
const MESSAGE_OUT: u8 = 10;
const MESSAGE_IN: u8 = 11;
const RESERVED: u8 = 12;
// shorter idle-line states are the bus between two phases (a target switching its lines), not a
// target holding the bus while it seeks: they stay DATA OUT as the SCSI-2 tables read them
const NO_TRANSFER_MIN_NS: i64 = 10_000;
const NO_TRANSFER: u8 = 13; // BSY held, phase lines idle (the DATA OUT pattern), no REQ nor ACK: a target busy while connected
const SEL_ABORT: u8 = 14; // SEL asserted inside a connection: the initiator asks the target to abort (PC Engine CD-ROM)
const N_PHASES: usize = PHASES.len();

const ANOMALY_KINDS: [&str; 11] = ["ILLEGAL TRANSITION", "RESERVED PHASE", "RESET", "SELECTION TIMEOUT",
                                   "RESELECTION TIMEOUT", "UNEXPECTED BUS FREE", "ARBITRATION WITHOUT SELECTION",
                                   "BAD SELECTION IDS", "MESSAGE REJECT", "SEL RELEASED BEFORE BSY", "ABORT BY SEL"];
const ILLEGAL_TRANSITION: u8 = 0;
const RESERVED_PHASE: u8 = 1;
const RESET_ANOMALY: u8 = 2;
const SELECTION_TIMEOUT: u8 = 3;
const RESELECTION_TIMEOUT: u8 = 4;
const UNEXPECTED_BUS_FREE: u8 = 5;
const ARBITRATION_WITHOUT_SELECTION: u8 = 6;
const BAD_SELECTION_IDS: u8 = 7;
const MESSAGE_REJECT: u8 = 8;
const SEL_BEFORE_BSY: u8 = 9;
const ABORT_BY_SEL: u8 = 10;

// a selection whose SEL is released before the target raises BSY (PC Engine CD-ROM: about
// 0.6 ms later) is still a selection when BSY comes within the selection time-out (SCSI-2
// recommends 250 ms) and no (re)selection follows it
const LATE_BSY_NS: i64 = 250_000_000;

// an I/O's status: a status byte (0-255), none, or aborted
const NO_STATUS: i16 = -1;
const ABORTED_RESET: i16 = 256;
const ABORTED_BUS_FREE: i16 = 257;
const ABORTED_SEL: i16 = 258;

// message classes (bit flags of the `messages` table)
const QUEUE_TAG: u8 = 1;
const TWO_BYTE: u8 = 2;
const COMPLETION: u8 = 4;

const N_DEVICES: u8 = 64; // the device number of an I/O without a target (devices: 8 targets x 8 LUNs)
const CDB_WIDTH: usize = 16; // bytes of each CDB handed back (scsi.decode_cdb_matrix reads no more)

struct Io {
    target: Option<i8>,
    lun: Option<i16>,
    tag: Option<i16>,
    cdb: Vec<u8>,
    start_ns: Option<i64>,
    end_ns: Option<i64>,
    status: i16,
    data_bytes: i64,
    data_in: bool,
    data_out: bool,
    connections: i32,
    disconnects: i32,
    complete: bool,
    partial: bool,
}

#[derive(PartialEq)]
enum Kind {
    Sel,
    Resel,
    Partial, // the trace began inside it
}

struct Conn {
    id: i64,
    kind: Kind,
    start_ns: i64,
    target: Option<i8>,
    initiator: Option<i8>,
    io: Option<usize>,
    saw_status: bool,
    completed: bool,
    abort: Option<(i64, u8)>, // the initiator's first abort request (SEL): when, and the phase it interrupted
    lun: Option<i16>,
    tag: Option<i16>,
    segs: Vec<usize>, // segments still waiting for the io
}

struct Seg {
    start_ns: i64,
    end_ns: i64,
    phase: u8,
    category: u8,
    target: Option<i8>,
    initiator: Option<i8>,
    connection: Option<i64>,
    io: Option<i64>,
    bytes: Option<i64>,
    msg: Option<u8>,
}

/// One phase run, borrowed from a batch (or the run kept from the batch before).
struct Run<'a> {
    start_ns: i64,
    end_ns: i64,
    key: u16,
    n_req: i64,
    n_ack: i64,
    db_last: Option<u8>,
    info: &'a [u8],
}

struct OwnedRun {
    start_ns: i64,
    end_ns: i64,
    key: u16,
    n_req: i64,
    n_ack: i64,
    db_last: Option<u8>,
    info: Vec<u8>,
}

impl OwnedRun {
    fn borrow(&self) -> Run<'_> {
        Run { start_ns: self.start_ns, end_ns: self.end_ns, key: self.key, n_req: self.n_req,
              n_ack: self.n_ack, db_last: self.db_last, info: &self.info }
    }
}

/// The tables and options the walk reads (fixed for a trace).
struct Rules {
    legal: [[bool; N_PHASES]; N_PHASES],
    category: [u8; N_PHASES],
    disconnect_category: u8,
    info_phase: [u8; 8],
    messages: [u8; 256],
    lun_groups: [bool; 256],
    rst: u16,
    sel: u16,
    bsy: u16,
    msg: u16,
    cd: u16,
    io: u16,
    initiator_id: i8,
    invert: bool,
    has_bytes: bool,
    has_db: bool,
    use_ack: bool,
}

/// The walk over the phase runs: `_Walker` of tests/bus_walker_reference.py, whose tables
/// this equals on any sequence of runs.
#[pyclass(module = "scsitrace._native.bus")]
pub struct Walker {
    r: Rules,
    segs: Vec<Seg>,
    anom_t: Vec<i64>,
    anom_kind: Vec<u8>,
    anom_detail: Vec<String>,
    ios: Vec<Io>,
    outstanding: IntMap<u64, usize>, // I_T_L_Q nexus (`nexus`) -> io
    prev: u8,
    conn: Option<Conn>,
    recovering: bool,
    n_conn: i64,
    completions: i64,
    unmatched_completions: i64,
    ambiguous_reselections: i64,
    arb_seg: Option<usize>,
    arb_db: Option<u8>,
    pending: Option<OwnedRun>, // the last run fed: its phase waits for the next key
    finished: bool,
    late_bsy: Option<LateBsy>, // a selection whose SEL went before BSY came, waiting for BSY
}

/// A selection followed by BUS FREE: a time-out unless BSY comes next (`LATE_BSY_NS`).
struct LateBsy {
    conn: Conn,
    sel_seg: usize, // its SELECTION segment; the BUS FREE segment after it is the last one
    t_ns: i64,      // where BUS FREE began
}

fn name(p: u8) -> &'static str {
    PHASES[p as usize]
}

impl Walker {
    fn db(&self, v: Option<u8>) -> Option<u8> {
        v.map(|b| if self.r.invert { b ^ 0xFF } else { b })
    }

    fn anomaly(&mut self, t_ns: i64, kind: u8, detail: String) {
        self.anom_t.push(t_ns);
        self.anom_kind.push(kind);
        self.anom_detail.push(detail);
    }

    fn add_segment(&mut self, run: &Run, phase: u8, category: u8, msg: Option<u8>, bytes: Option<i64>) -> usize {
        let idx = self.segs.len();
        let (mut target, mut initiator, mut connection, mut io) = (None, None, None, None);
        if let Some(c) = self.conn.as_mut() {
            (target, initiator, connection, io) = (c.target, c.initiator, Some(c.id), c.io.map(|i| i as i64));
            if c.io.is_none() {
                c.segs.push(idx);
            }
        }
        self.segs.push(Seg { start_ns: run.start_ns, end_ns: run.end_ns, phase, category, target, initiator,
                             connection, io, bytes, msg });
        idx
    }

    /// Fill ids learnt late (target from selection, io from IDENTIFY) into earlier segments.
    fn patch_connection(&mut self) {
        let c = self.conn.as_mut().expect("a connection");
        for &i in &c.segs {
            let s = &mut self.segs[i];
            s.target = c.target;
            s.initiator = c.initiator;
            if let Some(io) = c.io {
                s.io = Some(io as i64);
            }
        }
        if c.io.is_some() {
            c.segs.clear();
        }
    }

    fn new_io(&mut self, t_ns: i64, partial: bool) -> usize {
        self.ios.push(Io { target: None, lun: None, tag: None, cdb: Vec::new(),
                           start_ns: if partial { None } else { Some(t_ns) }, end_ns: None, status: NO_STATUS,
                           data_bytes: 0, data_in: false, data_out: false, connections: 0, disconnects: 0,
                           complete: false, partial });
        self.ios.len() - 1
    }

    /// I_T_L_Q nexus; an I/O whose target is unknown (no data bus) is its own key.
    fn nexus(&self, io: usize) -> u64 {
        let x = &self.ios[io];
        match x.target {
            None => 1 << 63 | io as u64,
            Some(t) => nexus_key(t, x.lun, x.tag),
        }
    }

    fn phase_of(&self, key: u16, next_key: Option<u16>) -> u8 {
        let r = &self.r;
        if key & r.rst != 0 {
            return RESET;
        }
        if key & r.sel != 0 {
            return if key & r.io != 0 { RESELECTION } else { SELECTION };
        }
        if key & r.bsy == 0 {
            return BUS_FREE;
        }
        let code = self.info_code(key);
        let next_selects = next_key.is_some_and(|k| k & r.sel != 0);
        // ARBITRATION and DATA OUT share the pattern: after BUS FREE it is arbitration; at the
        // start of the trace only if a (re)selection follows
        if code == 0 && (self.prev == BUS_FREE || self.prev == RESET || (self.prev == START && next_selects)) {
            return ARBITRATION;
        }
        r.info_phase[code as usize]
    }

    fn info_code(&self, key: u16) -> u8 {
        let r = &self.r;
        ((key & r.msg != 0) as u8) << 2 | ((key & r.cd != 0) as u8) << 1 | (key & r.io != 0) as u8
    }

    /// The one function that owns every transition.
    fn step(&mut self, run: &Run, next_key: Option<u16>) {
        if let Some(w) = self.late_bsy.take() {
            self.answer_late(w, run, next_key);
        }
        let mut phase = self.phase_of(run.key, next_key);
        if phase == DATA_OUT && self.r.has_bytes && run.n_req == 0 && run.n_ack == 0
            && run.end_ns - run.start_ns >= NO_TRANSFER_MIN_NS {
            phase = NO_TRANSFER;
        }
        if (phase == SELECTION || phase == RESELECTION) && self.conn.is_some() && !self.recovering
            && (self.prev >= DATA_OUT && self.prev <= MESSAGE_IN || self.prev == NO_TRANSFER || self.prev == SEL_ABORT) {
            phase = SEL_ABORT;
        }
        let t = run.start_ns;
        if !self.r.legal[self.prev as usize][phase as usize] && phase != RESERVED && !self.recovering {
            self.anomaly(t, ILLEGAL_TRANSITION, format!("{} -> {}", name(self.prev), name(phase)));
            self.recovering = true;
        }
        match phase {
            RESERVED => {
                if !self.recovering {
                    let detail = format!("MSG C/D I/O = {:03b}", self.info_code(run.key));
                    self.anomaly(t, RESERVED_PHASE, detail);
                }
                self.recovering = true;
                self.add_segment(run, phase, self.r.category[phase as usize], None, None);
            }
            RESET => self.on_reset(run),
            BUS_FREE => self.on_bus_free(run),
            ARBITRATION => self.on_arbitration(run, next_key),
            SELECTION | RESELECTION => self.on_selection(run, phase),
            SEL_ABORT => self.on_abort(run),
            _ => self.on_info(run, phase, next_key),
        }
        self.prev = phase;
    }

    fn on_reset(&mut self, run: &Run) {
        let mut victims: Vec<usize> = self.outstanding.values().copied().collect();
        if let Some(io) = self.conn.as_ref().and_then(|c| c.io) {
            if !victims.contains(&io) {
                victims.push(io);
            }
        }
        victims.retain(|&io| !self.ios[io].complete);
        for &io in &victims {
            self.ios[io].status = ABORTED_RESET;
            self.ios[io].end_ns = Some(run.start_ns);
        }
        self.anomaly(run.start_ns, RESET_ANOMALY,
                     format!("RST asserted; {} outstanding I/O(s) aborted", victims.len()));
        self.outstanding.clear();
        self.conn = None;
        self.add_segment(run, RESET, self.r.category[RESET as usize], None, None);
        self.recovering = false;
    }

    fn on_bus_free(&mut self, run: &Run) {
        if self.conn.is_some() && !self.recovering && self.prev == SELECTION && run.end_ns - run.start_ns <= LATE_BSY_NS {
            let conn = self.conn.take().expect("a connection");
            self.late_bsy = Some(LateBsy { conn, sel_seg: self.segs.len() - 1, t_ns: run.start_ns });
        } else if self.conn.is_some() && !self.recovering {
            self.close_connection(run.start_ns);
        }
        self.conn = None;
        self.recovering = false;
        self.arb_seg = None;
        self.add_segment(run, BUS_FREE, self.r.category[BUS_FREE as usize], None, None);
    }

    /// The run after a selection's BUS FREE: BSY without SEL (and no selection after it) is the
    /// target answering late: the BUS FREE becomes part of the selection; anything else makes
    /// it a selection time-out.
    fn answer_late(&mut self, w: LateBsy, run: &Run, next_key: Option<u16>) {
        let r = &self.r;
        let answers = run.key & r.bsy != 0 && run.key & (r.sel | r.rst) == 0 && next_key.map_or(true, |k| k & r.sel == 0);
        if !answers {
            self.anomaly(w.t_ns, SELECTION_TIMEOUT, selection_timeout_detail(w.conn.target));
            return;
        }
        let free = self.segs.pop().expect("the BUS FREE segment");
        self.segs[w.sel_seg].end_ns = free.end_ns;
        self.anomaly(w.t_ns, SEL_BEFORE_BSY,
                     format!("SEL released {} ns before the target raised BSY; taken as the selection", free.end_ns - free.start_ns));
        self.conn = Some(w.conn);
        self.prev = SELECTION;
    }

    /// SEL asserted inside a connection: the initiator's abort request. The handshakes while
    /// SEL is held drain the interrupted DATA phase; the I/O ends aborted unless it completes.
    fn on_abort(&mut self, run: &Run) {
        let before = self.prev;
        let nbytes = self.handshake_count(run);
        let c = self.conn.as_mut().expect("a connection");
        if c.abort.is_none() {
            c.abort = Some((run.start_ns, before));
            self.anomaly(run.start_ns, ABORT_BY_SEL, format!("the initiator asserted SEL during {}: abort request", name(before)));
        }
        let c = self.conn.as_ref().expect("a connection");
        if let (Some(io), Some((_, interrupted))) = (c.io, c.abort) {
            if interrupted == DATA_IN || interrupted == DATA_OUT {
                self.ios[io].data_bytes += nbytes.unwrap_or(0);
            }
        }
        self.add_segment(run, SEL_ABORT, self.r.category[SEL_ABORT as usize], None, nbytes);
    }

    fn handshake_count(&self, run: &Run) -> Option<i64> {
        if !self.r.has_bytes {
            None
        } else if self.r.use_ack {
            Some(run.n_ack)
        } else {
            Some(run.n_req)
        }
    }

    /// An I/O the initiator aborted with SEL ends at the abort request.
    fn end_aborted(&mut self, io: usize, t_ns: i64) {
        if !self.ios[io].complete {
            self.ios[io].status = ABORTED_SEL;
            self.ios[io].end_ns = Some(t_ns);
            let k = self.nexus(io);
            self.outstanding.remove(&k);
        }
    }

    fn close_connection(&mut self, t_ns: i64) {
        let last = self.prev;
        let c = self.conn.as_ref().expect("a connection");
        let (io, completed, target, abort) = (c.io, c.completed, c.target, c.abort);
        if !completed && abort.is_some() {
            if let Some(io) = io {
                self.end_aborted(io, t_ns);
            }
        } else if completed {
            self.completions += 1;
            match io {
                Some(io) => {
                    self.ios[io].complete = true;
                    self.ios[io].end_ns = Some(t_ns);
                    let k = self.nexus(io);
                    self.outstanding.remove(&k);
                }
                None => self.unmatched_completions += 1,
            }
        } else if last == MESSAGE_IN {
            if let Some(io) = io {
                self.ios[io].disconnects += 1;
                let k = self.nexus(io);
                self.outstanding.insert(k, io);
            }
        } else if last == SELECTION {
            self.anomaly(t_ns, SELECTION_TIMEOUT, selection_timeout_detail(target));
        } else if last == RESELECTION {
            self.anomaly(t_ns, RESELECTION_TIMEOUT, "the initiator did not answer the reselection".to_string());
        } else {
            self.anomaly(t_ns, UNEXPECTED_BUS_FREE, format!("bus went free after {}", name(last)));
            if let Some(io) = io {
                if !self.ios[io].complete {
                    self.ios[io].status = ABORTED_BUS_FREE;
                    self.ios[io].end_ns = Some(t_ns);
                    let k = self.nexus(io);
                    self.outstanding.remove(&k);
                }
            }
        }
    }

    fn on_arbitration(&mut self, run: &Run, next_key: Option<u16>) {
        self.conn = None;
        self.arb_db = self.db(run.db_last);
        if next_key.map_or(true, |k| k & self.r.sel == 0) {
            self.anomaly(run.start_ns, ARBITRATION_WITHOUT_SELECTION,
                         "BSY asserted after BUS FREE but no device went on to select".to_string());
        }
        self.arb_seg = Some(self.add_segment(run, ARBITRATION, self.r.category[ARBITRATION as usize], None, None));
    }

    fn on_selection(&mut self, run: &Run, phase: u8) {
        let category = self.r.category[phase as usize];
        if self.recovering {
            self.add_segment(run, phase, category, None, None);
            return;
        }
        let reselect = phase == RESELECTION;
        let (initiator, target) = self.ids_of(self.db(run.db_last), reselect, run.start_ns);
        let mut c = Conn { id: self.n_conn, kind: if reselect { Kind::Resel } else { Kind::Sel },
                           start_ns: run.start_ns, target, initiator, io: None, saw_status: false, completed: false, abort: None,
                           lun: None, tag: None, segs: Vec::new() };
        self.n_conn += 1;
        if let Some(arb) = self.arb_seg.take() {
            c.start_ns = self.segs[arb].start_ns;
            c.segs.push(arb);
            self.segs[arb].connection = Some(c.id);
        }
        self.conn = Some(c);
        self.add_segment(run, phase, category, None, None);
        self.patch_connection();
        if reselect {
            self.match_reselection();
        }
    }

    /// (initiator, target) from the ID bits of a (re)selection, or the header's initiator.
    fn ids_of(&mut self, bits: Option<u8>, reselect: bool, t_ns: i64) -> (Option<i8>, Option<i8>) {
        let me = self.r.initiator_id;
        let Some(bits) = bits else {
            return (if self.r.has_db { None } else { Some(me) }, None);
        };
        let ids: Vec<i8> = (0..8).filter(|i| bits >> i & 1 != 0).collect();
        let winner = match self.arb_db {
            Some(a) if a != 0 => Some(7 - a.leading_zeros() as i8),
            _ => None,
        };
        if ids.len() == 1 {
            return (Some(me), Some(ids[0]));
        }
        if ids.len() == 2 {
            if let Some(w) = winner.filter(|w| ids.contains(w)) {
                let other = if ids[1] == w { ids[0] } else { ids[1] };
                return if reselect { (Some(other), Some(w)) } else { (Some(w), Some(other)) };
            }
            if ids.contains(&me) {
                let other = if ids[1] == me { ids[0] } else { ids[1] };
                return (Some(me), Some(other));
            }
        }
        self.anomaly(t_ns, BAD_SELECTION_IDS, format!("ID bits 0x{:02x} on the data bus", bits));
        (None, None)
    }

    /// Level 1-2: no IDs on the bus, so a reselection resumes the one outstanding I/O when
    /// there is exactly one; with none it resumes an I/O begun before the trace.
    fn match_reselection(&mut self) {
        if self.r.has_db {
            return; // wait for IDENTIFY (and a queue tag) in MESSAGE IN
        }
        if self.outstanding.len() == 1 {
            let io = *self.outstanding.values().next().expect("one");
            self.bind(io);
        } else if self.outstanding.is_empty() {
            let start = self.conn.as_ref().expect("a connection").start_ns;
            let io = self.new_io(start, true);
            self.bind(io);
        } else {
            self.ambiguous_reselections += 1;
        }
    }

    /// Level 3: find the I/O a reselection resumes from its target, LUN and tag.
    fn resume_nexus(&mut self) {
        let c = self.conn.as_ref().expect("a connection");
        let (target, lun, tag, start) = (c.target, c.lun, c.tag, c.start_ns);
        let mut found = target.and_then(|t| self.outstanding.get(&nexus_key(t, lun, tag)).copied());
        if found.is_none() && tag.is_none() {
            let mut same = self.outstanding.values().filter(|&&x| self.ios[x].target == target && self.ios[x].lun == lun);
            if let (Some(&x), None) = (same.next(), same.next()) {
                found = Some(x);
            }
        }
        let io = match found {
            Some(io) => io,
            None => {
                // an I/O whose command went out before the trace began
                let mut unknown = self.outstanding.values().filter(|&&x| self.ios[x].partial && self.ios[x].target.is_none());
                let io = if let (Some(&x), None) = (unknown.next(), unknown.next()) {
                    let k = self.nexus(x);
                    self.outstanding.remove(&k);
                    x
                } else {
                    self.new_io(start, true)
                };
                let x = &mut self.ios[io];
                (x.target, x.lun, x.tag) = (target, lun, tag);
                io
            }
        };
        self.bind(io);
    }

    fn bind(&mut self, io: usize) {
        self.conn.as_mut().expect("a connection").io = Some(io);
        self.ios[io].connections += 1;
        self.patch_connection();
    }

    fn on_info(&mut self, run: &Run, phase: u8, next_key: Option<u16>) {
        if self.conn.is_none() {
            // the trace began inside a connection
            self.conn = Some(Conn { id: self.n_conn, kind: Kind::Partial, start_ns: run.start_ns, target: None,
                                    initiator: if self.r.has_db { None } else { Some(self.r.initiator_id) },
                                    io: None, saw_status: false, completed: false, abort: None, lun: None, tag: None,
                                    segs: Vec::new() });
            self.n_conn += 1;
        }
        let data: Vec<u8> = if self.r.has_db {
            run.info.iter().map(|&b| if self.r.invert { b ^ 0xFF } else { b }).collect()
        } else {
            Vec::new()
        };
        let nbytes = self.handshake_count(run);
        let msg = if phase == MESSAGE_IN || phase == MESSAGE_OUT { data.first().copied() } else { None };
        let mut category = self.r.category[phase as usize];
        if self.recovering {
            self.add_segment(run, phase, category, msg, nbytes);
            return;
        }
        match phase {
            MESSAGE_OUT => self.read_messages(&data, true, run.start_ns),
            COMMAND => self.on_command(data.clone(), run.start_ns),
            MESSAGE_IN => {
                self.read_messages(&data, false, run.start_ns);
                let r = &self.r;
                let c = self.conn.as_mut().expect("a connection");
                let ends = next_key.is_some_and(|k| k & (r.bsy | r.sel) == 0) && !c.saw_status;
                if self.prev == RESELECTION || ends || (next_key.is_none() && !c.saw_status) {
                    category = r.disconnect_category;
                }
                if c.saw_status && (!r.has_db || data.iter().any(|&m| r.messages[m as usize] & COMPLETION != 0)) {
                    c.completed = true;
                }
            }
            STATUS => {
                self.conn.as_mut().expect("a connection").saw_status = true;
                self.bind_partial(run.start_ns);
                if let (Some(io), Some(&s)) = (self.conn.as_ref().and_then(|c| c.io), data.first()) {
                    self.ios[io].status = s as i16;
                }
            }
            DATA_IN | DATA_OUT => {
                self.bind_partial(run.start_ns);
                if let Some(io) = self.conn.as_ref().and_then(|c| c.io) {
                    let x = &mut self.ios[io];
                    x.data_bytes += nbytes.unwrap_or(0);
                    x.data_in |= phase == DATA_IN;
                    x.data_out |= phase == DATA_OUT;
                }
            }
            _ => {}
        }
        self.add_segment(run, phase, category, msg, nbytes);
    }

    /// A partial connection's first STATUS or DATA phase: the I/O it belongs to began before the trace.
    fn bind_partial(&mut self, t_ns: i64) {
        let c = self.conn.as_ref().expect("a connection");
        if c.io.is_none() && c.kind == Kind::Partial {
            let io = self.new_io(t_ns, true);
            self.bind(io);
        }
    }

    fn on_command(&mut self, cdb: Vec<u8>, t_ns: i64) {
        let c = self.conn.as_ref().expect("a connection");
        if let (Some(io), Some((at, _))) = (c.io, c.abort) {
            // a new command after an abort request: the aborted I/O ends there, the new one begins
            if !self.ios[io].cdb.is_empty() && !cdb.is_empty() {
                self.end_aborted(io, at);
                let c = self.conn.as_mut().expect("a connection");
                (c.io, c.abort, c.saw_status, c.completed, c.start_ns) = (None, None, false, false, t_ns);
                c.kind = Kind::Sel;
            }
        }
        let c = self.conn.as_ref().expect("a connection");
        if let Some(io) = c.io {
            let x = &mut self.ios[io];
            if x.cdb.is_empty() {
                x.cdb = cdb;
            }
            return;
        }
        let (start, target, lun, tag, partial) = (c.start_ns, c.target, c.lun, c.tag, c.kind == Kind::Partial);
        let io = self.new_io(start, false);
        let x = &mut self.ios[io];
        (x.target, x.lun, x.tag) = (target, lun, tag);
        if x.lun.is_none() && cdb.len() >= 2 {
            x.lun = super::cdb::cdb_lun(cdb[0], cdb[1], cdb.len() as i64, &self.r.lun_groups);
        }
        x.cdb = cdb;
        if partial {
            (x.partial, x.start_ns) = (true, None);
        }
        self.bind(io);
    }

    fn read_messages(&mut self, data: &[u8], outbound: bool, t_ns: i64) {
        let mut i = 0;
        while i < data.len() {
            let m = data[i];
            let class = self.r.messages[m as usize];
            if m & 0x80 != 0 {
                self.conn.as_mut().expect("a connection").lun = Some((m & 0x07) as i16);
            } else if class & QUEUE_TAG != 0 && i + 1 < data.len() {
                self.conn.as_mut().expect("a connection").tag = Some(data[i + 1] as i16);
                i += 1;
            } else if m == 0x01 && i + 1 < data.len() {
                i += 1 + data[i + 1] as usize; // extended message: length byte, then payload
            } else if class & TWO_BYTE != 0 {
                i += 1;
            } else if m == 0x07 {
                let who = if outbound { "sent by the initiator" } else { "from the target" };
                self.anomaly(t_ns, MESSAGE_REJECT, format!("MESSAGE REJECT {}", who));
            }
            i += 1;
        }
        let c = self.conn.as_ref().expect("a connection");
        if c.io.is_none() && c.kind == Kind::Resel && !data.is_empty() && !outbound {
            self.resume_nexus();
        }
    }

    fn take_pending(&mut self, next_key: Option<u16>) {
        if let Some(p) = self.pending.take() {
            self.step(&p.borrow(), next_key);
        }
    }
}

fn selection_timeout_detail(target: Option<i8>) -> String {
    match target {
        Some(t) => format!("no target answered selection of target {}", t),
        None => "no target answered the selection".to_string(),
    }
}

fn nexus_key(target: i8, lun: Option<i16>, tag: Option<i16>) -> u64 {
    let field = |v: Option<i16>| v.map_or(0xFFFF, |x| x as u16 as u64);
    (target as u8 as u64) << 32 | field(lun) << 16 | field(tag)
}

fn table<const N: usize, T: Copy + numpy::Element>(a: &PyReadonlyArray1<T>, what: &str) -> PyResult<[T; N]> {
    let s = a.as_slice()?;
    s.try_into().map_err(|_| PyValueError::new_err(format!("Walker: {} needs {} entries", what, N)))
}

/// The machine as data (machine.py `walk_tables`), read by name: `legal`, 15 x 15 booleans
/// (row: the phase before, column: the phase after, numbered as WALK_PHASES); `category`:
/// each phase's category number; `disconnect_category`: the number of Disconnect/Reconnect;
/// `info_phase`: the phase of each MSG C/D I/O code; `messages`: per message byte, bit flags
/// 1 queue tag, 2 two-byte, 4 completion; `lun_groups`: opcodes whose CDB byte 1 carries the
/// LUN; `bits`: the key bits of RST, SEL, BSY, MSG, C/D, I/O.
#[derive(FromPyObject)]
struct MachineTables<'py> {
    legal: PyReadonlyArray1<'py, bool>,
    category: PyReadonlyArray1<'py, u8>,
    disconnect_category: u8,
    info_phase: PyReadonlyArray1<'py, u8>,
    messages: PyReadonlyArray1<'py, u8>,
    lun_groups: PyReadonlyArray1<'py, bool>,
    bits: PyReadonlyArray1<'py, u16>,
}

/// What the trace holds (machine.py `Walker`), read by name: the initiator's ID from the
/// header, whether the data bus reads inverted, whether handshakes are counted (REQ/ACK
/// captured), whether the data bus was sampled, and whether ACK (not REQ) counts the bytes.
#[derive(FromPyObject)]
struct TraceOptions {
    initiator_id: i8,
    invert: bool,
    has_bytes: bool,
    has_db: bool,
    use_ack: bool,
}

impl MachineTables<'_> {
    fn rules(&self, o: &TraceOptions) -> PyResult<Rules> {
        let flat: [bool; N_PHASES * N_PHASES] = table(&self.legal, "legal")?;
        let mut legal = [[false; N_PHASES]; N_PHASES];
        for (i, row) in legal.iter_mut().enumerate() {
            row.copy_from_slice(&flat[i * N_PHASES..(i + 1) * N_PHASES]);
        }
        let info_phase: [u8; 8] = table(&self.info_phase, "info_phase")?;
        if info_phase.iter().any(|&p| p as usize >= N_PHASES) {
            return Err(PyValueError::new_err("Walker: info_phase holds a phase number past WALK_PHASES"));
        }
        let bits: [u16; 6] = table(&self.bits, "bits")?;
        Ok(Rules { legal, category: table(&self.category, "category")?, disconnect_category: self.disconnect_category,
                   info_phase, messages: table(&self.messages, "messages")?, lun_groups: table(&self.lun_groups, "lun_groups")?,
                   rst: bits[0], sel: bits[1], bsy: bits[2], msg: bits[3], cd: bits[4], io: bits[5],
                   initiator_id: o.initiator_id, invert: o.invert, has_bytes: o.has_bytes, has_db: o.has_db,
                   use_ack: o.use_ack })
    }
}

/// A nullable uint8 column as options.
fn byte_options(t: &Table, name: &str) -> PyResult<Vec<Option<u8>>> {
    let mut out = Vec::with_capacity(t.len());
    for a in t.arrays(name)? {
        let a = a.as_any().downcast_ref::<PrimitiveArray<UInt8Type>>()
            .ok_or_else(|| PyTypeError::new_err(format!("column {name:?} is {}, expected UInt8", a.data_type())))?;
        out.extend(a.iter());
    }
    Ok(out)
}

/// A list-of-uint8 column (null: no bytes) as its values and n + 1 offsets into them.
fn byte_lists(t: &Table, name: &str) -> PyResult<(Vec<u8>, Vec<usize>)> {
    let (mut values, mut offsets) = (Vec::new(), vec![0usize]);
    for a in t.arrays(name)? {
        let read = append_lists::<i64>(a, &mut values, &mut offsets) || append_lists::<i32>(a, &mut values, &mut offsets);
        if !read {
            return Err(PyTypeError::new_err(format!("column {name:?} is {}, expected a list of UInt8", a.data_type())));
        }
    }
    Ok((values, offsets))
}

fn append_lists<O: OffsetSizeTrait>(a: &ArrayRef, values: &mut Vec<u8>, offsets: &mut Vec<usize>) -> bool {
    let Some(list) = a.as_any().downcast_ref::<GenericListArray<O>>() else { return false };
    let Some(bytes) = list.values().as_any().downcast_ref::<PrimitiveArray<UInt8Type>>() else { return false };
    let (bytes, at) = (bytes.values(), list.value_offsets());
    for i in 0..list.len() {
        if list.is_valid(i) {
            values.extend_from_slice(&bytes[at[i].as_usize()..at[i + 1].as_usize()]);
        }
        offsets.push(values.len());
    }
    true
}

fn bools(values: impl Iterator<Item = bool>) -> ArrayRef {
    Arc::new(values.map(Some).collect::<BooleanArray>())
}

/// The I/Os: their columns, and each CDB (n x 16 bytes, row-major; `cdb_len` of them used)
/// for scsi.decode_cdb_matrix.
#[pyclass(get_all)]
struct WalkedIos {
    columns: Py<Columns>,
    cdb: Py<PyArray2<u8>>,
}

#[pymethods]
impl Walker {
    /// The walk of one trace: the machine's tables and what the trace holds.
    #[new]
    fn new(tables: MachineTables, trace: TraceOptions) -> PyResult<Self> {
        let r = tables.rules(&trace)?;
        Ok(Walker { r, segs: Vec::new(), anom_t: Vec::new(), anom_kind: Vec::new(), anom_detail: Vec::new(),
                    ios: Vec::new(), outstanding: IntMap::default(), prev: START, conn: None, recovering: false,
                    n_conn: 0, completions: 0, unmatched_completions: 0, ambiguous_reselections: 0, arb_seg: None,
                    arb_db: None, pending: None, finished: false, late_bsy: None })
    }

    /// One batch of phase runs in time order: a runs frame (bus/runs.py RUN_SCHEMA; read:
    /// start_ns, end_ns, key, n_req, n_ack, db_last, info_bytes). The last run waits for the
    /// next batch (or `finish`): its phase depends on the key after it.
    fn feed(&mut self, py: Python, runs: Table) -> PyResult<()> {
        if self.finished {
            return Err(PyValueError::new_err("Walker.feed: after finish"));
        }
        let n = runs.len();
        if n == 0 {
            return Ok(());
        }
        let (start_ns, end_ns, n_req, n_ack) =
            (runs.i64s("start_ns")?, runs.i64s("end_ns")?, runs.i64s("n_req")?, runs.i64s("n_ack")?);
        let key = runs.values::<UInt16Type>("key")?;
        let db_last = byte_options(&runs, "db_last")?;
        let (values, offsets) = byte_lists(&runs, "info_bytes")?;
        let (start_ns, end_ns, n_req, n_ack, key) = (&*start_ns, &*end_ns, &*n_req, &*n_ack, &*key);
        let run = |i: usize| Run { start_ns: start_ns[i], end_ns: end_ns[i], key: key[i], n_req: n_req[i],
                                   n_ack: n_ack[i], db_last: db_last[i], info: &values[offsets[i]..offsets[i + 1]] };
        let this = &mut *self;
        py.allow_threads(move || {
            this.take_pending(Some(key[0]));
            for i in 1..n {
                this.step(&run(i - 1), Some(key[i]));
            }
            let last = run(n - 1);
            this.pending = Some(OwnedRun { start_ns: last.start_ns, end_ns: last.end_ns, key: last.key,
                                           n_req: last.n_req, n_ack: last.n_ack, db_last: last.db_last,
                                           info: last.info.to_vec() });
        });
        Ok(())
    }

    /// The end of the runs: the last run's phase, with no key after it.
    fn finish(&mut self) {
        self.take_pending(None);
        if let Some(w) = self.late_bsy.take() {
            self.anomaly(w.t_ns, SELECTION_TIMEOUT, selection_timeout_detail(w.conn.target));
        }
        self.finished = true;
    }

    /// The segments: phase and category numbers (WALK_PHASES, machine.py CATEGORIES); target,
    /// initiator, connection, io, bytes and msg null where unknown.
    fn segments(&self) -> PyResult<Columns> {
        let s = &self.segs;
        Columns::new(vec![
            ("start_ns", ints(s.iter().map(|x| x.start_ns).collect())),
            ("end_ns", ints(s.iter().map(|x| x.end_ns).collect())),
            ("phase", values_of::<UInt8Type>(s.iter().map(|x| x.phase).collect())),
            ("category", values_of::<UInt8Type>(s.iter().map(|x| x.category).collect())),
            ("target", options_of::<Int8Type>(s.iter().map(|x| x.target))),
            ("initiator", options_of::<Int8Type>(s.iter().map(|x| x.initiator))),
            ("connection", options_of::<Int64Type>(s.iter().map(|x| x.connection))),
            ("io", options_of::<Int64Type>(s.iter().map(|x| x.io))),
            ("bytes", options_of::<Int64Type>(s.iter().map(|x| x.bytes))),
            ("msg", options_of::<UInt8Type>(s.iter().map(|x| x.msg))),
        ])
    }

    /// The I/Os: `status` a status byte, 256 aborted by a reset, 257 by an unexpected bus
    /// free, 258 by the initiator's SEL, null for none; `data_bytes` null when handshakes
    /// are not counted; `device` target x 8 + LUN (LUN 0 when unknown), 64 without a target;
    /// target, lun, tag, start_ns, end_ns null where unknown.
    fn ios(&self, py: Python) -> PyResult<WalkedIos> {
        let s = &self.ios;
        let has_bytes = self.r.has_bytes;
        let columns = Columns::new(vec![
            ("target", options_of::<Int8Type>(s.iter().map(|x| x.target))),
            ("lun", options_of::<Int16Type>(s.iter().map(|x| x.lun))),
            ("tag", options_of::<Int16Type>(s.iter().map(|x| x.tag))),
            ("start_ns", options_of::<Int64Type>(s.iter().map(|x| x.start_ns))),
            ("end_ns", options_of::<Int64Type>(s.iter().map(|x| x.end_ns))),
            ("status", options_of::<Int16Type>(s.iter().map(|x| (x.status != NO_STATUS).then_some(x.status)))),
            ("data_bytes", options_of::<Int64Type>(s.iter().map(|x| has_bytes.then_some(x.data_bytes)))),
            ("data_in", bools(s.iter().map(|x| x.data_in))),
            ("data_out", bools(s.iter().map(|x| x.data_out))),
            ("connections", values_of::<Int32Type>(s.iter().map(|x| x.connections).collect())),
            ("disconnects", values_of::<Int32Type>(s.iter().map(|x| x.disconnects).collect())),
            ("complete", bools(s.iter().map(|x| x.complete))),
            ("partial", bools(s.iter().map(|x| x.partial))),
            ("cdb_len", ints(s.iter().map(|x| x.cdb.len() as i64).collect())),
            // ids are 0-7 (ID bits, IDENTIFY's and CDB byte 1's three bits)
            ("device", values_of::<UInt8Type>(s.iter()
                .map(|x| x.target.map_or(N_DEVICES, |t| t as u8 * 8 + x.lun.unwrap_or(0) as u8)).collect())),
        ])?;
        let mut cdb = Array2::<u8>::zeros((s.len(), CDB_WIDTH));
        for (i, x) in s.iter().enumerate() {
            let k = x.cdb.len().min(CDB_WIDTH);
            cdb.row_mut(i).as_slice_mut().expect("contiguous")[..k].copy_from_slice(&x.cdb[..k]);
        }
        Ok(WalkedIos { columns: Py::new(py, columns)?, cdb: cdb.into_pyarray_bound(py).unbind() })
    }

    /// The anomalies: `t_ns`, `kind` (numbered as WALK_ANOMALIES), `detail`, `position`.
    fn anomalies(&self) -> PyResult<Columns> {
        let position: Vec<String> = self.anom_t.iter().map(|t| format!("t={} ns", t)).collect();
        Columns::new(vec![
            ("t_ns", ints(self.anom_t.clone())),
            ("kind", values_of::<UInt8Type>(self.anom_kind.clone())),
            ("detail", Arc::new(StringArray::from_iter_values(&self.anom_detail)) as ArrayRef),
            ("position", Arc::new(StringArray::from_iter_values(position)) as ArrayRef),
        ])
    }

    #[getter]
    fn completions(&self) -> i64 {
        self.completions
    }

    #[getter]
    fn unmatched_completions(&self) -> i64 {
        self.unmatched_completions
    }

    #[getter]
    fn ambiguous_reselections(&self) -> i64 {
        self.ambiguous_reselections
    }

    /// Whether the walk waits for BUS FREE after a protocol violation.
    #[getter]
    fn recovering(&self) -> bool {
        self.recovering
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<Walker>()?;
    m.add("WALK_PHASES", PHASES.to_vec())?;
    m.add("WALK_ANOMALIES", ANOMALY_KINDS.to_vec())?;
    Ok(())
}
