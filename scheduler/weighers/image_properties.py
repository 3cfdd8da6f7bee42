"""ImagePropertiesWeigher: weighs hosts by how many of their instances share
the requested image's properties.

For each property of the requested image (``os_distro = ubuntu``), every
instance on the host whose image has the same value adds the property's
weight: 1 each by default, or as ``image_props_weight_setting`` says
(``os_distro=10,hw_machine_type=0``; listed there or not counted). Values
compare as strings, as in Nova. Scaled between the candidates' minimum and
maximum. A request without image properties weighs nothing.

Where the counts come from: each compute reports, per image property value,
how many of its instances run such an image (the ``image_props:<prop>=<value>``
stats of :mod:`scheduler.engine.capabilities`). **We differ from Nova**, which
loads every instance of every host to compare their images on each request:
here the compute counts once per build. Instances this worker placed are
counted when their compute next reports, not before.

``image_props_weight_multiplier`` (default 0.0, off): positive **packs**
instances of alike images together; negative **spreads** them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.capabilities import image_property_stat
from scheduler.weighers.base import BY_RANGE, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.engine.settings import EngineSettings


class ImagePropertiesWeigher(BaseWeigher):
    """Instances sharing the requested image's properties (positive: more is better)."""

    MULTIPLIER_OPTION = "image_props_weight_multiplier"
    DEFAULT_MULTIPLIER = 0.0
    SCALING = BY_RANGE

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(settings)
        self.setting = dict(settings.image_props_weight_setting)

    def raw(self, view: HostView, candidates: np.ndarray,
            ctx: PlacementContext) -> np.ndarray:
        weight = np.zeros(len(candidates))
        image = ctx.spec.image
        if image is None:
            return weight
        caps = view.capabilities
        for prop, value in image.properties.items():
            share = self.setting.get(prop, 0.0) if self.setting else 1.0
            stat = image_property_stat(prop, str(value))
            if share and caps.has_stat(stat):
                weight += share * caps.stat(stat, candidates)
        return weight
