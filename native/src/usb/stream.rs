//! The Bulk-Only machine fed URB batches in capture order (scsitrace/usb/streamed.py): URB
//! pairing, transfers and Bulk-Only commands, their state (URBs in flight, bulk transfers
//! waiting for their completion, each device's open command) carried across batch edges,
//! so memory holds what is in flight plus one row per command. The rules are those of
//! transfers and bot_pass (machine.rs). A capture this machine does not
//! cover (transfers out of time order, bulk traffic before a device's first CBW, bulk URB
//! errors) makes `feed` return false: the caller analyses it whole instead.
use std::collections::VecDeque;

use pyo3::prelude::*;

// the constants of the Bulk-Only wire format and of the aggregates, as the whole-capture pass has them
use crate::hash::IntMap;
use crate::arrow::{ints, Columns, Table};
use super::commands::{bot_commands, Cmd, CommandStage, KeptSegments, StageResults};
use super::urbs::{size_and_head, Urbs, DATA_PREFIX};
use super::machine::{min_t, BotCommands, Bulk, CBW_BYTES, CSW_BYTES, EPIPE, EREMOTEIO, LAST, NULL, N_AGG};


/// A bulk transfer waiting for its completion (or for the transfers before it).
struct Xfer {
    done: bool,
    has_c: bool,
    submit: i64,
    complete: i64,
    status: i32,
    req: i64,
    act: i64,
    dir_in: bool,
    bus_dev: i64,
    bus: u16,
    dev: u8,
    pos: i64,
    size: i64,            // data bytes kept from its data row, -1 for none
    head: u32,
    data: [u8; DATA_PREFIX],
}

#[pyclass]
pub struct BotStream {
    waiting: IntMap<u64, (bool, u64)>,    // URB id -> (bulk, transfer number in `queue`)
    queue: VecDeque<Xfer>,
    base: u64,                             // bulk transfer number of queue[0]
    next: u64,
    devices: IntMap<i64, ([i64; N_AGG], i64)>,   // (open command's aggregates, its number or -1)
    prev_t: i64,
    t_min: i64,
    t_max: i64,
    no_submit: i64,
    no_complete: i64,
    ok: bool,
    k: i64,
    ints: Vec<[i64; N_AGG]>,
    cbw: Vec<u8>,
    csw: Vec<u8>,
    csw_size: Vec<i64>,
    bus: Vec<i64>,
    dev: Vec<i64>,
    pos: Vec<i64>,
    cmd_s: Vec<i64>,
    cmd_c: Vec<i64>,
    ctl: Vec<[i64; 6]>,                    // Mass Storage Reset, CLEAR HALT: t, bus, dev, pos, bm, req
    closed: Vec<bool>,                     // per command held: closed (the next CBW or the end came)
    cbase: i64,                            // number of the first command held (earlier ones taken)
    first_t: i64,                          // the first event's time: no later event may be earlier
    stage: CommandStage,                   // the finished commands' tables, tiling and kept rows
    rows: bool,                            // whether take and finish hand back every command's columns
}

impl BotStream {
    fn close(&mut self, acc: &[i64; N_AGG], c: i64) {
        let local = (c - self.cbase) as usize;
        self.ints[local] = *acc;
        self.closed[local] = true;
    }

    /// The first `m` commands held, removed from the machine.
    fn drain_commands(&mut self, m: usize) -> Vec<Cmd> {
        let mut cmds = Vec::with_capacity(m);
        for (i, a) in self.ints.drain(..m).enumerate() {
            let mut c = Cmd { a, cbw: [0; CBW_BYTES], csw: [0; CSW_BYTES], csw_size: self.csw_size[i], bus: self.bus[i],
                              dev: self.dev[i], pos: self.pos[i], cmd_s: self.cmd_s[i], cmd_c: self.cmd_c[i] };
            c.cbw.copy_from_slice(&self.cbw[i * CBW_BYTES..(i + 1) * CBW_BYTES]);
            c.csw.copy_from_slice(&self.csw[i * CSW_BYTES..(i + 1) * CSW_BYTES]);
            cmds.push(c);
        }
        self.closed.drain(..m);
        self.cbw.drain(..m * CBW_BYTES);
        self.csw.drain(..m * CSW_BYTES);
        for col in [&mut self.csw_size, &mut self.bus, &mut self.dev, &mut self.pos, &mut self.cmd_s, &mut self.cmd_c] {
            col.drain(..m);
        }
        self.cbase += m as i64;
        cmds
    }

    /// The first `m` commands held, removed from the machine, added to the command stage
    /// (pieces starting before `before` tiled: NULL, all of them); their rows when the
    /// caller asked for every row.
    fn settle(&mut self, py: Python, m: usize, before: i64) -> PyResult<Option<BotCommands>> {
        let cmds = self.drain_commands(m);
        let origin = self.origin();
        let before = if before == NULL { NULL } else { before - origin };
        let stage = &mut self.stage;
        py.allow_threads(|| stage.add(&cmds, before, origin));
        if !self.rows {
            return Ok(None);
        }
        Ok(Some(bot_commands(py, cmds.into_iter(), origin, None)?))
    }

    /// The capture's first event's time, which the times handed over start from.
    fn origin(&self) -> i64 {
        if self.first_t == NULL { 0 } else { self.first_t }
    }

    /// One bulk transfer, in transfer order (bot_pass' loop body: the rules of machine.rs `Bulk`).
    fn process(&mut self, x: Xfer) {
        let k = self.k;
        self.k += 1;
        let b = Bulk { k, dir_in: x.dir_in, size: x.size, head: x.head, submit: x.submit, complete: x.complete,
                       has_status: x.has_c, status: x.status, req: x.req, act: x.act };
        let (is_cbw, is_csw) = b.role();
        let (mut acc, mut current) = *self.devices.entry(x.bus_dev).or_insert(([0; N_AGG], -1));
        if is_cbw {
            if current >= 0 {
                self.close(&acc, current);
            }
            acc = b.opened();
            if x.submit == NULL {
                self.ok = false;     // a CBW without its submit: not in start order, analysed whole
            }
            current = self.cbase + self.ints.len() as i64;
            self.ints.push([0; N_AGG]);
            self.closed.push(false);
            self.cbw.extend_from_slice(&x.data[..CBW_BYTES]);
            self.csw.extend_from_slice(&[0u8; CSW_BYTES]);
            self.csw_size.push(-1);
            self.bus.push(x.bus as i64);
            self.dev.push(x.dev as i64);
            self.pos.push(x.pos);
            self.cmd_s.push(x.submit);
            self.cmd_c.push(if x.has_c { x.complete } else { NULL });
        }
        if current < 0 {
            self.ok = false;     // bulk traffic before the device's first CBW: analysed whole
            return;
        }
        let c = (current - self.cbase) as usize;
        if b.add_to(&mut acc, is_cbw, is_csw) {
            self.csw_size[c] = x.size;
            let take = (x.size.max(0) as usize).min(CSW_BYTES);
            self.csw[c * CSW_BYTES..c * CSW_BYTES + take].copy_from_slice(&x.data[..take]);
        }
        self.devices.insert(x.bus_dev, (acc, current));
    }

    /// Process the bulk transfers at the front of the queue that are final.
    fn drain(&mut self, all: bool) {
        while let Some(front) = self.queue.front() {
            if !(front.done || all) {
                break;
            }
            let x = self.queue.pop_front().unwrap();
            self.base += 1;
            self.process(x);
        }
    }

    fn name(&mut self, t: i64) -> u64 {
        if t < self.prev_t {
            self.ok = false;     // out of time order: the whole capture is sorted instead
        }
        self.prev_t = t;
        let n = self.next;
        self.next += 1;
        n
    }
}

#[pymethods]
impl BotStream {
    /// `keep`: at most that many commands and segments kept for the reports; `rows`: take
    /// and finish return the columns of the commands they settle (for the I/O sink).
    #[new]
    #[pyo3(signature = (keep, rows = false))]
    fn new(keep: usize, rows: bool) -> Self {
        BotStream {
            waiting: IntMap::default(), queue: VecDeque::new(), base: 0, next: 0, devices: IntMap::default(),
            prev_t: i64::MIN, t_min: i64::MAX, t_max: i64::MIN, no_submit: 0, no_complete: 0, ok: true, k: 0,
            ints: Vec::new(), cbw: Vec::new(), csw: Vec::new(), csw_size: Vec::new(), bus: Vec::new(),
            dev: Vec::new(), pos: Vec::new(), cmd_s: Vec::new(), cmd_c: Vec::new(), ctl: Vec::new(),
            closed: Vec::new(), cbase: 0, first_t: NULL, stage: CommandStage::new(keep), rows,
        }
    }

    /// One batch of URB events (the URB table, usb/urbs.rs, times absolute); returns
    /// whether the machine still covers the capture.
    fn feed(&mut self, py: Python, urbs: Table) -> PyResult<bool> {
        let u = Urbs::read(&urbs)?;
        let (t_ns, urb_id, xfer, ep, bus, dev, length, pos) =
            (&u.t_ns[..], &u.urb_id[..], &u.xfer[..], &u.ep[..], &u.bus[..], &u.dev[..], &u.length[..], &u.pos[..]);
        let u = &u;
        let this = &mut *self;
        py.allow_threads(move || {
            for r in 0..t_ns.len() {
                if !this.ok {
                    break;
                }
                let t = t_ns[r];
                if this.first_t == NULL {
                    this.first_t = t;
                } else if t < this.first_t {
                    this.ok = false;     // earlier than the first event: the origin is not known at the start
                    break;
                }
                this.t_min = this.t_min.min(t);
                this.t_max = this.t_max.max(t);
                let ev = u.event(r);
                let bulk = xfer[r] == 3;
                let dir_in = ep[r] & 0x80 != 0;
                let fill = |x: &mut Xfer| {
                    let data = u.data(r);
                    (x.size, x.head) = size_and_head(data);
                    if let Some(d) = data {
                        x.data[..d.len()].copy_from_slice(d);
                    }
                };
                let error = |st: i32| st != 0 && st != EREMOTEIO && st != EPIPE;
                if ev == b'S' {
                    if let Some((was_bulk, n)) = this.waiting.remove(&urb_id[r]) {
                        this.no_complete += 1;           // its wait ends without a completion
                        if was_bulk {
                            this.queue[(n - this.base) as usize].done = true;
                        }
                    }
                    if let (2, Some(setup)) = (xfer[r], u.setup(r)) {
                        let (bm, req) = (setup[0], setup[1]);
                        if (bm == 0x21 && req == 0xFF) || (bm == 0x02 && req == 0x01) {
                            this.ctl.push([t, bus[r] as i64, dev[r] as i64, pos[r], bm as i64, req as i64]);
                        }
                    }
                    let _ = this.name(t);
                    if bulk {
                        let n = this.base + this.queue.len() as u64;
                        let mut x = Xfer {
                            done: false, has_c: false, submit: t, complete: NULL, status: 0, req: length[r],
                            act: NULL, dir_in, bus_dev: ((bus[r] as i64) << 8) | dev[r] as i64, bus: bus[r],
                            dev: dev[r], pos: pos[r], size: -1, head: 0, data: [0; DATA_PREFIX],
                        };
                        if !dir_in {
                            fill(&mut x);
                        }
                        this.queue.push_back(x);
                        this.waiting.insert(urb_id[r], (true, n));
                    } else {
                        this.waiting.insert(urb_id[r], (false, 0));
                    }
                } else if ev == b'C' || ev == b'E' {
                    let st = match u.status(r) { NULL => 0, known => known as i32 };   // unknown: as a success
                    match this.waiting.remove(&urb_id[r]) {
                        Some((was_bulk, n)) => {
                            if was_bulk {
                                if error(st) {
                                    this.ok = false;     // URB errors: analysed whole
                                }
                                let x = &mut this.queue[(n - this.base) as usize];
                                x.done = true;
                                x.has_c = true;
                                x.complete = t;
                                x.status = st;
                                x.act = length[r];
                                if x.dir_in {
                                    fill(x);
                                }
                            }
                        }
                        None => {
                            this.no_submit += 1;
                            let _ = this.name(t);
                            if bulk {
                                if error(st) {
                                    this.ok = false;
                                }
                                let mut x = Xfer {
                                    done: true, has_c: true, submit: NULL, complete: t, status: st, req: NULL,
                                    act: length[r], dir_in, bus_dev: ((bus[r] as i64) << 8) | dev[r] as i64,
                                    bus: bus[r], dev: dev[r], pos: pos[r], size: -1, head: 0, data: [0; DATA_PREFIX],
                                };
                                fill(&mut x);
                                this.queue.push_back(x);
                            }
                        }
                    }
                } else if let Some((was_bulk, n)) = this.waiting.remove(&urb_id[r]) {
                    this.no_complete += 1;
                    if was_bulk {
                        this.queue[(n - this.base) as usize].done = true;
                    }
                }
                this.drain(false);
            }
        });
        Ok(self.ok)
    }

    /// The commands closed so far that no open command precedes (in start order), removed
    /// from the machine and added to the command stage, with the pieces that start before
    /// the earliest start a command still to come can have tiled. Returns their rows
    /// (`BotCommands`, times from the origin) when the machine was made with `rows`, else None.
    fn take(&mut self, py: Python) -> PyResult<Option<BotCommands>> {
        let m = self.closed.iter().position(|c| !c).unwrap_or(self.closed.len());
        let mut before = if self.prev_t == i64::MIN { NULL } else { self.prev_t };
        if let Some(front) = self.queue.front() {
            before = min_t(before, min_t(front.submit, front.complete));
        }
        if let Some(&t) = self.cmd_s.get(m) {
            before = min_t(before, t);
        }
        self.settle(py, m, before)
    }

    /// The end of the capture: every transfer still waiting is final, every device's open
    /// command closes and goes to the command stage. None when the machine does not cover
    /// the capture.
    fn finish(&mut self, py: Python) -> PyResult<Option<Finished>> {
        self.no_complete += self.waiting.len() as i64;
        self.waiting.clear();
        self.drain(true);
        if !self.ok {
            return Ok(None);
        }
        let open: Vec<([i64; N_AGG], i64)> = self.devices.values().cloned().collect();
        for (mut acc, current) in open {
            if current >= 0 {
                acc[LAST] = 1;
                self.close(&acc, current);
            }
        }
        let m = self.ints.len();
        let commands = self.settle(py, m, NULL)?;
        let origin = self.origin();
        let elapsed = if self.t_max == i64::MIN { 0 } else { self.t_max - origin };
        let stage = &mut self.stage;
        py.allow_threads(|| stage.finish(elapsed));
        let col = |j: usize| self.ctl.iter().map(|row| row[j]).collect::<Vec<i64>>();
        let control = Columns::new(vec![("t0", ints(col(0).into_iter().map(|t| t - origin).collect())),
                                        ("bus", ints(col(1))), ("dev", ints(col(2))), ("pos", ints(col(3))),
                                        ("bm", ints(col(4))), ("req", ints(col(5)))])?;
        Ok(Some(Finished {
            commands: commands.map(|c| Py::new(py, c)).transpose()?, control: Py::new(py, control)?,
            no_submit: self.no_submit, no_complete: self.no_complete,
            t_min: (self.t_min != i64::MAX).then_some(self.t_min), t_max: (self.t_max != i64::MIN).then_some(self.t_max),
            origin: (self.first_t != NULL).then_some(self.first_t),
        }))
    }

    /// What the command stage accumulated (after `finish`): commands/scsitrace/usb/commands.rs
    /// `StageResults`.
    fn results(&mut self, py: Python) -> PyResult<StageResults> {
        let origin = self.origin();
        self.stage.results(py, origin)
    }

    /// The kept segments (times from the origin) and the device names (once: they leave the machine).
    fn segments(&mut self, py: Python) -> PyResult<KeptSegments> {
        self.stage.segments(py)
    }

    /// The kept commands (as `take` hands them over, with their `io`; once).
    fn kept(&mut self, py: Python) -> PyResult<BotCommands> {
        let origin = self.origin();
        self.stage.kept(py, origin)
    }
}

/// The end of a capture the machine covers: the last commands' rows (with `rows`), the Mass
/// Storage Reset and CLEAR HALT requests (`control`: t0 from the origin, bus, dev, pos, bm,
/// req), the unpaired URB counts, the time range and the origin (None: no event).
#[pyclass(get_all)]
struct Finished {
    commands: Option<Py<BotCommands>>,
    control: Py<Columns>,
    no_submit: i64,
    no_complete: i64,
    t_min: Option<i64>,
    t_max: Option<i64>,
    origin: Option<i64>,
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<BotStream>()?;
    Ok(())
}
