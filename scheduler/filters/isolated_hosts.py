"""IsolatedHostsFilter: keeps isolated images on isolated hosts, and (with
``restrict_isolated_hosts_to_isolated_images``, the default) other images
off them.

``isolated_hosts`` names the hosts, ``isolated_images`` the image ids. As in
Nova: with no isolated images, isolated hosts are simply kept free (when
restricted) or unaffected; an isolated image goes only to isolated hosts;
when restricted, isolated hosts take nothing else. Host names match
exactly.

A volume-backed request has no image to isolate: it counts as a
non-isolated image, whatever image it was made from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, option
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class IsolatedHostsFilter(BaseFilter[bool]):
    """Keeps isolated images and isolated hosts together."""

    REASON = "isolated host or image"

    @dataclass(frozen=True)
    class Args(PluginArgs):
        isolated_hosts: tuple[str, ...] = option(
            (),
            help="Hosts reserved for isolated_images (IsolatedHostsFilter).\n\n"
            "Related options: isolated_images, "
            "restrict_isolated_hosts_to_isolated_images.",
        )
        isolated_images: tuple[str, ...] = option(
            (),
            help="Image ids that may only run on isolated_hosts (IsolatedHostsFilter). A "
            "volume-backed request has no image and counts as a non-isolated one.",
        )
        restrict_isolated_hosts_to_isolated_images: bool = option(
            True,
            help="Whether isolated_hosts take isolated images only. With False they take "
            "any image, while isolated images still go only to isolated hosts.",
        )

    args: Args

    def prepare(self, ctx: PlacementContext) -> bool | None:
        """Whether the request's image is an isolated one (None: nothing is isolated)."""
        s = self.args
        if not s.isolated_images and not (
            s.isolated_hosts and s.restrict_isolated_hosts_to_isolated_images
        ):
            return None
        spec = ctx.spec
        image_id = None if spec.is_bfv or spec.image is None else spec.image.id
        return image_id is not None and image_id in s.isolated_images

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        s = self.args
        host_isolated = np.isin(candidates, view.indices_of(s.isolated_hosts))
        image_isolated = state
        if not s.isolated_images:
            return ~host_isolated
        if s.restrict_isolated_hosts_to_isolated_images:
            return host_isolated == image_isolated
        return host_isolated | (not image_isolated)
