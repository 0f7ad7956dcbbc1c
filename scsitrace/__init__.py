"""scsitrace: offline SCSI bus trace analyzer and protocol-phase profiler."""
__version__ = "0.1.0"
