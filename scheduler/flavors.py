"""The flavor catalog: the classic m1.* sizes, extended by an operator's file.

Read by the conductor (its boots and resizes name flavors), by
``scheduler-admin explain`` and the dashboard (how many of each still fit),
and by the demo.

The built-in catalog is the same as etc/scheduler/flavors.json (a unit test
keeps them equal). ``[conductor] flavors_file`` names a JSON file of the same
form whose flavors are added to (or replace) the built-in ones, e.g.
``{"gpu.large": {"vcpus": 8, "memory_mb": 32768, "root_gb": 100,
"extra_specs": {"trait:CUSTOM_GPU": "required"}}}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from scheduler.exceptions import InvalidRequest
from scheduler.objects import Flavor

BUILTIN: dict[str, dict[str, int]] = {
    "m1.tiny": {"vcpus": 1, "memory_mb": 512, "root_gb": 1},
    "m1.small": {"vcpus": 1, "memory_mb": 2048, "root_gb": 20},
    "m1.medium": {"vcpus": 2, "memory_mb": 4096, "root_gb": 40},
    "m1.large": {"vcpus": 4, "memory_mb": 8192, "root_gb": 80},
    "m1.xlarge": {"vcpus": 8, "memory_mb": 16384, "root_gb": 160},
}


def load_catalog(extra_file: str = "") -> dict[str, Flavor]:
    raw: dict[str, dict] = {name: dict(spec) for name, spec in BUILTIN.items()}
    if extra_file:
        try:
            extra = json.loads(Path(extra_file).read_text())
        except (OSError, ValueError) as exc:
            raise InvalidRequest(reason=f"cannot read flavors file {extra_file}: {exc}") from None
        if not isinstance(extra, dict):
            raise InvalidRequest(reason=f"flavors file {extra_file} must hold a JSON object")
        raw.update(extra)
    return {name: Flavor.from_primitive({"name": name, **spec}) for name, spec in raw.items()}


def flavor_with(
    catalog: Mapping[str, Flavor], name: str, extra_specs: Iterable[tuple[str, str]] = ()
) -> Flavor:
    """The catalog's flavor ``name`` with ``extra_specs`` added (checked with
    the request they go in). :class:`InvalidRequest` for an unknown name."""
    if name not in catalog:
        raise InvalidRequest(
            reason=f"unknown flavor {name!r}; known: {', '.join(sorted(catalog))}"
        )
    flavor = catalog[name]
    added = dict(extra_specs)
    if not added:
        return flavor
    return Flavor.from_primitive(
        {**flavor.to_primitive(), "extra_specs": {**flavor.extra_specs, **added}}
    )
