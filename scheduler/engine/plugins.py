"""Finding filters and weighers by entry point.

Plugins are classes registered in ``setup.cfg`` under ``scheduler.filters`` /
``scheduler.weighers``; the configured names are looked up there, and an
unknown name fails at construction, loudly, listing the names that exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import TypeVar

from scheduler.exceptions import SchedulerError

FILTERS_GROUP = "scheduler.filters"
WEIGHERS_GROUP = "scheduler.weighers"

T = TypeVar("T")


class UnknownPlugin(SchedulerError):
    """A configured filter or weigher name is not a registered plugin of its kind."""

    msg = "%(group)s plugin %(name)r: %(problem)s"


def load_plugins(group: str, names: Sequence[str], base: type[T]) -> list[tuple[str, type[T]]]:
    """The classes registered under ``names`` in ``group``, in the order given.

    :raises UnknownPlugin: a name is not registered, or names a class that is
        not a ``base``.
    """
    registered = {ep.name: ep for ep in entry_points(group=group)}
    loaded: list[tuple[str, type[T]]] = []
    for name in names:
        ep = registered.get(name)
        if ep is None:
            known = ", ".join(sorted(registered)) or "none"
            raise UnknownPlugin(group=group, name=name,
                                problem=f"no such entry point (known: {known})")
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise UnknownPlugin(group=group, name=name,
                                problem=f"{ep.value} is not a {base.__name__}")
        loaded.append((name, cls))
    return loaded
