"""From options to EngineSettings: the host filters' and weighers' options.

A plugin's options are its ``Args``: generated as ``[filter_scheduler]``
options for every registered plugin (another package's too), read once into
``EngineSettings.plugin_options``, and handed to the plugin as its own Args.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import pytest
from oslo_config import cfg

from scheduler import conf as conf_mod
from scheduler.engine import plugins
from scheduler.engine.context import PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.pipeline import Engine
from scheduler.engine.plugins import PluginArgs, option
from scheduler.engine.settings import DEFAULT_FILTERS, DEFAULT_WEIGHERS, EngineSettings, PciAlias
from scheduler.filters.aggregate_image_properties_isolation import (
    AggregateImagePropertiesIsolation,
)
from scheduler.filters.base import BaseFilter
from scheduler.filters.io_ops import IoOpsFilter
from scheduler.filters.num_instances import NumInstancesFilter
from scheduler.service import describe, engine_settings
from scheduler.store.memory import MemoryStore
from scheduler.weighers.ram import RAMWeigher
from tests.unit.factories import private_conf


def test_defaults_mirror_the_engines(conf: cfg.ConfigOpts) -> None:
    s = engine_settings(conf)
    assert s.enabled_filters == DEFAULT_FILTERS
    assert s.weighers == DEFAULT_WEIGHERS
    options = s.plugin_options
    assert options["io_ops_weight_multiplier"] == -1.0
    assert options["num_instances_weight_multiplier"] == 0.0
    assert options["image_props_weight_multiplier"] == 0.0
    assert options["hypervisor_version_weight_multiplier"] == 1.0
    assert (options["max_instances_per_host"], options["max_io_ops_per_host"]) == (50, 8)
    assert options["restrict_isolated_hosts_to_isolated_images"]


def test_the_start_line_shows_the_weighers_in_effect_not_the_option(conf: cfg.ConfigOpts) -> None:
    """Under the default profile (spread) Nova's weighers listed in the
    ``weighers`` option are off and the profile's own weigh: the worker's start
    line says which, with their multipliers; a multiplier set in the file wins."""
    spread = describe(conf)["weighers"]
    assert spread["LeastAllocatedWeigher"] == 1.0
    assert spread["HeadroomWeigher"] == 2.0
    assert spread["RAMWeigher"] == 0.0
    conf.set_override("ram_weight_multiplier", 3.0, "filter_scheduler")
    assert describe(conf)["weighers"]["RAMWeigher"] == 3.0
    conf.set_override("weigher_profile", "nova", "filter_scheduler")
    nova = describe(conf)["weighers"]
    assert "LeastAllocatedWeigher" not in nova
    assert list(nova) == list(DEFAULT_WEIGHERS)


def test_options_reach_the_settings(conf: cfg.ConfigOpts) -> None:
    conf.set_override(
        "image_props_weight_setting",
        ["os_distro=10", " hw_machine_type = 0.5"],
        "filter_scheduler",
    )
    conf.set_override(
        "alias", ['{"name": "nic", "vendor_id": "8086", "product_id": "154d"}'], "pci"
    )
    conf.set_override("isolated_hosts", ["iso1"], "filter_scheduler")
    s = engine_settings(conf)
    assert s.plugin_options["image_props_weight_setting"] == {
        "os_distro": 10.0,
        "hw_machine_type": 0.5,
    }
    assert s.pci_aliases == {"nic": PciAlias("nic", "8086", "154d")}
    assert s.plugin_options["isolated_hosts"] == ("iso1",)


@pytest.mark.parametrize(
    ("group", "name", "value", "message"),
    [
        pytest.param(
            "filter_scheduler",
            "image_props_weight_setting",
            ["os_distro"],
            "not property=number",
            id="weight-setting-without-number",
        ),
        pytest.param(
            "filter_scheduler",
            "image_props_weight_setting",
            ["os_distro=high"],
            "not property=number",
            id="weight-setting-not-a-number",
        ),
        pytest.param(
            "pci",
            "alias",
            ['{"name": "nic"}'],
            "needs a name and a vendor_id",
            id="pci-alias-without-vendor",
        ),
    ],
)
def test_malformed_options_stop_start_up(
    conf: cfg.ConfigOpts, group: str, name: str, value: list[str], message: str
) -> None:
    conf.set_override(name, value, group)
    with pytest.raises(ValueError, match=message):
        engine_settings(conf)


def test_soft_affinity_multipliers_refuse_negative_values(conf: cfg.ConfigOpts) -> None:
    with pytest.raises(ValueError):
        conf.set_override("soft_anti_affinity_weight_multiplier", -1.0, "filter_scheduler")


def test_each_plugin_gets_its_own_arguments(conf: cfg.ConfigOpts) -> None:
    conf.set_override("max_io_ops_per_host", 3, "filter_scheduler")
    conf.set_override("ram_weight_multiplier", -2.0, "filter_scheduler")
    conf.set_override("enabled_filters", ["IoOpsFilter"], "filter_scheduler")
    eng = Engine(MemoryStore(), engine_settings(conf))
    ((_, io_ops),) = eng.filters
    assert io_ops.args == IoOpsFilter.Args(max_io_ops_per_host=3)
    ram = dict(eng.weighers)["RAMWeigher"]
    assert ram.args == RAMWeigher.Args(ram_weight_multiplier=-2.0)
    assert ram.multiplier == -2.0
    assert dict(eng.weighers)["IoOpsWeigher"].multiplier == -1.0  # its declared default


def test_the_aggregate_filters_load_by_name_with_their_options(conf: cfg.ConfigOpts) -> None:
    names = [
        "AggregateImagePropertiesIsolation",
        "AggregateTypeAffinityFilter",
        "AggregateNumInstancesFilter",
        "AggregateIoOpsFilter",
    ]
    conf.set_override("enabled_filters", names, "filter_scheduler")
    conf.set_override("aggregate_image_properties_isolation_namespace", "iso", "filter_scheduler")
    conf.set_override("max_instances_per_host", 7, "filter_scheduler")
    conf.set_override("max_io_ops_per_host", 2, "filter_scheduler")
    eng = Engine(MemoryStore(), engine_settings(conf))
    loaded = dict(eng.filters)
    assert list(loaded) == names
    assert [type(f).__name__ for f in loaded.values()] == names
    image = loaded["AggregateImagePropertiesIsolation"]
    assert image.args == AggregateImagePropertiesIsolation.Args(
        aggregate_image_properties_isolation_namespace="iso",
        aggregate_image_properties_isolation_separator=".",
    )
    # The aggregate variants read the plain filters' options: one declaration each.
    assert loaded["AggregateNumInstancesFilter"].args == NumInstancesFilter.Args(7)
    assert loaded["AggregateIoOpsFilter"].args == IoOpsFilter.Args(2)


def test_an_argument_out_of_bounds_stops_start_up() -> None:
    with pytest.raises(
        ValueError,
        match=r"^\[filter_scheduler\] max_io_ops_per_host must be "
        r"at least 0, got -1$",
    ):
        Engine(
            MemoryStore(),
            EngineSettings(
                enabled_filters=("IoOpsFilter",), plugin_options={"max_io_ops_per_host": -1}
            ),
        )


# --- a plugin from elsewhere: one module, one entry point ---------------------------------

TINY_REASON = "too few tiny things"


class TinyFilter(BaseFilter[bool]):
    """A test-only filter with one option, registered by a fake entry point."""

    REASON = TINY_REASON

    @dataclass(frozen=True)
    class Args(PluginArgs):
        tiny_things_per_host: int = option(2, min=1, help="How many tiny things a host needs.")

    args: Args

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return np.ones(len(candidates), dtype=bool)


@pytest.fixture
def tiny_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """TinyFilter as if another installed package registered it under scheduler.filters."""
    real = importlib.metadata.entry_points
    tiny = importlib.metadata.EntryPoint(
        name="TinyFilter", value=f"{__name__}:TinyFilter", group=plugins.FILTERS_GROUP
    )

    def entry_points(**selection: str) -> list[importlib.metadata.EntryPoint]:
        found = list(real(**selection))
        return [*found, tiny] if selection.get("group") == plugins.FILTERS_GROUP else found

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_a_new_plugins_option_is_generated_and_reaches_it(tiny_registered: None) -> None:
    generated = dict(conf_mod.list_opts())["filter_scheduler"]
    (opt,) = [o for o in generated if o.name == "tiny_things_per_host"]
    assert isinstance(opt, cfg.IntOpt)
    assert (opt.default, opt.type.min, opt.help) == (2, 1, "How many tiny things a host needs.")
    # From a config file to the filter instance.
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write("[filter_scheduler]\nenabled_filters = TinyFilter\ntiny_things_per_host = 5\n")
        f.flush()
        c = private_conf([f.name])
        settings = engine_settings(c)
    c.reset()
    ((name, tiny),) = Engine(MemoryStore(), settings).filters
    assert (name, type(tiny).__name__) == ("TinyFilter", "TinyFilter")
    assert tiny.args.tiny_things_per_host == 5


@pytest.mark.parametrize(
    "module",
    [
        "scheduler.filters.base",
        "scheduler.weighers.base",
        "scheduler.filters.same_host",
        "scheduler.engine.plugins",
    ],
)
def test_a_plugin_module_imports_first(module: str) -> None:
    """What another package does: import a plugin (or the helpers) before the engine."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
