"""QEMU traces of devices other than the LSI 53C895A: named, never taken for it.

QEMU's `-trace` lines (`PID@SEC.FRAC:event detail`) look alike for every device model, and
the emulated disk's scsi_* events come with all of them; format qemu_lsi analyses the LSI
controller's lsi_* events only.
"""
from __future__ import annotations

import polars as pl

# QEMU device models whose trace events share the `PID@SEC.FRAC:event` lines (and the
# scsi_* events of the emulated disk) but not the LSI controller's: named, not taken for it.
OTHER_DEVICES = {"usb_uas_": "a USB Attached SCSI (UAS) device", "usb_msd_": "a USB mass-storage (BOT) device",
                 "usb_": "a USB device", "virtio_scsi_": "a virtio-scsi controller", "megasas_": "a MegaRAID SAS controller",
                 "mptsas_": "an LSI SAS1068 controller", "esp_": "an ESP SCSI controller", "pvscsi_": "a PVSCSI controller"}


def not_lsi(path: str, events: pl.Series) -> str:
    """Why a QEMU trace without lsi_* events is not analysed: the device kind it traces."""
    names = events.unique().to_list()
    for prefix, kind in OTHER_DEVICES.items():
        found = sorted(n for n in names if n.startswith(prefix))
        if found:
            hint = (" (for a USB disk, capture the guest's usbmon or the host's USB bus: docs/usbmon.md)"
                    if prefix.startswith("usb_") else "")
            return (f"{path}: a QEMU trace of {kind} ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}), "
                    f"not of the LSI 53C895A controller: format qemu_lsi reads lsi_* events only{hint}")
    return f"{path}: no lsi_* records found: format qemu_lsi needs QEMU's -trace 'lsi_*' events"
