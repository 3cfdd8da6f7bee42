"""A worker serves Nova's scheduler API only when ``[nova_compat] enabled``,
on Nova's exchange and topic, under the worker's server name."""

from __future__ import annotations

import uuid as uuidlib

import pytest
from oslo_config import cfg

from scheduler import rpc
from scheduler.cmd import worker
from scheduler.nova_compat.endpoint import NovaSchedulerEndpoint
from scheduler.service import SchedulerService
from scheduler.store.memory import MemoryStore


def test_the_options_and_their_defaults(conf: cfg.ConfigOpts) -> None:
    nc = conf.nova_compat
    assert (nc.enabled, nc.exchange, nc.topic, nc.cell_uuid) == (
        False,
        "nova",
        "scheduler",
        "00000000-0000-0000-0000-000000000000",
    )


@pytest.mark.parametrize("enabled", [False, True])
def test_a_worker_serves_novas_api_only_when_enabled(conf: cfg.ConfigOpts, enabled: bool) -> None:
    conf.set_override("enabled", enabled, "nova_compat")
    conf.set_override("exchange", "nova-cell1", "nova_compat")
    transport = rpc.get_transport(conf, url=f"fake://{uuidlib.uuid4().hex}")
    try:
        service = SchedulerService(conf, transport, None, MemoryStore(), server_name="w-3")
        if not enabled:
            assert service.nova_server is None
            return
        server = service.nova_server
        assert server is not None
        target = server._target  # type: ignore[attr-defined]
        assert (target.exchange, target.topic, target.server, target.version) == (
            "nova-cell1",
            "scheduler",
            "w-3",
            "4.5",
        )
        (endpoint,) = server.dispatcher.endpoints  # type: ignore[attr-defined]
        assert isinstance(endpoint, NovaSchedulerEndpoint)
        assert endpoint.native is service.endpoint
        assert endpoint.cell_uuid == conf.nova_compat.cell_uuid
    finally:
        transport.cleanup()


def test_a_worker_refuses_to_serve_both_apis_on_one_topic(conf: cfg.ConfigOpts) -> None:
    """The broker names a queue by its topic alone: with both topics
    ``scheduler`` (the defaults) Nova's calls reached the native server, which
    refused version 4.5. The worker refuses the configuration in one line."""
    assert worker.config_error(conf) is None  # off: no clash
    conf.set_override("enabled", True, "nova_compat")
    said = worker.config_error(conf)
    assert said is not None and said.startswith(
        "[nova_compat] topic and [scheduler] topic are both 'scheduler'"
    )
    conf.set_override("topic", "scheduler-native", "scheduler")
    assert worker.config_error(conf) is None
