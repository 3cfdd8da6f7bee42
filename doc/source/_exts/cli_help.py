"""The CLI reference: each command's ``--help``, as the command prints it.

``.. cli-help:: scheduler-admin scheduler.cmd.admin`` runs the command's module
in a subprocess (``python -c`` with ``sys.argv[0]`` set to the command's name,
so the usage line names it) with ``--help``, then again for every subcommand
its usage offers (``{a,b,...}``), depth first, and renders each as a section
holding the help text. Running the command rather than importing its parser
keeps this independent of how the parser is built.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[3]
RUN = """import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_module({module!r}, run_name="__main__")
"""
#: The subcommands a usage offers: argparse writes them ``{a,b,...} ...``, or
#: ``METAVAR ...`` when the subparsers have a metavar, at the end of the usage
#: (an option's repeated arguments are inside its brackets).
CHOICES = re.compile(r" \{([\w-]+(?:,[\w-]+)+)\} \.\.\.$")
METAVAR = re.compile(r" ([A-Z][A-Z_]*) \.\.\.$")
#: A subcommand's line under its metavar in the help: its name, indented.
SUBCOMMAND = re.compile(r"^    ([a-z][\w-]*)(?:\s{2,}|$)")


def help_text(module: str, argv: list[str]) -> str:
    env = dict(os.environ, COLUMNS="80", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", RUN.format(module=module), *argv, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} --help: exit {done.returncode}: {done.stderr}")
    return done.stdout


def subcommands(text: str) -> list[str]:
    usage = " ".join(text.split("\n\n", 1)[0].split())
    found = CHOICES.search(usage)
    if found:
        return found.group(1).split(",")
    metavar = METAVAR.search(usage)
    if not metavar:
        return []
    lines = text.splitlines()
    start = lines.index(f"  {metavar.group(1)}") + 1
    names = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        name = SUBCOMMAND.match(line)
        if name:
            names.append(name.group(1))
    return names


def walk(module: str, argv: list[str]) -> list[tuple[list[str], str]]:
    """Every (command line, help) of a command, depth first; each level's
    subcommands asked at once (a start costs about a second)."""
    text = help_text(module, argv)
    subs = [[*argv, sub] for sub in subcommands(text)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        below = list(pool.map(lambda sub: walk(module, sub), subs))
    return [(argv, text), *(page for pages in below for page in pages)]


class CliHelp(Directive):
    required_arguments = 2  # the command's name, its module

    def run(self) -> list[nodes.Node]:
        name, module = self.arguments
        lines: list[str] = []
        for argv, text in walk(module, [name]):
            title = " ".join(argv)
            underline = "-" if len(argv) == 1 else "~"
            lines += [title, underline * len(title), "", ".. code-block:: none", ""]
            lines += [f"   {line}".rstrip() for line in text.splitlines()]
            lines.append("")
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=name), container)
        return container.children


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension hook
    app.add_directive("cli-help", CliHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
