"""``scheduler-worker``: the pure parts of its supervision (tables of named cases;
the processes themselves are in tests/functional/test_worker_supervision.py)."""

from __future__ import annotations

import pytest
from oslo_config import cfg

from scheduler.cmd import worker


@pytest.mark.parametrize(
    "quick_deaths, delay",
    [
        pytest.param(0, 0.0, id="never-died"),
        pytest.param(1, 0.0, id="first-death-replaced-at-once"),
        pytest.param(2, 1.0, id="second-quick-death-waits-1s"),
        pytest.param(3, 2.0, id="then-doubles"),
        pytest.param(5, 8.0, id="fifth-waits-8s"),
        pytest.param(8, 60.0, id="capped-at-60s"),
        pytest.param(40, 60.0, id="stays-capped"),
    ],
)
def test_restart_delay(quick_deaths: int, delay: float) -> None:
    assert worker.restart_delay(quick_deaths) == delay


@pytest.mark.parametrize(
    "worker_id, workers, name",
    [
        pytest.param(0, 1, "scheduler-worker", id="the-only-worker"),
        pytest.param(0, 3, "scheduler-worker.0", id="first-of-three"),
        pytest.param(2, 3, "scheduler-worker.2", id="last-of-three"),
    ],
)
def test_process_name(worker_id: int, workers: int, name: str) -> None:
    assert worker.process_name(worker_id, workers) == name


@pytest.mark.parametrize(
    "option, value, error",
    [
        pytest.param(None, None, None, id="defaults-start"),
        pytest.param(
            "enabled_filters",
            ["ComputeFilter", "NoSuchFilter"],
            "scheduler.filters plugin 'NoSuchFilter': no such entry point",
            id="unknown",
        ),
        pytest.param(
            "image_props_weight_setting",
            ["os_distro"],
            "[filter_scheduler] image_props_weight_setting: 'os_distro' is not property=number",
            id="malformed-plugin-option",
        ),
    ],
)
def test_a_configuration_no_worker_could_start_with_is_refused_in_one_line(
    conf: cfg.ConfigOpts, option: str | None, value: object, error: str | None
) -> None:
    if option is not None:
        conf.set_override(option, value, "filter_scheduler")
    found = worker.config_error(conf)
    if error is None:
        assert found is None
    else:
        assert found is not None and found.startswith(error) and "\n" not in found
