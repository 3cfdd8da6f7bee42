"""``.. readme-walkthrough::``: the README's walkthrough, as a shell block.

The walkthrough lives once, in README.md, between ``<!-- walkthrough -->``
and ``<!-- /walkthrough -->``, as one fenced ``sh`` block; :func:`extract` is
how anything (this page, a test that runs it) reads it from there.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

README = Path(__file__).resolve().parents[3] / "README.md"
START, END = "<!-- walkthrough -->", "<!-- /walkthrough -->"


def extract(text: str) -> str:
    """The shell text of the README's walkthrough block."""
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    first, _, rest = block.partition("\n")
    if first != "```sh" or not rest.endswith("```"):
        raise ValueError(f"the walkthrough between {START} and {END} is not one ```sh block")
    return rest[: -len("```")].rstrip("\n")


class ReadmeWalkthrough(Directive):
    def run(self) -> list[nodes.Node]:
        self.state.document.settings.record_dependencies.add(str(README))
        code = extract(README.read_text())
        block = nodes.literal_block(code, code, language="sh")
        return [block]


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension hook
    app.add_directive("readme-walkthrough", ReadmeWalkthrough)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
