//! The bus area's compiled passes (see lib.rs): the bus-capture readers (Ancot text, VCD,
//! sampled logic-analyzer captures), the bus machine's phase runs and its walk, attribution's
//! handshake pass, and the tables every layer shares (dense ids of keys, the CDB decode,
//! the command layers' tiling). One file per Python module served, under native/src/bus/.
use pyo3::prelude::*;

mod ancot;
pub(crate) mod cdb;
mod handshakes;
mod keys;
mod polarity;
mod runs;
mod saleae;
mod samples;
pub(crate) mod tiling;
mod vcd;
mod walker;

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    ancot::register(m)?;
    cdb::register(m)?;
    handshakes::register(m)?;
    keys::register(m)?;
    polarity::register(m)?;
    runs::register(m)?;
    saleae::register(m)?;
    samples::register(m)?;
    tiling::register(m)?;
    vcd::register(m)?;
    walker::register(m)?;
    Ok(())
}
