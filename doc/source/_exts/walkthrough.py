"""``.. readme-walkthrough::``: the README's walkthrough, as a shell block.

The walkthrough lives once, in README.md; :mod:`readme_block` reads it (for
this page and for the test that runs it).
"""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive
from readme_block import README, extract


class ReadmeWalkthrough(Directive):
    def run(self) -> list[nodes.Node]:
        self.state.document.settings.record_dependencies.add(str(README))
        code = extract(README.read_text())
        block = nodes.literal_block(code, code, language="sh")
        return [block]


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension hook
    app.add_directive("readme-walkthrough", ReadmeWalkthrough)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
