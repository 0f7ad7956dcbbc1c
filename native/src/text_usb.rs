//! The usbtext readers' compiled passes (scsitrace._native.text_usb): usbmon text lines into
//! URB columns, blkparse event lines into event fields. (Kept apart from the logs helper's `text` module until the lead merges them.)
use pyo3::prelude::*;

#[path = "text/blkparse.rs"]
mod blkparse;
#[path = "text/lines_usbtext.rs"]
mod lines_usbtext;
#[path = "text/usbmon.rs"]
mod usbmon;

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    usbmon::register(m)?;
    blkparse::register(m)
}
