"""No module under ``tests/`` imports from a test module (issue 30).

A helper two test modules share lives in the fixtures package
(``tests/fixtures/``), or beside its tier (a ``conftest.py``, a helper module
not named ``test_*``), never in one of the test modules: editing one test
file must not break another tier, and pytest must not import a test module a
second time as a library. Every import counts, at module level or inside a
function, absolute or relative, ``from a.test_b import c`` and ``from a import
test_b`` alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _is_test_module(name: str) -> bool:
    """Whether the dotted ``name`` is a ``test_*`` module of this repository."""
    parts = name.split(".")
    return parts[-1].startswith("test_") and ROOT.joinpath(*parts).with_suffix(".py").is_file()


def imports_of_test_modules(source: str, module: str) -> list[str]:
    """The ``test_*`` modules that ``source`` (the module ``module``, dotted,
    ``__init__`` for a package) imports from, anywhere in it."""
    package = module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            # ``from a import b``: a itself, and a.b when b is a module
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [name for name in candidates if name and _is_test_module(name)]
    return found


def _modules() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_module_under_tests_imports_from_a_test_module() -> None:
    found = {
        str(path.relative_to(ROOT)): names
        for path in _modules()
        if (names := imports_of_test_modules(path.read_text(), _dotted(path)))
    }
    assert found == {}, "move what they share to tests/fixtures/: " + "; ".join(
        f"{path} imports {', '.join(names)}" for path, names in found.items()
    )


@pytest.mark.parametrize(
    "source, module, expected",
    [
        pytest.param(
            "from tests.unit.test_rpc import spied\n",
            "tests.unit.test_x",
            ["tests.unit.test_rpc"],
            id="absolute",
        ),
        pytest.param(
            "def f():\n    from tests.unit.test_manager import USER\n",
            "tests.unit.test_x",
            ["tests.unit.test_manager"],
            id="inside-a-function",
        ),
        pytest.param(
            "from tests.unit import test_rpc\nimport tests.unit.test_manager\n",
            "tests.unit.test_x",
            ["tests.unit.test_rpc", "tests.unit.test_manager"],
            id="the-module-itself",
        ),
        pytest.param(
            "from .test_rpc import spied\nfrom ..unit import test_manager\n",
            "tests.unit.test_x",
            ["tests.unit.test_rpc", "tests.unit.test_manager"],
            id="relative",
        ),
        pytest.param(
            "from tests.fixtures.rpc import spied\nfrom tests.unit.factories import host\n"
            "from tests.unit.store import test_nothing_here\nimport pytest\n",
            "tests.unit.test_x",
            [],
            id="helpers-and-missing-modules-pass",
        ),
    ],
)
def test_an_import_of_a_test_module_is_seen(source: str, module: str, expected: list[str]) -> None:
    assert imports_of_test_modules(source, module) == expected


def test_the_tests_are_found() -> None:
    modules = _modules()
    assert len(modules) > 150
    assert TESTS / "fixtures" / "rpc.py" in modules
