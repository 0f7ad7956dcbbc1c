"""Cross-layer view of one captured case: each I/O matched across blktrace (D..C), ftrace
(dispatch..done), usbmon (CBW..CSW) and QEMU (the emulated LSI bus, or the USB device
model), side by side.

CASE_DIR is a folder written by the capture rig (fixtures/capture/run.sh): it holds
<case>.blktrace.N, ftrace.txt, usbmon.txt (USB disks), qemu-trace.txt and dmesg.txt.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from scsitrace import core, outputs, parsers
from scsitrace.errors import UsageError

# layer -> file name pattern inside a case folder, and the format to read it with
CASE_FILES = {
    "block": ("*.blktrace.0", "blktrace"),
    "scsilog": ("ftrace.txt", "scsilog"),
    "usb": ("usbmon.txt", "usbmon"),
    "bus": ("qemu-trace.txt", "qemu_lsi"),
}
LOGICAL_BLOCK_RE = re.compile(rb"\] \d+ (\d+)-byte logical blocks")


EXAMPLES = """examples:
  scsitrace crosslayer fixtures/captured/lsi_randread4k
  scsitrace crosslayer fixtures/captured/usb_bufread32k --perfetto case.pftrace
"""


def add_arguments(p) -> None:
    p.add_argument("case_dir", metavar="CASE_DIR")
    p.add_argument("--json", metavar="FILE|-", help="write the matched table and per-layer summary as JSON")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")
    p.add_argument("--all", action="store_true", help="show every I/O (default: the first 40)")
    p.add_argument("--perfetto", metavar="OUT.pftrace",
                   help="write the matched I/Os as a Perfetto trace: a track per layer, a flow per I/O across them")
    p.add_argument("--block-size", type=int, metavar="BYTES",
                   help="logical block size of the disk (default: from dmesg.txt, else 512)")


def case_files(case_dir: Path) -> dict[str, Path]:
    if not case_dir.is_dir():
        raise UsageError(f"{case_dir}: not a case folder")
    found = {}
    for layer, (pattern, _fmt) in CASE_FILES.items():
        hits = [h for h in sorted(case_dir.glob(pattern.replace(".0", ".*"))) if h.stat().st_size > 0]
        if hits:
            found[layer] = hits[0]   # the blktrace reader picks up the other per-CPU files itself
    if not found:
        raise UsageError(f"{case_dir}: no trace files ({', '.join(p for p, _ in CASE_FILES.values())})")
    return found


def logical_block_size(case_dir: Path) -> int:
    dmesg = case_dir / "dmesg.txt"
    if dmesg.is_file():             # a regular file, read in blocks of whole lines (a FIFO, a
        from scsitrace.parsers import _lines  # 10 GB line: neither hangs nor fills memory)
        for block, _ in _lines.iter_byte_blocks(str(dmesg), strict=False, count_lines=False):
            m = LOGICAL_BLOCK_RE.search(block)
            if m:
                return int(m.group(1))
    return 512


def load_case(case_dir: Path) -> tuple[dict, list[str]]:
    """Analyses of the case's layers, and notes about layers that could not be read."""
    analyses, notes = {}, []
    for layer, path in case_files(case_dir).items():
        fmt = CASE_FILES[layer][1]
        if fmt not in parsers.formats() or layer not in core.LAYERS:
            notes.append(f"{path.name}: no {layer} support in this build; layer left out")
            continue
        cap = parsers.parse(str(path), fmt)
        if layer == "bus" and not cap.meta.get("lsi_events"):
            # a USB case: QEMU's trace holds the USB device model's command steps
            if cap.frames["device_commands"].height:
                analyses["device"] = cap.frames["device_commands"]
                notes.append("device: QEMU's usb-storage/UAS model, host clock; timing is the emulator's")
            continue
        settle = cap.meta.get("settle_ns", core.Options.settle_ns)
        analyses[layer] = core.analyze(cap, core.Options(settle_ns=settle))
        notes.extend(f"{layer}: {n}" for n in cap.notes if "not a real SCSI bus" in n)
    return analyses, notes


def run(args) -> int:
    from scsitrace import request
    from scsitrace.reports import crosslayer
    request.integer("block_size", args.block_size, 1)
    case_dir = Path(args.case_dir)
    analyses, notes = load_case(case_dir)
    bs = args.block_size or logical_block_size(case_dir)
    table, counts = crosslayer.match(analyses, bs)
    summ = crosslayer.summary(table, counts)
    if args.perfetto:
        from scsitrace.reports import perfetto
        written = perfetto.write_crosslayer(args.perfetto, case_dir.name, table)
        print(f"{args.perfetto}: {written['ios']} I/Os, {written['slices']} slices", file=sys.stderr)
    if args.json:
        doc = {"case": case_dir.name, "block_size": bs, "layers": summ, "notes": notes,
               "ios": table.to_dicts()}
        if args.json == "-":
            json.dump(doc, sys.stdout, indent=1)
            sys.stdout.write("\n")
            return 0
        with outputs.writing(args.json) as fh:
            fh.write(json.dumps(doc, indent=1) + "\n")
    from scsitrace.reports.terminal import console_for, print_table
    console = console_for(getattr(args, "width", None))
    from rich.markup import escape
    from scsitrace.inert import printable
    console.print(f"[bold]{escape(printable(case_dir.name))}[/bold]: {', '.join(crosslayer.LAYER_SPANS[k][0] for k in analyses)}; "
                  f"matched by op, sector and length ({bs}-byte logical blocks)", highlight=False)
    print_table(console, crosslayer.rich_table(table, counts, limit=None if args.all else 40))
    print_table(console, crosslayer.rich_summary(summ))
    for note in notes:
        console.print(f"Note: {printable(note)}", markup=False, highlight=False)
    return 0
