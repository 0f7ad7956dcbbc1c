"""`--help`: every command describes itself and shows examples, and every example is a
command line the parser accepts (so an example never names a flag that does not exist)."""
from __future__ import annotations

import re
import shlex

import pytest

from scsitrace.cli import COMMANDS, build_parser, main


def examples(name: str) -> list[list[str]]:
    from importlib import import_module
    text = import_module(f"scsitrace.commands.{COMMANDS[name][0]}").EXAMPLES
    lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    return [shlex.split(re.sub(r"\s+\(.*\)$", "", line)) for line in lines]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_describes_and_shows_examples(capsys, name):
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "\nexamples:\n" in out and f"  scsitrace {name} " in out
    assert not undescribed_options(out), f"options without a description: {undescribed_options(out)}"


def undescribed_options(text: str) -> list[str]:
    """Options listed with no help text (none on their line, none indented below it)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^  (-\S.*?)(?:\s{2,}\S.*)?$", line)
        if not m or re.search(r"\s{2,}\S", line.strip()):
            continue
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if not re.match(r"^\s{20,}\S", below):
            out.append(m.group(1))
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_example_parses(name):
    for argv in examples(name):
        assert argv[0] == "scsitrace" and argv[1] == name
        args = build_parser(name).parse_args(argv[1:])
        assert args.command == name


def test_trace_and_profile_are_described(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"TRACE the trace file: a bus capture", out)
    for profile in ("raid1990", "scsi", "btt", "usb", "scsilog"):
        assert profile in out[out.index("--profile PROFILE how"):][:400]
