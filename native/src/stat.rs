//! The streaming statistic record (scsitrace/stats.py STAT) of one set of latency samples:
//! exact count, min, max and total; nearest-rank percentiles exact while at most `cap`
//! samples have been seen, then read from a log-linear histogram whose buckets are at most
//! 1/1024 of their lower bound wide (a percentile is then the lower bound of its bucket,
//! clamped to [min, max]: at most 0.1 % below the exact one). Memory: `cap` samples, then
//! 8 KiB per power of two the samples span.
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

const SUB_BITS: u32 = 10; // 1024 buckets per power of two
const SUB: u64 = 1 << SUB_BITS;
pub const DEFAULT_CAP: usize = 1 << 21;
/// scsitrace/stats.py HIST_EDGES_NS: bucket upper bounds 1 us << k, k < 24 (then: above)
pub const HIST_EDGES: usize = 24;

#[pyclass(module = "scsitrace._native.stat")]
#[derive(Clone)]
pub struct Samples {
    pub n: u64,
    pub min: i64,
    pub max: i64,
    pub total: i128,
    cap: usize,
    exact: Option<Vec<i64>>,
    rows: Vec<Option<Box<[u64]>>>, // per power of two: SUB buckets (values < 2*SUB: row 0, 1)
    below_zero: u64,
    hist: [u64; HIST_EDGES + 1],
}

fn bucket(v: u64) -> (usize, usize) {
    if v < 2 * SUB {
        ((v >> SUB_BITS) as usize, (v & (SUB - 1)) as usize)
    } else {
        let e = 63 - v.leading_zeros(); // >= SUB_BITS + 1
        let shift = e - SUB_BITS;
        ((e - SUB_BITS + 1) as usize, ((v >> shift) & (SUB - 1)) as usize)
    }
}

fn bucket_low(row: usize, sub: usize) -> u64 {
    if row < 2 {
        ((row as u64) << SUB_BITS) | sub as u64
    } else {
        let shift = row as u32 - 1;
        (SUB | sub as u64) << shift
    }
}

fn hist_index(v: i64) -> usize {
    // first k with v <= 1000 << k (side="left" of np.searchsorted), else HIST_EDGES
    if v <= 1000 {
        return 0;
    }
    let mut k = 0;
    while k < HIST_EDGES && v > (1000i64 << k) {
        k += 1;
    }
    k
}

/// The values at these 1-based ranks of the sorted values, found by selection in rank order
/// (each one partitions the values for the next, a few passes instead of a whole sort).
fn select_ranks(values: &mut [i64], ranks: &[u64]) -> Vec<Option<i64>> {
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&i| ranks[i]);
    let mut out = vec![None; ranks.len()];
    let mut start = 0; // values[..start] are the `start` smallest, in place: ranks below those left
    let mut last = None;
    for i in order {
        let k = (ranks[i] - 1) as usize;
        if last != Some(k) {
            values[start..].select_nth_unstable(k - start);
            start = k + 1;
            last = Some(k);
        }
        out[i] = Some(values[k]);
    }
    out
}

impl Samples {
    pub fn with_cap(cap: usize) -> Samples {
        Samples { n: 0, min: i64::MAX, max: i64::MIN, total: 0, cap, exact: Some(Vec::new()), rows: Vec::new(),
                  below_zero: 0, hist: [0; HIST_EDGES + 1] }
    }

    #[inline]
    pub fn push(&mut self, v: i64) {
        self.n += 1;
        self.total += v as i128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.hist[hist_index(v)] += 1;
        match &mut self.exact {
            Some(values) if values.len() < self.cap => values.push(v),
            Some(_) => {
                let values = self.exact.take().unwrap();
                for x in values {
                    self.bin(x);
                }
                self.bin(v);
            }
            None => self.bin(v),
        }
    }

    fn bin(&mut self, v: i64) {
        if v < 0 {
            self.below_zero += 1;
            return;
        }
        let (row, sub) = bucket(v as u64);
        if self.rows.len() <= row {
            self.rows.resize(row + 1, None);
        }
        self.rows[row].get_or_insert_with(|| vec![0u64; SUB as usize].into_boxed_slice())[sub] += 1;
    }

    /// Adds another set's samples (exactness kept while the union fits the cap).
    pub fn merge(&mut self, other: &Samples) {
        if other.n == 0 {
            return;
        }
        match (&mut self.exact, &other.exact) {
            (Some(a), Some(b)) if a.len() + b.len() <= self.cap => a.extend_from_slice(b),
            _ => {
                if let Some(values) = self.exact.take() {
                    for x in values {
                        self.bin(x);
                    }
                }
                match &other.exact {
                    Some(b) => b.iter().for_each(|&x| self.bin(x)),
                    None => {
                        self.below_zero += other.below_zero;
                        if self.rows.len() < other.rows.len() {
                            self.rows.resize(other.rows.len(), None);
                        }
                        for (r, row) in other.rows.iter().enumerate() {
                            if let Some(row) = row {
                                let mine = self.rows[r].get_or_insert_with(|| vec![0u64; SUB as usize].into_boxed_slice());
                                mine.iter_mut().zip(row.iter()).for_each(|(a, b)| *a += b);
                            }
                        }
                    }
                }
            }
        }
        self.n += other.n;
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.hist.iter_mut().zip(other.hist.iter()).for_each(|(a, b)| *a += b);
    }

    pub fn is_exact(&self) -> bool {
        self.exact.is_some()
    }

    /// Nearest-rank percentiles (p in percent): rank ceil(p/100 n), at least 1.
    pub fn percentiles(&mut self, ps: &[f64]) -> Vec<Option<i64>> {
        if self.n == 0 {
            return ps.iter().map(|_| None).collect();
        }
        let ranks: Vec<u64> = ps.iter().map(|p| ((p / 100.0 * self.n as f64).ceil() as u64).max(1)).collect();
        if let Some(values) = &mut self.exact {
            return select_ranks(values, &ranks);
        }
        ranks.iter().map(|&r| Some(self.rank_from_histogram(r))).collect()
    }

    fn rank_from_histogram(&self, rank: u64) -> i64 {
        let mut seen = self.below_zero;
        if seen >= rank {
            return self.min;
        }
        for (r, row) in self.rows.iter().enumerate() {
            if let Some(row) = row {
                for (s, &c) in row.iter().enumerate() {
                    seen += c;
                    if seen >= rank {
                        return (bucket_low(r, s) as i64).clamp(self.min, self.max);
                    }
                }
            }
        }
        self.max
    }

    pub fn record(&mut self) -> Stat {
        let empty = self.n == 0;
        let [p50_ns, p90_ns, p95_ns, p99_ns, p999_ns] = self.percentiles(&[50.0, 90.0, 95.0, 99.0, 99.9])[..] else {
            unreachable!("five percentiles asked")
        };
        Stat {
            n: self.n,
            min_ns: (!empty).then_some(self.min),
            avg_ns: (!empty).then(|| self.total as f64 / self.n as f64),
            max_ns: (!empty).then_some(self.max),
            total_ns: self.total as i64,
            p50_ns, p90_ns, p95_ns, p99_ns, p999_ns,
            exact: self.is_exact(),
        }
    }
}

/// The STAT record (scsitrace/stats.py; `stats.stat_row` reads it by name) plus `exact`:
/// False when the percentiles come from the histogram (at most 0.1 % below the exact ones).
/// A figure of no samples is None.
#[pyclass(get_all, module = "scsitrace._native.stat")]
pub struct Stat {
    n: u64,
    min_ns: Option<i64>,
    avg_ns: Option<f64>,
    max_ns: Option<i64>,
    total_ns: i64,
    p50_ns: Option<i64>,
    p90_ns: Option<i64>,
    p95_ns: Option<i64>,
    p99_ns: Option<i64>,
    p999_ns: Option<i64>,
    exact: bool,
}

#[pymethods]
impl Samples {
    #[new]
    #[pyo3(signature = (cap = DEFAULT_CAP))]
    fn new(cap: usize) -> Samples {
        Samples::with_cap(cap)
    }

    /// Adds an int64 array of samples.
    fn add(&mut self, py: Python<'_>, values: PyReadonlyArray1<i64>) -> PyResult<()> {
        let v = values.as_slice()?;
        py.allow_threads(|| v.iter().for_each(|&x| self.push(x)));
        Ok(())
    }

    #[pyo3(name = "merge")]
    fn py_merge(&mut self, other: &Samples) {
        self.merge(other)
    }

    /// The STAT record, `Stat`.
    #[pyo3(name = "record")]
    fn py_record(&mut self) -> Stat {
        self.record()
    }

    /// Counts in scsitrace/stats.py HIST_EDGES_NS buckets (exact), the last one: above.
    fn histogram(&self) -> Vec<u64> {
        self.hist.to_vec()
    }

    #[getter]
    fn n(&self) -> u64 {
        self.n
    }
}

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<Samples>()?;
    m.add_class::<Stat>()?;
    Ok(())
}
