"""Running one filter over a handful of hosts, for the filter tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from scheduler.engine.hostview import HostView
from scheduler.engine.plugins import build
from scheduler.filters.base import BaseFilter
from scheduler.objects import RequestSpec
from scheduler.store.base import Aggregate
from tests.unit.factories import NOW, HookedStore, Host, context, settings


def kept(
    filter_cls: type[BaseFilter],
    hosts: Iterable[Host],
    request: RequestSpec,
    aggregates: Iterable[Aggregate] = (),
    members: Mapping[str, int] | None = None,
    store: HookedStore | None = None,
    **overrides: object,
) -> list[str]:
    """Names of the hosts the filter keeps, in view order (all when it does not apply);
    ``overrides`` are settings and the filter's own options."""
    store = store or HookedStore(hosts, aggregates)
    view = HostView(store, settings(**overrides))  # type: ignore[arg-type]
    view.refresh(NOW)
    idx = np.arange(view.size)
    ctx = context(request, members=members)
    f = build(filter_cls, settings(**overrides))
    state = f.prepare(ctx)
    if state is None:
        return list(view.names)
    mask = f.passes(view, idx, ctx, state)
    assert mask.dtype == bool and mask.shape == idx.shape
    return [view.names[i] for i in idx[mask]]
