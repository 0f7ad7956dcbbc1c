"""Sub-commands of the `scsitrace` CLI: each module has `add_arguments(p)` and `run(args) -> int`."""
