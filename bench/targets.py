"""The shape of a benchmark target. Each case declares its own ``TARGETS``
beside it (``bench/cases/*.py``); :mod:`bench.report` gathers them into one
list and reads each value measured against its target there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """What a target asks: ``value <= limit`` (kind ``"max"``) or ``value >=
    limit`` (``"min"``), in the words of ``text``."""

    id: str
    text: str
    limit: float
    kind: str
