"""The host filter interface.

A filter answers one question for a batch of candidate hosts at once: does
each host pass for this request? It receives the columnar
:class:`~scheduler.engine.hostview.HostView`, the candidate indices into it,
the :class:`~scheduler.engine.context.PlacementContext` and its own state for
the request, and returns a boolean mask aligned with the candidates
(``True`` keeps the host). It must not loop in Python over the candidates:
the questions are array operations on the view's columns.

Per-request work is done once (kube-scheduler's PreFilter writing its cycle
state): :meth:`BaseFilter.prepare` parses what the filter reads of the
request and returns it, or None when the request gives the filter nothing
to check (it is then skipped); the engine calls it once per request, when
candidates first reach the filter, and hands the state to every
:meth:`~BaseFilter.passes` of the request's instances. What changes between
the instances of one request (``ctx.group_members``) is read in ``passes``,
never kept in the state.

Every filter names what it rejects in a class-level ``REASON``; the engine
counts the hosts each filter removed under that reason, so NoValidHost can
say "0/20 hosts available: 15 insufficient MEMORY_MB, 5 disabled".

Filters are plugins: registered as entry points in group
``scheduler.filters`` and built once, with the engine's settings and their
own ``Args`` (their options, declared in their module: see
:mod:`scheduler.engine.plugins`).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np

from scheduler.engine.plugins import NoArgs, PluginArgs

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.engine.settings import EngineSettings

#: A filter's per-request state, as its :meth:`BaseFilter.prepare` returns it.
S = TypeVar("S")


class BaseFilter(abc.ABC, Generic[S]):
    """One yes/no question about hosts, asked of all candidates at once."""

    #: What a rejected host is counted under in NoValidHost's details.
    REASON: ClassVar[str]
    #: Set (to why) on a filter that has nothing left to do and is kept only
    #: so that configs naming it still load: enabled, the engine warns at
    #: start-up that it is not needed.
    NOT_NEEDED: ClassVar[str] = ""
    #: The filter's arguments, one option each (none by default).
    Args: ClassVar[type[PluginArgs]] = NoArgs

    def __init__(self, settings: EngineSettings, args: PluginArgs | None = None) -> None:
        self.settings = settings
        self.args: Any = self.Args() if args is None else args

    def prepare(self, ctx: PlacementContext) -> S | None:
        """What this filter reads of the request, once per request; None when the
        request gives it nothing to check (it is skipped). By default the
        filter runs on every request, with nothing parsed (True)."""
        return True  # type: ignore[return-value]

    @abc.abstractmethod
    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: S
    ) -> np.ndarray:
        """A boolean mask aligned with ``candidates``: True keeps the host."""

    def reasons(
        self, view: HostView, removed: np.ndarray, ctx: PlacementContext
    ) -> list[tuple[str, np.ndarray]]:
        """Why each host of ``removed`` (those :meth:`passes` did not keep) was
        removed, as (reason, hosts) pairs, for a report host by host
        (``explain --only-filter``, where the filter meets every host): all
        under :attr:`REASON` unless the filter asks several questions."""
        return [(self.REASON, removed)]
