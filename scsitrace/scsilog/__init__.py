"""Kernel-log layer (ftrace scsi_dispatch_cmd_*, dmesg SCSI logging): the events the parser
hands over (`events`), and the dispatch -> done pairing and its tables (`analysis`)."""
from .._lazy import from_analysis

__all__ = ["analyze"]

__getattr__ = from_analysis(__name__, __all__)
