"""AggregateImagePropertiesIsolation: rejects hosts whose aggregates' metadata
names other values for the image's properties.

For every metadata key of a host's aggregates (values comma-separated and
pooled over all its aggregates, spaces ignored) that the image also has as
a property, the image's value must be among the aggregate's values; a key
the image does not have, or has with an empty value, restricts nothing. So
an aggregate with ``os_distro = windows`` takes only images whose
``os_distro`` is ``windows`` or unset, and a host in no aggregate takes
every image.

With ``aggregate_image_properties_isolation_namespace`` set, only keys
starting with that namespace and
``aggregate_image_properties_isolation_separator`` (``.`` by default) are
compared; the others are other filters' metadata.

Evaluated once per distinct aggregate set among the candidates.

**We differ from Nova**: Nova reads the image's properties through its typed
image-properties object, which holds only the properties Nova knows
(``os_distro``, ``hw_*``...) and gives them typed (a boolean is compared as
``True``), so a custom or namespaced property never restricts anything
there. Here every property of the image is compared, as the image gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, option
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class AggregateImagePropertiesIsolation(BaseFilter[Mapping[str, str]]):
    """Keeps hosts whose aggregates' metadata admits the image's properties."""

    REASON = "aggregate metadata does not match the image"

    @dataclass(frozen=True)
    class Args(PluginArgs):
        aggregate_image_properties_isolation_namespace: str | None = option(
            None,
            help="AggregateImagePropertiesIsolation compares only the aggregate "
            "metadata keys that start with this namespace and the separator; unset, "
            "it compares every key.",
        )
        aggregate_image_properties_isolation_separator: str = option(
            ".",
            help="The separator between the namespace and the key "
            "(aggregate_image_properties_isolation_namespace).",
        )

    args: Args

    def prepare(self, ctx: PlacementContext) -> Mapping[str, str] | None:
        image = ctx.spec.image
        props = {k: v for k, v in image.properties.items() if v} if image is not None else {}
        return props or None

    def passes(
        self,
        view: HostView,
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: Mapping[str, str],
    ) -> np.ndarray:
        namespace = self.args.aggregate_image_properties_isolation_namespace
        prefix = (
            namespace + self.args.aggregate_image_properties_isolation_separator
            if namespace
            else ""
        )

        def admits(metadata: Mapping[str, frozenset[str]]) -> bool:
            return all(
                str(state[key]) in values
                for key, values in metadata.items()
                if key in state and key.startswith(prefix)
            )

        return view.metadata_mask(admits, candidates)
