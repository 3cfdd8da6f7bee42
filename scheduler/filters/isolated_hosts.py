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

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class IsolatedHostsFilter(BaseFilter):
    """Keeps isolated images and isolated hosts together."""

    REASON = "isolated host or image"

    def applies(self, ctx: PlacementContext) -> bool:
        s = self.settings
        if not s.isolated_images:
            return bool(s.isolated_hosts) and s.restrict_isolated_hosts_to_isolated_images
        return True

    def passes(self, view: HostView, candidates: np.ndarray,
               ctx: PlacementContext) -> np.ndarray:
        s = self.settings
        host_isolated = np.isin(candidates, view.indices_of(s.isolated_hosts))
        spec = ctx.spec
        image_id = None if spec.is_bfv or spec.image is None else spec.image.id
        image_isolated = image_id is not None and image_id in s.isolated_images
        if not s.isolated_images:
            return ~host_isolated
        if s.restrict_isolated_hosts_to_isolated_images:
            return host_isolated == image_isolated
        return host_isolated | (not image_isolated)
