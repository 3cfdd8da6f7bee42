"""The framework's scaling of raw weights to [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.weighers.base import BY_MAX, BY_RANGE, Scaling, normalise


@pytest.mark.parametrize(
    ("raw", "scaling", "expected"),
    [
        pytest.param([0, 50, 100], BY_MAX, [0.0, 0.5, 1.0], id="max-plain"),
        pytest.param([20, 60, 80], BY_MAX, [0.25, 0.75, 1.0], id="max-is-not-min-max"),
        pytest.param([-40, 10, 40], BY_MAX, [0.0, 0.25, 1.0], id="max-negative-counts-as-zero"),
        pytest.param([-5, -1], BY_MAX, [0.0, 0.0], id="max-all-negative"),
        pytest.param([7, 7], BY_MAX, [1.0, 1.0], id="max-all-equal-positive"),
        pytest.param([0, 0], BY_MAX, [0.0, 0.0], id="max-all-zero"),
        pytest.param([20, 60, 80], BY_RANGE, [0.0, 2 / 3, 1.0], id="range"),
        pytest.param([-3, 0], BY_RANGE, [0.0, 1.0], id="range-negative"),
        pytest.param([4, 4, 4], BY_RANGE, [0.0, 0.0, 0.0], id="range-all-equal"),
        pytest.param([], BY_RANGE, [], id="range-empty"),
        pytest.param([], BY_MAX, [], id="max-empty"),
    ],
)
def test_normalise(raw: list[float], scaling: Scaling, expected: list[float]) -> None:
    assert normalise(np.array(raw), scaling) == pytest.approx(np.array(expected))
