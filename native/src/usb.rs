//! The usb area's compiled passes (see lib.rs): the usbmon record decoder of pcap/pcapng
//! captures (`reader`), the pcapng block walk of one read (`pcapng`) and the mass-storage
//! machines over the URB table (`machine`), the URB record both build and read (`urbs`).
use pyo3::prelude::*;

mod commands;
mod machine;
mod pcapng;
mod reader;
mod stream;
pub(crate) mod urbs;

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    reader::register(m)?;
    pcapng::register(m)?;
    machine::register(m)?;
    stream::register(m)?;
    m.add_function(wrap_pyfunction!(urbs::captured_short, m)?)?;
    Ok(())
}
