//! The kernel-log layer's dispatch -> done pairing (`scsitrace/scsilog/analysis.py:pair`), one
//! pass over a block of events keyed by (device, tag): no sort by key.
//!
//! Within a (device, tag) the events go in (time, line) order. An event's neighbours in its key
//! are found by walking the block once in (time, line) order with the last event of each key
//! at hand. Then:
//! - a `start` begins a command, ended by the next event of its key: `done` pairs it; `error`,
//!   `timeout`, another `start` or any other kind leave it unpaired with that reason; none: it
//!   waits for the next block (`waiting`), or, in the last block, the trace ended;
//! - a `done` whose previous event of its key is not a `start` is a command of its own (the
//!   trace started mid-command);
//! - a command is numbered (`io`) when its first event comes, in (time, line) order, numbers
//!   going on from `next_io`; a start carried from an earlier block keeps its number.

use arrow_array::types::UInt8Type;
use arrow_array::{LargeStringArray, StringArray, StringViewArray};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{ints, ints_or_null, values_of, Columns, Table, NULL};
use crate::hash::IntMap;

/// Why a command is unpaired (`reason` codes; 0: paired), as `PAIR_REASONS` names them.
pub(crate) const PAIRED: u8 = 0;
pub(crate) const DISPATCH_ERROR: u8 = 1;
pub(crate) const TIMED_OUT: u8 = 2;
const TAG_REUSED: u8 = 3;
const TRACE_ENDED: u8 = 4;
pub(crate) const NO_START: u8 = 5;
pub const PAIR_REASONS: [&str; 6] = ["", "dispatch error", "timed out", "no done before the tag was reused",
                                     "no done (trace ended)", "done without start (trace started mid-command)"];

pub(crate) const START: u8 = 0;
pub(crate) const DONE: u8 = 1;
const ERROR: u8 = 2;
pub(crate) const TIMEOUT: u8 = 3;
const OTHER: u8 = 4;

pub(crate) fn kind_code(k: Option<&str>) -> u8 {
    match k {
        Some("start") => START,
        Some("done") => DONE,
        Some("error") => ERROR,
        Some("timeout") => TIMEOUT,
        _ => OTHER,
    }
}

/// A string column's values (Arrow's string, large string or string view layouts; polars
/// hands the view), None where null.
pub fn strings<'a>(t: &'a Table, name: &str) -> PyResult<Vec<Option<&'a str>>> {
    let mut out = Vec::with_capacity(t.len());
    for a in t.arrays(name)? {
        let any = a.as_any();
        if let Some(s) = any.downcast_ref::<StringViewArray>() {
            out.extend(s.iter());
        } else if let Some(s) = any.downcast_ref::<LargeStringArray>() {
            out.extend(s.iter());
        } else if let Some(s) = any.downcast_ref::<StringArray>() {
            out.extend(s.iter());
        } else {
            return Err(PyValueError::new_err(format!("column {name:?} is {}, expected strings", a.data_type())));
        }
    }
    Ok(out)
}

/// What one block pairs (`pair_block`): the commands it finishes (`row`: the event that
/// begins each, `end`: the event that ends it, null when none does; a command without start
/// begins and ends at its done; `reason` a code of `PAIR_REASONS`; `io`), in io order; the
/// starts still waiting for their next event (`row`, `io`); the next io number.
#[pyclass(get_all)]
struct Paired {
    commands: Py<Columns>,
    waiting: Py<Columns>,
    next_io: i64,
}

/// The events of a block (`t_ns`, `kind`, `device`, `tag`, `pos`, and `io`: the number of a
/// start carried from an earlier block, null for the block's own) paired (see the module's
/// doc). `last`: the log has ended (nothing waits).
#[pyfunction]
fn pair_block(py: Python, events: Table, next_io: i64, last: bool) -> PyResult<Paired> {
    let t_ns = events.i64s("t_ns")?;
    let pos = events.i64s("pos")?;
    let tag = events.i64s_or_null("tag")?;
    let io = events.i64s_or_null("io")?;
    let kinds = strings(&events, "kind")?;
    let devices = strings(&events, "device")?;
    let out = py.allow_threads(|| {
        let kind: Vec<u8> = kinds.iter().map(|&k| kind_code(k)).collect();
        let mut names: IntMap<Option<&str>, u32> = IntMap::default();
        let device: Vec<u32> = devices.iter().map(|&d| {
            let n = names.len() as u32;
            *names.entry(d).or_insert(n)
        }).collect();
        pair(&Block { t_ns: &t_ns, pos: &pos, tag: &tag, io: &io, kind: &kind, device: &device }, next_io, last)
    });
    let (cmds, waiting, next_io) = out;
    Ok(Paired {
        commands: Py::new(py, Columns::new(vec![
            ("row", ints(cmds.row)), ("end", ints_or_null(cmds.end)),
            ("reason", values_of::<UInt8Type>(cmds.reason)), ("io", ints(cmds.io))])?)?,
        waiting: Py::new(py, Columns::new(vec![("row", ints(waiting.row)), ("io", ints(waiting.io))])?)?,
        next_io,
    })
}

#[derive(Default)]
pub(crate) struct Commands {
    pub row: Vec<i64>,
    pub end: Vec<i64>,
    pub reason: Vec<u8>,
    pub io: Vec<i64>,
}

/// A block's events as the pairing reads them (`kind` a code, `device` a code per distinct
/// device, null included; `tag` and `io` with `NULL`).
pub(crate) struct Block<'a> {
    pub t_ns: &'a [i64],
    pub pos: &'a [i64],
    pub tag: &'a [i64],
    pub io: &'a [i64],
    pub kind: &'a [u8],
    pub device: &'a [u32],
}

pub(crate) fn pair(b: &Block, mut next_io: i64, last: bool) -> (Commands, Commands, i64) {
    let Block { t_ns, pos, tag, io, kind, device } = *b;
    let n = t_ns.len();
    let mut order: Vec<usize> = (0..n).collect();
    let sorted = (1..n).all(|i| (t_ns[i - 1], pos[i - 1]) <= (t_ns[i], pos[i]));
    if !sorted {
        order.sort_unstable_by_key(|&i| (t_ns[i], pos[i]));
    }
    let mut prev = vec![usize::MAX; n];
    let mut next = vec![usize::MAX; n];
    let mut at: IntMap<(u32, i64), usize> = IntMap::default();
    for &i in &order {
        if let Some(p) = at.insert((device[i], tag[i]), i) {
            prev[i] = p;
            next[p] = i;
        }
    }
    let mut number = io.to_vec();
    let mut cmds = Commands::default();
    let mut waiting = Commands::default();
    for &i in &order {
        let orphan = kind[i] == DONE && (prev[i] == usize::MAX || kind[prev[i]] != START);
        if number[i] == NULL && (kind[i] == START || orphan) {
            number[i] = next_io;
            next_io += 1;
        }
        if orphan {
            cmds.push(i, i as i64, NO_START, number[i]);
        } else if kind[i] == START {
            let after = next[i];
            if after == usize::MAX && !last {
                waiting.push(i, NULL, PAIRED, number[i]);
                continue;
            }
            let (end, reason) = match kind.get(after) {
                None => (NULL, TRACE_ENDED),
                Some(&DONE) => (after as i64, PAIRED),
                Some(&ERROR) => (after as i64, DISPATCH_ERROR),
                Some(&TIMEOUT) => (after as i64, TIMED_OUT),
                Some(&START) => (after as i64, TAG_REUSED),
                Some(_) => (after as i64, TRACE_ENDED),
            };
            cmds.push(i, end, reason, number[i]);
        }
    }
    cmds.sort_by_io();
    (cmds, waiting, next_io)
}

impl Commands {
    fn push(&mut self, row: usize, end: i64, reason: u8, io: i64) {
        self.row.push(row as i64);
        self.end.push(end);
        self.reason.push(reason);
        self.io.push(io);
    }

    /// The commands in io order (carried starts, numbered in an earlier block, end here among
    /// the block's own).
    fn sort_by_io(&mut self) {
        if self.io.windows(2).all(|w| w[0] <= w[1]) {
            return;
        }
        let mut k: Vec<usize> = (0..self.io.len()).collect();
        k.sort_unstable_by_key(|&j| self.io[j]);
        self.row = k.iter().map(|&j| self.row[j]).collect();
        self.end = k.iter().map(|&j| self.end[j]).collect();
        self.reason = k.iter().map(|&j| self.reason[j]).collect();
        self.io = k.iter().map(|&j| self.io[j]).collect();
    }
}

/// A key column's values as dense codes (equal values, nulls included, one code).
fn key_codes(t: &Table, name: &str) -> PyResult<Vec<u32>> {
    fn dense<K: std::hash::Hash + Eq>(values: impl Iterator<Item = K>) -> Vec<u32> {
        let mut codes = IntMap::default();
        values.map(|k| {
            let n = codes.len() as u32;
            *codes.entry(k).or_insert(n)
        }).collect()
    }
    match strings(t, name) {
        Ok(values) => Ok(dense(values.into_iter())),
        Err(_) => Ok(dense(t.i64s_or_null(name)?.into_iter())),
    }
}

/// Each row's neighbours of its key in line order (`rows`: the `by` columns, strings or
/// integers, a null a value of its own, at most two; `line_no`): `prev` and `next`, the
/// indexes of the row before and after it with the same key, null where there is none (what
/// `shift(1).over(by)` and `shift(-1).over(by)` read over the rows in line order).
#[pyfunction]
fn key_neighbours(py: Python, rows: Table, by: Vec<String>) -> PyResult<Py<Columns>> {
    if by.is_empty() || by.len() > 2 {
        return Err(PyValueError::new_err("key_neighbours: one or two key columns"));
    }
    let line_no = rows.i64s("line_no")?;
    let first = key_codes(&rows, &by[0])?;
    let second = match by.get(1) {
        Some(name) => key_codes(&rows, name)?,
        None => vec![0; first.len()],
    };
    let (prev, next) = py.allow_threads(|| {
        let n = line_no.len();
        let mut order: Vec<usize> = (0..n).collect();
        if !line_no.windows(2).all(|w| w[0] <= w[1]) {
            order.sort_by_key(|&i| line_no[i]);
        }
        let (mut prev, mut next) = (vec![NULL; n], vec![NULL; n]);
        let mut last: IntMap<(u32, u32), usize> = IntMap::default();
        for &i in &order {
            if let Some(p) = last.insert((first[i], second[i]), i) {
                prev[i] = p as i64;
                next[p] = i as i64;
            }
        }
        (prev, next)
    });
    Py::new(py, Columns::new(vec![("prev", ints_or_null(prev)), ("next", ints_or_null(next))])?)
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pair_block, m)?)?;
    m.add_function(wrap_pyfunction!(key_neighbours, m)?)?;
    m.add("PAIR_REASONS", PAIR_REASONS.to_vec())?;
    Ok(())
}
