"""A hypothesis strategy shared by the scanner-against-regex tests: a valid line with a few
bytes removed, doubled or replaced by characters of the format's own alphabet."""
from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def damaged(draw, line: str, alphabet: str) -> str:
    """`line` with one to three bytes dropped, doubled or replaced by one of `alphabet`."""
    chars = list(line)
    for _ in range(draw(st.integers(1, 3))):
        if not chars:
            break
        k = draw(st.integers(0, len(chars) - 1))
        op = draw(st.sampled_from(["drop", "double", "swap"]))
        if op == "drop":
            del chars[k]
        elif op == "double":
            chars.insert(k, chars[k])
        else:
            chars[k] = draw(st.sampled_from(list(alphabet)))
    return "".join(chars)
