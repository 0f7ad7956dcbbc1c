"""USB mass-storage layer (usbmon text, pcap, pcapng; BOT and UAS): the URB frame parsers
hand over (`urbs`), transfers (`transfers`), commands (`bot`, `uas`), their stages and
tiling (`stages`), and the analysis (`analysis`)."""
from .analysis import analyze

__all__ = ["analyze"]
