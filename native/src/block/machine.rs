use pyo3::prelude::*;

pub fn register(_m: &Bound<PyModule>) -> PyResult<()> {
    Ok(())
}
