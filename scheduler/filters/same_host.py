"""SameHostFilter: with the ``same_host`` scheduler hint, keeps only the hosts
running one of the instances it lists.

A host matches if any listed instance holds allocations on it (an
allocation on a nested provider counts for its root host); the store is
asked where each listed instance is, once per request. An instance the
store does not know is on no host, so a hint naming only unknown instances
leaves no host, as in Nova.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.engine.settings import EngineSettings

HINT = "same_host"


class InstanceHosts:
    """The rows of the hosts running a hint's instances, read once per request."""

    def __init__(self, hint: str) -> None:
        self.hint = hint
        self._memo: tuple[weakref.ref[PlacementContext], np.ndarray] | None = None

    def wanted(self, ctx: PlacementContext) -> tuple[str, ...]:
        return tuple(ctx.spec.scheduler_hints.get(self.hint, ()))

    def rows(self, view: HostView, ctx: PlacementContext) -> np.ndarray:
        if self._memo is not None and self._memo[0]() is ctx:
            return self._memo[1]
        rows = view.capabilities.instance_rows(self.wanted(ctx), view.index_of_uuid)
        self._memo = (weakref.ref(ctx), rows)
        return rows


class SameHostFilter(BaseFilter):
    """Keeps the hosts running an instance named by the ``same_host`` hint."""

    REASON = "not on the same host as the hinted instances"

    def __init__(self, settings: EngineSettings, args: PluginArgs | None = None) -> None:
        super().__init__(settings, args)
        self._hosts = InstanceHosts(HINT)

    def applies(self, ctx: PlacementContext) -> bool:
        return bool(self._hosts.wanted(ctx))

    def passes(self, view: HostView, candidates: np.ndarray,
               ctx: PlacementContext) -> np.ndarray:
        return np.isin(candidates, self._hosts.rows(view, ctx))
