"""weigher_profile: one option picks the weighers and their multipliers; an
operator's own values win over the profile's."""

from __future__ import annotations

import pytest
from oslo_config import cfg

from scheduler.engine.pipeline import build_plugins
from scheduler.engine.settings import DEFAULT_WEIGHERS, EngineSettings
from scheduler.service import engine_settings


def running(settings: EngineSettings) -> dict[str, float]:
    """The weighers that run (multiplier not 0), with their multipliers."""
    _, weighers = build_plugins(settings)
    return {name: w.multiplier for name, w in weighers if w.multiplier}


def test_spread_is_the_default() -> None:
    assert EngineSettings().weigher_profile == "spread"
    assert running(EngineSettings()) == running(EngineSettings(weigher_profile="spread"))


def test_nova_profile_is_todays_weighers() -> None:
    got = running(EngineSettings(weigher_profile="nova"))
    assert {"RAMWeigher", "CPUWeigher", "DiskWeigher"} <= set(got)
    assert not {"LeastAllocatedWeigher", "MostAllocatedWeigher", "HeadroomWeigher"} & set(got)


@pytest.mark.parametrize(
    ("profile", "on", "off"),
    [
        pytest.param(
            "spread",
            {"LeastAllocatedWeigher", "HeadroomWeigher"},
            {"RAMWeigher", "CPUWeigher", "DiskWeigher", "MostAllocatedWeigher"},
            id="spread",
        ),
        pytest.param(
            "pack",
            {"MostAllocatedWeigher", "AlignmentWeigher"},
            {"RAMWeigher", "CPUWeigher", "DiskWeigher", "LeastAllocatedWeigher"},
            id="pack",
        ),
    ],
)
def test_profile_turns_its_weighers_on(profile: str, on: set[str], off: set[str]) -> None:
    got = running(EngineSettings(weigher_profile=profile))
    assert on <= set(got)
    assert not off & set(got)
    assert "BuildFailureWeigher" in got  # the others keep their options


def test_a_value_set_wins_over_the_profile() -> None:
    settings = EngineSettings(
        weigher_profile="spread", plugin_options={"ram_weight_multiplier": 2}
    )
    assert running(settings)["RAMWeigher"] == 2.0


def test_profile_adds_its_weighers_to_a_configured_list() -> None:
    settings = EngineSettings(weighers=("RAMWeigher",), weigher_profile="pack")
    assert set(running(settings)) == {"MostAllocatedWeigher", "AlignmentWeigher"}


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="weigher_profile must be one of nova, pack, spread"):
        EngineSettings(weigher_profile="tetris")


def test_service_keeps_only_the_profile_options_an_operator_set(conf: cfg.ConfigOpts) -> None:
    conf.set_override("weigher_profile", "spread", "filter_scheduler")
    conf.set_override("headroom_weight_multiplier", 3.0, "filter_scheduler")
    s = engine_settings(conf)
    assert s.weigher_profile == "spread"
    assert s.weighers == DEFAULT_WEIGHERS
    assert "least_allocated_weight_multiplier" not in s.plugin_options  # the profile's
    assert "ram_weight_multiplier" not in s.plugin_options
    assert s.plugin_options["headroom_weight_multiplier"] == 3.0  # the operator's
    got = running(s)
    assert got["HeadroomWeigher"] == 3.0
    assert got["LeastAllocatedWeigher"] == 1.0
    assert "RAMWeigher" not in got
