"""The order a tier's modules are handed to its pytest-xdist workers: the
longest first (``--dist loadscope --no-loadscope-reorder``), so that the tier
ends on short modules with both workers busy to the end. Left to itself xdist
hands out the modules with the most tests first, and a long module of one test
can come last, alone on one worker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest


def longest_first(items: list[pytest.Item], here: Path, names: Sequence[str]) -> None:
    """Sort ``items`` so that the modules ``names`` (files in ``here``) come
    first, in that order; the modules not named follow in collection order.

    :raises pytest.UsageError: when a name is not a module there (a list that
        names a module gone would silently stop ordering it).
    """
    gone = [name for name in names if not (here / name).exists()]
    if gone:
        raise pytest.UsageError(f"the longest-first list names modules that are gone: {gone}")
    rank = {here / name: i for i, name in enumerate(names)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))
