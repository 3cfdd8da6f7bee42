"""Functional tier: real RabbitMQ, real Redis, the daemons as real processes.

Each test gets its own RabbitMQ virtual host (created and deleted here) and
its own Redis key prefix, so runs never see each other's queues, messages or
keys. The services must be up: if RabbitMQ or Redis cannot be reached the
tests fail (never skip) — CI starts them first.

After every test the cluster's invariants are checked
(:meth:`Cluster.check_accounting`): each provider's usage equals the sum of
its live allocations and never exceeds its capacity; group members are
those of the live allocations; no VM runs on two hosts; a DELETED instance
holds nothing, is in no group and runs nowhere. The process harness
(:class:`Cluster`, :class:`Process`) is in ``cluster.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# The harness lives in its own module so the benchmark suite can use it too;
# re-exported here for the tests that import it from conftest.
from bench.cluster import (  # noqa: F401
    RABBIT_HOST,
    RABBIT_PORT,
    REDIS_URL,
    Cluster,
    Process,
    rabbitmqctl,
    reap_vhost_deletions,
)
from tests.ordering import longest_first

#: The modules that take longest (seconds of one worker, summed over their
#: tests, setup and teardown included), longest first (see
#: :mod:`tests.ordering`). The walkthrough (one test, 85 s) used to come last,
#: alone on one worker. Measured with ``pytest -n 2 --dist loadscope
#: tests/functional --junitxml=...`` (summed per module).
LONGEST_FIRST = (
    "test_bench.py",  # one 130 s benchmark run before its 32 tests
    "test_resize.py",
    "test_admin.py",
    "test_migrate.py",
    "test_delete.py",
    "test_live_migrate.py",
    "test_reschedule.py",
    "test_drain.py",
    "test_boot.py",
    "test_preemption.py",
    "test_walkthrough.py",
    "test_worker_supervision.py",
    "test_redrive.py",
    "test_pending.py",
    "test_cli.py",
    "test_shelve.py",
    "test_notification_bound.py",
    "test_placement.py",
    "test_host_filters.py",
    "test_evacuate.py",
    "test_operator_views.py",
    "test_notification_samples.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items, Path(__file__).parent, LONGEST_FIRST)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session", autouse=True)
def services_up() -> None:
    """Fail the whole tier, loudly, when a service is missing."""
    missing = []
    if not _reachable(RABBIT_HOST, RABBIT_PORT):
        missing.append(f"RabbitMQ at {RABBIT_HOST}:{RABBIT_PORT}")
    redis_host, _, redis_port = REDIS_URL.split("//", 1)[1].split("/", 1)[0].rpartition(":")
    if not _reachable(redis_host, int(redis_port)):
        missing.append(f"Redis at {REDIS_URL}")
    if missing:
        pytest.fail(
            "functional tests need " + " and ".join(missing) + " (see .ci/run)", pytrace=False
        )


@pytest.fixture(scope="session", autouse=True)
def vhosts_deleted() -> Iterator[None]:
    """Every test's vhost is deleted by the end of the session: the deletions
    the ``cluster`` fixture leaves going on are waited for (and fail loudly)."""
    yield
    reap_vhost_deletions()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # Those of earlier tests that have ended (one that failed fails here).
    reap_vhost_deletions(block=False)
    c = Cluster(tmp_path)
    try:
        yield c
        c.check_accounting()
    finally:
        # The vhost's deletion goes on while the next test starts (nothing
        # uses it any more: the processes are stopped); reaped above, or by
        # vhosts_deleted at the end.
        c.close(wait=False)


@pytest.fixture
def transport(cluster: Cluster) -> Iterator[Any]:
    """An oslo.messaging transport into the cluster's vhost, for the test itself."""
    t = cluster.open_transport()
    yield t
    t.cleanup()


@contextmanager
def _listening(
    cluster: Cluster, topic: str, pool: str
) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """What arrives on notification ``topic`` from now on (a function reading it)."""
    from scheduler import conf as conf_mod
    from scheduler import rpc
    from scheduler.cmd.notify_tail import listen

    conf = conf_mod.CONF
    conf_mod.set_defaults()
    conf([], project="scheduler", default_config_files=[])
    t = rpc.get_notification_transport(conf, url=cluster.transport_url)
    seen: list[dict[str, Any]] = []
    listener = listen(t, topic, seen.append, pool=pool)
    try:
        yield lambda: list(seen)
    finally:
        listener.stop()
        listener.wait()
        t.cleanup()


@pytest.fixture
def notifications(cluster: Cluster) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Start listening for the legacy notifications now; call the fixture to read them."""
    with _listening(cluster, "notifications", "functional-test") as read:
        yield read


@pytest.fixture
def versioned_notifications(cluster: Cluster) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Start listening for the versioned notifications now; call the fixture to read them."""
    with _listening(cluster, "versioned_notifications", "functional-test") as read:
        yield read
