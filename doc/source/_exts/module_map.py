"""``.. module-map:: PACKAGE ...``: every module of the packages, each with
the first paragraph of its docstring.

The docstrings are read with :mod:`ast` (nothing is imported), so the map
always lists every module there is and says of each what its own docstring
says.
"""

from __future__ import annotations

import ast
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[3]


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line ("" if none)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def entries(package: str) -> list[tuple[str, str]]:
    """(module path, summary) of every module of ``package``, in path order; a
    package's ``__init__.py`` only when it has a docstring."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        text = summary(path)
        if path.name == "__init__.py" and not text:
            continue
        found.append((path.relative_to(ROOT).as_posix(), text))
    return found


class ModuleMap(Directive):
    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        lines: list[str] = []
        for package in self.arguments[0].split():
            for path, text in entries(package):
                self.state.document.settings.record_dependencies.add(str(ROOT / path))
                lines += [f"``{path}``", f"   {text or '(no docstring)'}", ""]
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source="module-map"), container)
        return container.children


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension hook
    app.add_directive("module-map", ModuleMap)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
