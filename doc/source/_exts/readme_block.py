"""The README's walkthrough block, read without Sphinx: the docs page that
shows it (:mod:`walkthrough`) and the functional test that runs it
(``tests/functional/test_walkthrough.py``) both read it here.

The walkthrough lives once, in README.md, between ``<!-- walkthrough -->``
and ``<!-- /walkthrough -->``, as one fenced ``sh`` block.
"""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"
START, END = "<!-- walkthrough -->", "<!-- /walkthrough -->"


def extract(text: str) -> str:
    """The shell text of the README's walkthrough block."""
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    first, _, rest = block.partition("\n")
    if first != "```sh" or not rest.endswith("```"):
        raise ValueError(f"the walkthrough between {START} and {END} is not one ```sh block")
    return rest[: -len("```")].rstrip("\n")
