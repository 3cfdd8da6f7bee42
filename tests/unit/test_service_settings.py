"""From options to EngineSettings: the host filters' and weighers' options."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from oslo_config import cfg

from scheduler import conf as conf_mod
from scheduler.engine.settings import DEFAULT_FILTERS, DEFAULT_WEIGHERS, PciAlias
from scheduler.service import engine_settings


@pytest.fixture
def conf() -> Iterator[cfg.ConfigOpts]:
    """A private ConfigOpts with our options (no RPC server is built from it)."""
    c = cfg.ConfigOpts()
    conf_mod.register_opts(c)
    c([], project="scheduler", default_config_files=[])
    yield c
    c.reset()


def test_defaults_mirror_the_engines(conf: cfg.ConfigOpts) -> None:
    s = engine_settings(conf)
    assert s.enabled_filters == DEFAULT_FILTERS
    assert s.weighers == DEFAULT_WEIGHERS
    assert s.multiplier("io_ops_weight_multiplier", 0) == -1.0
    assert s.multiplier("num_instances_weight_multiplier", 1) == 0.0
    assert s.multiplier("image_props_weight_multiplier", 1) == 0.0
    assert s.multiplier("hypervisor_version_weight_multiplier", 0) == 1.0
    assert (s.max_instances_per_host, s.max_io_ops_per_host) == (50, 8)
    assert s.restrict_isolated_hosts_to_isolated_images


def test_options_reach_the_settings(conf: cfg.ConfigOpts) -> None:
    conf.set_override("image_props_weight_setting", ["os_distro=10", " hw_machine_type = 0.5"],
                      "filter_scheduler")
    conf.set_override("alias", ['{"name": "nic", "vendor_id": "8086", "product_id": "154d"}'],
                      "pci")
    conf.set_override("isolated_hosts", ["iso1"], "filter_scheduler")
    s = engine_settings(conf)
    assert s.image_props_weight_setting == {"os_distro": 10.0, "hw_machine_type": 0.5}
    assert s.pci_aliases == {"nic": PciAlias("nic", "8086", "154d")}
    assert s.isolated_hosts == ("iso1",)


@pytest.mark.parametrize(("group", "name", "value", "message"), [
    pytest.param("filter_scheduler", "image_props_weight_setting", ["os_distro"],
                 "not property=number", id="weight-setting-without-number"),
    pytest.param("filter_scheduler", "image_props_weight_setting", ["os_distro=high"],
                 "not property=number", id="weight-setting-not-a-number"),
    pytest.param("pci", "alias", ['{"name": "nic"}'], "needs a name and a vendor_id",
                 id="pci-alias-without-vendor"),
])
def test_malformed_options_stop_start_up(conf: cfg.ConfigOpts, group: str, name: str,
                                         value: list[str], message: str) -> None:
    conf.set_override(name, value, group)
    with pytest.raises(ValueError, match=message):
        engine_settings(conf)


def test_soft_affinity_multipliers_refuse_negative_values(conf: cfg.ConfigOpts) -> None:
    with pytest.raises(ValueError):
        conf.set_override("soft_anti_affinity_weight_multiplier", -1.0, "filter_scheduler")
