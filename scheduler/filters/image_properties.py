"""ImagePropertiesFilter: rejects hosts that cannot run the image's
architecture, hypervisor type, VM mode or hypervisor version.

The image properties (``hw_architecture``, ``img_hv_type``, ``hw_vm_mode``,
``img_hv_requested_version``, or their legacy names) are normalised as
Nova does (:mod:`scheduler.image_meta`: ``amd64`` -> ``x86_64``, ``KVM`` ->
``kvm``). A host passes when one of the ``[arch, hypervisor type, vm mode]``
triples it reports as supported holds every value the image names (as in
Nova, a value may sit anywhere in the triple). A host that reports no
supported instances fails any image property. The version requirement
(``>=6.0,<7.0``) is checked only together with one of the three, and a host
reporting version 0 (unknown) passes it. ``image_properties_default_architecture``
stands in for an image (or a volume-backed request) that names no
architecture.

The triple question is asked once per distinct set of triples and broadcast
by category code; the version check is a comparison over the version column.

**We differ from Nova**: an unknown architecture, type or mode, or an
unreadable version requirement, is refused when the request is validated
(:func:`scheduler.image_meta.validate_image_properties`) instead of failing
inside the filter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.capabilities import Triple
from scheduler.engine.plugins import PluginArgs, option
from scheduler.filters.base import BaseFilter
from scheduler.image_meta import ImageRequirements, image_requirements

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class ImagePropertiesFilter(BaseFilter[ImageRequirements]):
    """Keeps hosts that support what the image asks of the hypervisor."""

    REASON = "image properties not supported"

    @dataclass(frozen=True)
    class Args(PluginArgs):
        image_properties_default_architecture: str | None = option(
            None,
            help="Architecture assumed for an image that names none "
            "(ImagePropertiesFilter); unset, such an image asks for no architecture.",
        )

    args: Args

    def prepare(self, ctx: PlacementContext) -> ImageRequirements | None:
        props = ctx.spec.image.properties if ctx.spec.image is not None else {}
        wanted = image_requirements(props, self.args.image_properties_default_architecture)
        return wanted if wanted.asks_anything else None

    def passes(
        self,
        view: HostView,
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: ImageRequirements,
    ) -> np.ndarray:
        wanted = state
        asked = [v for v in (wanted.arch, wanted.hv_type, wanted.vm_mode) if v]

        def supported(triples: frozenset[Triple] | None) -> bool:
            return triples is not None and any(all(v in t for v in asked) for t in triples)

        keep = view.capabilities.supported_mask(supported, candidates)
        if wanted.version is not None:
            versions = view.capabilities.hypervisor_version(candidates)
            keep &= (versions == 0) | wanted.version.satisfied(versions)
        return keep
