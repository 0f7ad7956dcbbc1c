"""scsitrace: offline SCSI bus trace analyzer and protocol-phase profiler.

    import scsitrace
    r = scsitrace.analyze("trace.ancot", target=1)
    r.summary["bandwidth_mib_s"], r.tables["latency"]

See `scsitrace.api.analyze` for the options and `Result` for what comes back."""
__version__ = "0.1.0"


def __getattr__(name: str):
    """`scsitrace.analyze` is scsitrace.api.analyze (its signature, its help), imported on
    first use, so that `import scsitrace` stays cheap."""
    if name in ("analyze", "Result"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'scsitrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "analyze", "Result"])
