"""Names a package exports from its modules, imported when first used.

A package's ``__init__`` runs whenever any of its modules is imported, so one
that imports its own modules up front makes each of them import all the
others, and a lower module that only wants a sibling drags in the package's
top (importing one filter ran the whole pipeline, issue 30). A package
instead lists what it exports and where each name lives::

    if not TYPE_CHECKING:
        __getattr__, __dir__ = lazy.exports(__name__, {"Engine": "scheduler.engine.pipeline"})

and imports them under ``if TYPE_CHECKING:`` for the type checker, which so
knows each exported name's type and refuses a name that is not exported.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: each name of
    ``where`` is looked up in its module at first use, then kept in the package."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
