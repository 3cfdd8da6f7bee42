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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.capabilities import image_property_stat
from scheduler.engine.plugins import PluginArgs, multiplier, number_pairs, option
from scheduler.weighers.base import BY_RANGE, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

#: Per property of the requested image that counts: (its weight, its stat's name).
Terms = tuple[tuple[float, str], ...]


def weight_setting(pairs: list[str]) -> dict[str, float]:
    """``["os_distro=10", ...]`` as a mapping.

    :raises ValueError: a pair is not ``property=number``.
    """
    return number_pairs(pairs, float, lambda _weight: True, "property=number")


class ImagePropertiesWeigher(BaseWeigher[Terms]):
    """Instances sharing the requested image's properties (positive: more is better)."""

    SCALING = BY_RANGE

    @dataclass(frozen=True)
    class Args(PluginArgs):
        image_props_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of the instances on a host whose image shares properties with "
            "the requested image. Positive packs alike instances together, negative "
            "spreads them; 0 (the default) turns the weigher off.\n\nRelated options: "
            "image_props_weight_setting.",
        )
        image_props_weight_setting: Mapping[str, float] = option(
            {},
            parse=weight_setting,
            help="Which image properties the image properties weigher counts, and how "
            "much, as property=weight pairs (e.g. os_distro=10,hw_machine_type=1). "
            "Empty: every property counts 1; otherwise unlisted properties count 0.",
        )

    args: Args

    def prepare(self, ctx: PlacementContext) -> Terms | None:
        """The requested image's properties that count, with their weights."""
        image = ctx.spec.image
        if image is None:
            return None
        setting = self.args.image_props_weight_setting
        terms = tuple(
            (setting.get(prop, 0.0) if setting else 1.0, image_property_stat(prop, str(value)))
            for prop, value in image.properties.items()
        )
        return tuple((share, stat) for share, stat in terms if share) or None

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: Terms
    ) -> np.ndarray:
        weight = np.zeros(len(candidates))
        caps = view.capabilities
        for share, stat in state:
            if caps.has_stat(stat):
                weight += share * caps.stat(stat, candidates)
        return weight
