"""A worker's start: it waits for its store, saying where it is waiting."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from oslo_config import cfg
from structlog.testing import capture_logs

from scheduler import rpc
from scheduler.service import SchedulerService
from scheduler.store.memory import MemoryStore


class LateStore(MemoryStore):
    """A store that does not answer its first ``misses`` pings."""

    def __init__(self, misses: int) -> None:
        super().__init__()
        self.misses = misses

    def ping(self) -> bool:
        self.misses -= 1
        return self.misses < 0


def test_waiting_for_the_store_names_it_without_its_password(
    conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf.set_override("url", "redis://sched:hunter2@db.example:6380/2", "redis")
    transport = rpc.get_transport(conf, url=f"fake://{uuidlib.uuid4().hex}")
    slept: list[Any] = []
    monkeypatch.setattr("scheduler.service.time.sleep", slept.append)
    try:
        service = SchedulerService(conf, transport, None, LateStore(misses=2), server_name="s")
        with capture_logs() as logs:
            service._wait_for_store()
    finally:
        transport.cleanup()
    waits = [e for e in logs if e["event"] == "store_unreachable"]
    assert [e["store"] for e in waits] == ["redis://sched:***@db.example:6380/2"] * 2
    assert slept == [0.5, 1.0]
