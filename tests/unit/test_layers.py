"""The product's layers hold, and no import cycle runs through it (issue 30).

The contracts themselves (which layer may import which, what the scheduler
must never import) are import-linter's, in ``setup.cfg``; the first test runs
``lint-imports`` on them. The second looks at what importing a module runs:
every module-level import, and the package ``__init__`` of each parent
package (``import a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``
first), but not an import inside a function or under ``if TYPE_CHECKING:``.
No module of ``scheduler``, ``conductor_stub`` or ``compute_sim`` may reach
itself that way: importing one filter must not run the pipeline.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "conductor_stub", "compute_sim", "allinone")


def test_import_contracts_are_kept() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    command = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    done = subprocess.run(
        [*command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_on_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when a module (or a class body) runs:
    not those in functions, nor under ``if TYPE_CHECKING:`` (its ``else`` does run)."""
    for stmt in body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            yield stmt
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(stmt, ast.If):
            if not _type_checking(stmt.test):
                yield from run_on_import(stmt.body)
            yield from run_on_import(stmt.orelse)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from run_on_import(block)
            for handler in stmt.handlers:
                yield from run_on_import(handler.body)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                yield from run_on_import(case.body)
        elif isinstance(stmt, ast.ClassDef | ast.With | ast.AsyncWith | ast.For | ast.While):
            yield from run_on_import(stmt.body)
            yield from run_on_import(getattr(stmt, "orelse", []))


def import_graph() -> dict[str, set[str]]:
    """Each product module and the product modules importing it runs (see the module doc)."""
    paths = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        parts = name.split(".")
        edges = {".".join(parts[:n]) for n in range(1, len(parts))}  # the parent packages
        package = parts if path.name == "__init__.py" else parts[:-1]
        for stmt in run_on_import(ast.parse(path.read_text(), str(path)).body):
            if isinstance(stmt, ast.Import):
                targets = [alias.name for alias in stmt.names]
            else:
                base = stmt.module or ""
                if stmt.level:
                    up = package[: len(package) - stmt.level + 1]
                    base = ".".join([*up, *([stmt.module] if stmt.module else [])])
                # ``from a import b``: the module a.b if there is one, else a name in a
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in stmt.names
                ]
            edges |= {t for t in map(known, targets) if t is not None}
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's,
    iterative), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=len, reverse=True)


def test_no_import_cycle_in_the_product() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (counting package __init__ runs): " + "; ".join(
        f"{len(c)} modules: {', '.join(c)}" for c in found
    )


def test_the_graph_sees_a_cycle_and_the_parent_packages() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert len(graph) > 100
    assert {"scheduler", "scheduler.engine"} <= graph["scheduler.engine.pipeline"]
    assert "scheduler.engine.hostview" in graph["scheduler.engine.pipeline"]


def imports_of_tests(source: str) -> list[str]:
    """The imports of ``tests`` (or a module under it) anywhere in ``source``,
    inside functions and ``if TYPE_CHECKING:`` included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name == "tests" or name.startswith("tests.")]
    return found


def test_the_benchmarks_import_nothing_of_the_tests() -> None:
    """``bench/`` stands on its own: what it shares with the tests lives in it."""
    found = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if (names := imports_of_tests(path.read_text()))
    }
    assert found == {}


def test_an_import_of_the_tests_is_seen() -> None:
    source = "import tests\ndef f():\n    from tests.functional.cluster import Cluster\n"
    assert imports_of_tests(source) == ["tests", "tests.functional.cluster"]
    assert imports_of_tests("from testsuite import x\nfrom . import tests\n") == []
