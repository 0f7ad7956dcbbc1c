//! The block layer's compiled passes: the blktrace readers (reader.rs) and the streaming btt
//! machine with its statistics (machine.rs).
use pyo3::prelude::*;

mod machine;
mod reader;

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    reader::register(m)?;
    machine::register(m)?;
    Ok(())
}
