"""USB mass-storage layer (usbmon text, pcap, pcapng; BOT and UAS): the URB frame parsers
hand over (`urbs`), transfers (`transfers`), commands (`bot`, `uas`), their stages and
tiling (`stages`), and the analysis (`analysis`)."""
from .._lazy import from_analysis

__all__ = ["analyze"]

__getattr__ = from_analysis(__name__, __all__)
