"""Kernel-log layer (ftrace scsi_dispatch_cmd_*, dmesg SCSI logging): the events the parser
hands over (`events`), and the dispatch -> done pairing and its tables (`analysis`)."""
from .analysis import analyze

__all__ = ["analyze"]
