"""The product's code stays in pieces a reader can hold: no module over 800
lines and no class over 400 (issue 28: the conductor's endpoint and the
compute simulator had grown to 800 and 1,400 lines, with each operation's
bookkeeping written several times over; issue 30: the scheduler's engine,
store, RPC clients, options and admin command had grown to 1,000-1,400)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "conductor_stub", "compute_sim", "allinone")
MAX_MODULE = 800
MAX_CLASS = 400

MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_or_class_grows_past_its_bound(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE, f"{path.name}: over {MAX_MODULE} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            assert span <= MAX_CLASS, f"{path.name}: class {node.name} is {span} lines"


def test_the_packages_are_found() -> None:
    assert len(MODULES) > 150
