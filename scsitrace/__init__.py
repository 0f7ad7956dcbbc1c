"""scsitrace: offline SCSI bus trace analyzer and protocol-phase profiler.

    import scsitrace
    r = scsitrace.analyze("trace.ancot", target=1)
    r.summary["bandwidth_mib_s"], r.tables["latency"]

See `scsitrace.api.analyze` for the options and `Result` for what comes back."""
__version__ = "0.1.0"


def analyze(path, **options):
    """Parse and analyse one trace: scsitrace.api.analyze (imported on first use, so that
    `import scsitrace` stays cheap)."""
    from .api import analyze as _analyze
    return _analyze(path, **options)
