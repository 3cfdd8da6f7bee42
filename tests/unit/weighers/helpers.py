"""Weighing a handful of hosts with one weigher, for the weigher tests."""

from __future__ import annotations

import numpy as np

from scheduler.engine.context import PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.plugins import build
from scheduler.weighers.base import BaseWeigher
from tests.unit.factories import Host, context, settings, view_of


def ranking(
    weigher_cls: type[BaseWeigher], hosts: list[Host], multiplier: float | None = None
) -> list[str]:
    """Host names best first under this weigher alone (ties keep their order)."""
    multipliers = {} if multiplier is None else {weigher_cls.MULTIPLIER_OPTION: multiplier}
    weigher = build(weigher_cls, settings(**multipliers))
    view = view_of(*hosts)
    idx = np.arange(view.size)
    ctx = context()
    weights = weigher.weigh(view, idx, ctx, weigher.prepare(ctx))
    return [view.names[i] for i in idx[np.argsort(-weights, kind="stable")]]


def raw_weights(weigher_cls: type[BaseWeigher], hosts: list[Host]) -> list[float]:
    view = view_of(*hosts)
    return raw_of(weigher_cls(settings()), view, context()).tolist()


def raw_of(weigher: BaseWeigher, view: HostView, ctx: PlacementContext) -> np.ndarray:
    """The raw weights of every host of the view for this request, as the engine
    gets them: prepared once, and 0 everywhere when there is nothing to weigh."""
    state = weigher.prepare(ctx)
    if state is None:
        return np.zeros(view.size)
    return weigher.raw(view, np.arange(view.size), ctx, state)
