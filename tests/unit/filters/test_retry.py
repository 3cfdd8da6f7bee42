"""RetryFilter: hosts already tried are rejected, names matched ignoring case."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.filters.retry import RetryFilter
from tests.unit.factories import context, host, settings, spec, view_of


@pytest.mark.parametrize(
    ("ignore", "kept"),
    [
        pytest.param(("h1",), ["h2", "h3"], id="one-tried"),
        pytest.param(("H2", "h3"), ["h1"], id="case-insensitive"),
        pytest.param(("elsewhere",), ["h1", "h2", "h3"], id="unknown-host-changes-nothing"),
    ],
)
def test_retry_filter(ignore: tuple[str, ...], kept: list[str]) -> None:
    view = view_of(host("h1"), host("h2"), host("h3"))
    idx = np.arange(view.size)
    mask = RetryFilter(settings()).passes(view, idx, context(spec(ignore_hosts=ignore)), ignore)
    assert [view.names[i] for i in idx[mask]] == kept


def test_nothing_tried_does_not_apply() -> None:
    assert RetryFilter(settings()).prepare(context(spec())) is None
