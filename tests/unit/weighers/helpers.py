"""Weighing a handful of hosts with one weigher, for the weigher tests."""

from __future__ import annotations

import numpy as np

from scheduler.engine.plugins import build
from scheduler.weighers.base import BaseWeigher
from tests.unit.factories import Host, context, settings, view_of


def ranking(weigher_cls: type[BaseWeigher], hosts: list[Host],
            multiplier: float | None = None) -> list[str]:
    """Host names best first under this weigher alone (ties keep their order)."""
    multipliers = {} if multiplier is None else {weigher_cls.MULTIPLIER_OPTION: multiplier}
    weigher = build(weigher_cls, settings(**multipliers))
    view = view_of(*hosts)
    idx = np.arange(view.size)
    weights = weigher.weigh(view, idx, context())
    return [view.names[i] for i in idx[np.argsort(-weights, kind="stable")]]


def raw_weights(weigher_cls: type[BaseWeigher], hosts: list[Host]) -> list[float]:
    view = view_of(*hosts)
    return weigher_cls(settings()).raw(view, np.arange(view.size), context()).tolist()
