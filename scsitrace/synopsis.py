"""The README's synopsis: every command with every flag, generated from the argparse parsers
(`python -m scsitrace.synopsis` prints it, `--write README.md` puts it there; tests/test_readme.py checks README.md holds it
between its `<!-- synopsis -->` markers, so a new flag cannot go undocumented)."""
from __future__ import annotations

import argparse
import sys
import textwrap

WIDTH = 100
NBSP = "\u00a0"


def _option(action: argparse.Action) -> str:
    name = max(action.option_strings, key=len)
    if action.nargs == 0:
        text = name
    else:
        if action.choices:
            arg = "|".join(str(c) for c in action.choices)
        else:
            arg = action.metavar or action.dest.upper()
        text = f"{name} {arg}"
    return text if action.required else f"[{text}]"


def _positional(action: argparse.Action) -> str:
    name = action.metavar or action.dest.upper()
    return f"{name}..." if action.nargs in ("+", "*") else name


def command_synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    words = [_positional(a) for a in parser._actions if not a.option_strings]
    words += [_option(a) for a in parser._actions
              if a.option_strings and not isinstance(a, argparse._HelpAction)]
    head = f"scsitrace {name} "
    units = " ".join(w.replace(" ", NBSP) for w in words)   # a flag and its argument stay together
    return textwrap.fill(units, WIDTH, initial_indent=head, subsequent_indent=" " * len(head),
                         break_on_hyphens=False, break_long_words=False).replace(NBSP, " ")


def synopsis() -> str:
    from scsitrace.cli import COMMANDS, build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = "scsitrace [--version] [--debug] COMMAND ..."
    return "\n".join([top] + [command_synopsis(name, sub.choices[name]) for name in COMMANDS]) + "\n"


BEGIN, END = "<!-- synopsis -->\n", "<!-- /synopsis -->"


def readme_block(text: str) -> str:
    """The synopsis block of a README (between the markers)."""
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def fenced() -> str:
    return "```\n" + synopsis() + "```\n"


def replace_blocks(path: str, blocks: dict) -> None:
    """Rewrite, in the file at `path`, the text between each (begin, end) marker pair of
    `blocks` with its body (a function giving it); the README's generated blocks."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    for (begin, end), body in blocks.items():
        at = text.index(begin) + len(begin)
        text = text[:at] + body() + text[text.index(end, at):]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def update(path: str) -> None:
    """Rewrite the README's synopsis block from the parsers."""
    replace_blocks(path, {(BEGIN, END): fenced})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        update(sys.argv[2] if len(sys.argv) > 2 else "README.md")
    else:
        print(synopsis(), end="")
