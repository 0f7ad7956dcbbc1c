//! scsitrace's compiled per-record passes: one Rust module per area, each a Python submodule
//! of `scsitrace._native` (built at install time by setuptools-rust; nothing is compiled at
//! first use). Records cross as Arrow record batches (src/arrow.rs: nulls, no sentinels) or
//! named structs of numpy arrays; every function releases the GIL while it loops.
use pyo3::prelude::*;

mod arrow;
mod block;
mod bus;
mod bytes;
mod commands;
mod hash;
mod stat;
mod text;
mod usb;

/// Adds `name` as a submodule of `parent`, built by `fill`, importable by its dotted name
/// (`from scsitrace._native.stat import Samples`: registered in sys.modules).
fn submodule(parent: &Bound<PyModule>, name: &str, fill: fn(&Bound<PyModule>) -> PyResult<()>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new_bound(py, name)?;
    fill(&m)?;
    parent.add_submodule(&m)?;
    let dotted = format!("scsitrace._native.{}", name);
    m.setattr("__name__", &dotted)?;
    py.import_bound("sys")?.getattr("modules")?.set_item(dotted, m)?;
    Ok(())
}

#[pymodule]
fn _native(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<arrow::Columns>()?;            // every pass's result: an Arrow record batch
    submodule(m, "bytes", bytes::register)?;
    submodule(m, "stat", stat::register)?;
    submodule(m, "bus", bus::register)?;       // bus captures, logic analyzers, VCD, shared tables
    submodule(m, "usb", usb::register)?;       // pcap/usbmon readers and the USB machines
    submodule(m, "block", block::register)?;   // blktrace readers and the btt machine
    submodule(m, "text", text::register)?;     // line-oriented text formats (kernel logs, strace)
    Ok(())
}
