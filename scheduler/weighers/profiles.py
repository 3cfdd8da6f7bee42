"""Weigher profiles: ``[filter_scheduler] weigher_profile`` picks one set of
weighers and multipliers for a goal, in one option.

* ``nova`` (**Nova-identical**): the configured weighers and multipliers as
  they are, so every decision is the one Nova 34 makes (RAM, CPU and disk by
  absolute free amounts, spreading; see :mod:`scheduler.weighers.ram`).
* ``pack``: fill hosts to the top before opening another, so the cloud holds
  the most before NoValidHost and empty hosts stay whole (for the largest
  flavors, or to be powered off).
* ``spread`` (the default): fill every host to the same level (by share of
  its capacity, not by absolute amounts), keeping room for the largest
  flavor. On the ``fill`` bench case it places more before the first
  NoValidHost than ``nova``, with hosts filled more evenly; set ``nova`` for
  decisions identical to Nova's.

A profile adds its weighers to the configured ``weighers`` (those not
listed already) and gives their options, and those of the weighers it turns
off, new defaults: a value an operator sets in the config (or a test in
``EngineSettings.plugin_options``) wins over the profile's. The other
weighers (build failures, server groups, I/O, ...) keep their options in
every profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from scheduler.engine.settings import WEIGHER_PROFILES

if TYPE_CHECKING:
    from scheduler.engine.settings import EngineSettings

#: Nova's free-amount weighers, off in the profiles that weigh fractions.
_NOVA_OFF = {
    "ram_weight_multiplier": 0.0,
    "cpu_weight_multiplier": 0.0,
    "disk_weight_multiplier": 0.0,
}


@dataclass(frozen=True)
class Profile:
    """The weighers a profile adds, and the option defaults it sets."""

    name: str
    weighers: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        "nova": Profile("nova"),
        "pack": Profile(
            "pack",
            ("MostAllocatedWeigher", "AlignmentWeigher"),
            {
                **_NOVA_OFF,
                "most_allocated_weight_multiplier": 1.0,
                "alignment_weight_multiplier": 0.5,
                # vCPUs are overcommitted (4:1 by default) and run out last: counting
                # them blurs which of RAM and disk a host is short of.
                "allocation_resource_weights": {"MEMORY_MB": 1.0, "DISK_GB": 1.0},
            },
        ),
        "spread": Profile(
            "spread",
            ("LeastAllocatedWeigher", "HeadroomWeigher"),
            {
                **_NOVA_OFF,
                "least_allocated_weight_multiplier": 1.0,
                "headroom_weight_multiplier": 2.0,
            },
        ),
    }
)
assert tuple(PROFILES) == WEIGHER_PROFILES


def resolve(settings: EngineSettings) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The weighers to build and the plugin options to build them with, under
    the settings' profile (see the module docstring)."""
    profile = PROFILES[settings.weigher_profile]
    names = settings.weighers + tuple(w for w in profile.weighers if w not in settings.weighers)
    return names, {**profile.options, **settings.plugin_options}


def named_options(profile: str) -> frozenset[str]:
    """The options ``profile`` gives defaults to."""
    return frozenset(PROFILES[profile].options)
