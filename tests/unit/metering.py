"""What a Prometheus counter of the process's registry grew by during a test."""

from __future__ import annotations

from prometheus_client import REGISTRY


def _read(name: str) -> dict[str, float]:
    return {
        ",".join(sample.labels.values()): sample.value
        for metric in REGISTRY.collect()
        if metric.name == name
        for sample in metric.samples
        if sample.name == f"{name}_total"
    }


class Growth:
    """Counter ``name`` (without ``_total``) from now: called, what each label
    value (comma-joined for several labels; ``""`` without labels) grew by,
    those that did not grow left out."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._before = _read(name)

    def __call__(self) -> dict[str, float]:
        grown = {k: v - self._before.get(k, 0.0) for k, v in _read(self.name).items()}
        return {k: d for k, d in grown.items() if d}
