"""The usbmon packet header as Linux declares it (Documentation/usb/usbmon.rst, "Raw binary
format"), with construct, per link type, and where the fields that _usbmon_scan decodes sit
in it (checked against the widths the scanner reads).

Imported on first use (parsers/usbmon.py re-exports these names lazily): sniffing a file of
another format does not load construct."""
from __future__ import annotations

import construct as cs
import numpy as np

from . import _pcap, _usbmon_scan
from ._usbmon_scan import LINKTYPE_USB_LINUX, LINKTYPE_USB_LINUX_MMAPPED

# Linux include/uapi/linux/usb/... (Documentation/usb/usbmon.rst, "Raw binary format")
USBMON_PACKET = cs.Struct(
    "id" / cs.Int64ul,            # URB address: pairs submit and completion
    "type" / cs.Int8ul,           # 'S', 'C', 'E'
    "xfer_type" / cs.Int8ul,      # 0 ISO, 1 interrupt, 2 control, 3 bulk
    "epnum" / cs.Int8ul,          # endpoint number, 0x80 = IN
    "devnum" / cs.Int8ul,
    "busnum" / cs.Int16ul,
    "flag_setup" / cs.Int8ul,     # 0: setup packet present
    "flag_data" / cs.Int8ul,      # 0: data present, else '<' '>' ...
    "ts_sec" / cs.Int64sl,
    "ts_usec" / cs.Int32sl,
    "status" / cs.Int32sl,
    "length" / cs.Int32ul,        # URB length (submit: requested; complete: actual)
    "len_cap" / cs.Int32ul,       # data bytes captured after the header
    "setup" / cs.Bytes(8),        # or ISO error_count, numdesc
)
USBMON_PACKET_MMAPPED = cs.Struct(
    *USBMON_PACKET.subcons,
    "interval" / cs.Int32sl,
    "start_frame" / cs.Int32sl,
    "xfer_flags" / cs.Int32ul,
    "ndesc" / cs.Int32ul,         # ISO descriptors (16 bytes each) before the data
)
HEADER = {LINKTYPE_USB_LINUX: USBMON_PACKET, LINKTYPE_USB_LINUX_MMAPPED: USBMON_PACKET_MMAPPED}

# where the fields that _usbmon_scan decodes sit, from the declaration (both link types
# share the first 48 bytes; only type 220 has `ndesc`), and their widths in bytes as the
# kernel reads them
_LAYOUT = _pcap.dtype_of(USBMON_PACKET_MMAPPED)
FIELD_AT = np.array([_LAYOUT.fields[name][1] for name in _usbmon_scan.FIELDS], np.int64)
assert [_LAYOUT.fields[name][0].itemsize for name in _usbmon_scan.FIELDS] == \
    [8, 1, 1, 1, 1, 2, 1, 1, 8, 4, 4, 4, 4, 8, 4], "the usbmon declaration and _usbmon_scan disagree"
