"""Image type support: narrows to hosts that can boot the image's disk format.

A host that supports a format carries the trait
``COMPUTE_IMAGE_TYPE_<FORMAT>`` (``COMPUTE_IMAGE_TYPE_QCOW2``,
``COMPUTE_IMAGE_TYPE_RAW`` ...) on its root provider; the request requires
the trait of its image's ``disk_format``. A request without an image or a
disk format, or a volume-backed one (its image is not written to the host's
disk), is not narrowed. Off by default, as Nova's
``query_placement_for_image_type_support``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduler.engine import reasons
from scheduler.request_filters.base import RequestFilter

if TYPE_CHECKING:
    from scheduler.objects import RequestSpec
    from scheduler.resource_request import ResourceRequest
    from scheduler.store.base import Aggregate

TRAIT_PREFIX = "COMPUTE_IMAGE_TYPE_"


def image_type_trait(disk_format: str) -> str:
    """``qcow2`` -> ``COMPUTE_IMAGE_TYPE_QCOW2``."""
    return TRAIT_PREFIX + disk_format.upper().replace("-", "_")


class ImageTypeRequestFilter(RequestFilter):
    """Requires the COMPUTE_IMAGE_TYPE_* trait of the image's disk format."""

    OPTION = "query_placement_for_image_type_support"

    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        image = spec.image
        if spec.is_bfv or image is None or not image.disk_format:
            return request
        return request.with_constraint(
            self.constraint(
                reasons.image_type(image.disk_format),
                required_traits=frozenset({image_type_trait(image.disk_format)}),
            )
        )
