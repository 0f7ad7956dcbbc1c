"""The blktrace record as the kernel declares it (include/uapi/linux/blktrace_api.h), with
construct, and what is derived from the declaration: the numpy dtypes of both byte orders and
the field offsets, checked against the layout the native reader reads.

Imported on first use (parsers/blktrace.py re-exports these names lazily): sniffing a file of
another format does not load construct."""
from __future__ import annotations

import construct as cs
import numpy as np

from scsitrace._native import block as _native

# include/uapi/linux/blktrace_api.h, field names as spelled there
BLK_IO_TRACE = cs.Struct(
    "magic" / cs.Int32ul,       # BLK_IO_TRACE_MAGIC | version
    "sequence" / cs.Int32ul,
    "time" / cs.Int64ul,        # ns, the kernel's trace clock
    "sector" / cs.Int64ul,
    "bytes" / cs.Int32ul,
    "action" / cs.Int32ul,      # __BLK_TA_* | BLK_TC_ACT(category bits)
    "pid" / cs.Int32ul,
    "device" / cs.Int32ul,      # MAJOR << 20 | MINOR
    "cpu" / cs.Int32ul,
    "error" / cs.Int16ul,
    "pdu_len" / cs.Int16ul,
)
# protocol version 8 (BLK_IO_TRACE2_VERSION, Linux 6.19): pid before a 64-bit action, 64 bytes
BLK_IO_TRACE2 = cs.Struct(
    "magic" / cs.Int32ul,       # BLK_IO_TRACE_MAGIC | 0x08
    "sequence" / cs.Int32ul,
    "time" / cs.Int64ul,
    "sector" / cs.Int64ul,
    "bytes" / cs.Int32ul,
    "pid" / cs.Int32ul,
    "action" / cs.Int64ul,      # __BLK_TA_* | BLK_TC_ACT(categories), categories up to bit 22
    "device" / cs.Int32ul,
    "cpu" / cs.Int32ul,
    "error" / cs.Int16ul,
    "pdu_len" / cs.Int16ul,
    "pad" / cs.Bytes(12),
)
# PDU of a remap (A) record; the kernel writes it big-endian whatever the host order
BLK_IO_TRACE_REMAP = cs.Struct(
    "device_from" / cs.Int32ub,
    "device_to" / cs.Int32ub,
    "sector_from" / cs.Int64ub,
)
HEADER = BLK_IO_TRACE.sizeof()


def numpy_dtype(struct: cs.Struct, byteorder: str = "<") -> np.dtype:
    """The numpy record dtype mirroring a construct Struct of fixed-size integer fields."""
    fields = []
    for sub in struct.subcons:
        if not hasattr(sub.subcon, "fmtstr"):       # padding bytes
            fields.append((sub.name, np.dtype(f"V{sub.subcon.sizeof()}")))
            continue
        letter = sub.subcon.fmtstr[-1]          # struct module letter: upper case = unsigned
        kind = "u" if letter.isupper() else "i"
        fields.append((sub.name, np.dtype(f"{byteorder}{kind}{sub.subcon.sizeof()}")))
    dt = np.dtype(fields)
    assert dt.itemsize == struct.sizeof()
    return dt


DTYPE_LE = numpy_dtype(BLK_IO_TRACE, "<")
DTYPE_BE = numpy_dtype(BLK_IO_TRACE, ">")
REMAP_DTYPE = numpy_dtype(BLK_IO_TRACE_REMAP, ">")
LAYOUT = {name: DTYPE_LE.fields[name][1] for name in DTYPE_LE.names}       # {field: offset}
assert LAYOUT == dict(_native.blktrace_layout()), "the native reader reads another header layout"
DTYPE2_LE = numpy_dtype(BLK_IO_TRACE2, "<")
DTYPE2_BE = numpy_dtype(BLK_IO_TRACE2, ">")
LAYOUT2 = {name: DTYPE2_LE.fields[name][1] for name in DTYPE2_LE.names if name != "pad"}
HEADER2 = BLK_IO_TRACE2.sizeof()
assert (LAYOUT2, HEADER2) == (dict(_native.blktrace2_layout()[0]), _native.blktrace2_layout()[1]), \
    "the native reader reads another v8 header layout"
REMAP_LAYOUT = {name: REMAP_DTYPE.fields[name][1] for name in REMAP_DTYPE.names}
