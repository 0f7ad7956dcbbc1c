"""The README's sample outputs: `scsitrace analyze` (and `ios`) on a committed trace of each
layer, run for real, 100 columns wide, between `<!-- sample NAME -->` markers, so the README
shows what the tool prints today (a test fails when a sample drifts).

    python -m scsitrace.readme_samples --write README.md     (from the repository root)
"""
from __future__ import annotations

import contextlib
import io
import os
import sys

WIDTH = 100
CAPTURED = "fixtures/captured/lsi_randread4k"
SAMPLES = {
    "bus": ["analyze", f"{CAPTURED}/qemu-trace.txt"],
    "block": ["analyze", f"{CAPTURED}/lsi_randread4k.blktrace.0"],
    "usb": ["analyze", "fixtures/captured/usb_bufread32k/usbmon.txt"],
    "scsilog": ["analyze", f"{CAPTURED}/ftrace.txt"],
    "ios": ["ios", f"{CAPTURED}/qemu-trace.txt", "--limit", "5"],
}


def run(argv: list[str]) -> str:
    """The command's standard output, as a terminal of WIDTH columns would show it (piped:
    $COLUMNS is the width)."""
    from scsitrace.cli import main
    out, old = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = main(list(argv))
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    if status != 0:
        raise RuntimeError(f"scsitrace {' '.join(argv)} exited {status}")
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def fenced(name: str) -> str:
    argv = SAMPLES[name]
    return "```\n$ scsitrace " + " ".join(argv) + "\n" + run(argv) + "```\n"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- sample {name} -->\n", f"<!-- /sample {name} -->"


def block(text: str, name: str) -> str:
    """The README's current sample `name` (between its markers)."""
    begin, end = markers(name)
    return text[text.index(begin) + len(begin):text.index(end)]


def update(path: str) -> None:
    from .synopsis import replace_blocks
    replace_blocks(path, {markers(name): (lambda name=name: fenced(name)) for name in SAMPLES})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        update(sys.argv[2] if len(sys.argv) > 2 else "README.md")
    else:
        for sample in SAMPLES:
            print(fenced(sample))
