"""The worker's and the conductor's /metrics, scraped around real boots: one
rescheduled off a failing host, one that finds no valid host."""

from __future__ import annotations

from collections.abc import Mapping

from bench.nodes import wait_until
from tests.fixtures.cli import boot_nowait
from tests.fixtures.metrics import Samples, metered, scrape, value
from tests.functional.conftest import Cluster


def grew(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def store_totals(cluster: Cluster) -> Mapping[str, tuple[int, int]]:
    """(used, capacity) per class over every provider, read from the store."""
    totals: dict[str, tuple[int, int]] = {}
    for p in cluster.store.list_providers():
        for rc, inv in p.inventories.items():
            used, cap = totals.get(rc, (0, 0))
            totals[rc] = (used + p.usages.get(rc, 0), cap + inv.capacity)
    return totals


def test_the_counters_move_with_a_reschedule_and_a_no_valid_host(cluster: Cluster) -> None:
    worker_port, conductor_port = metered(cluster)
    cluster.start_compute(2, name="good")
    cluster.start_worker().wait_for("health_endpoint")
    worker_before, conductor_before = scrape(worker_port), scrape(conductor_port)

    (placed,) = boot_nowait(cluster, "--count", "1", "--flavor", "m1.small")
    (refused,) = boot_nowait(cluster, "--count", "1", "--flavor", "m1.giant")
    wait_until(
        lambda: (
            {cluster.store.get_instance(u).state for u in (placed, refused)} == {"ACTIVE", "ERROR"}
        ),
        timeout=60,
        what="one instance ACTIVE (rescheduled), the other in ERROR (no valid host)",
    )
    worker, conductor = scrape(worker_port), scrape(conductor_port)

    def worker_grew(name: str, **labels: str) -> float:
        return grew(worker, worker_before, name, **labels)

    assert cluster.store.get_instance(placed).tried_hosts == ("bad-0000",)
    assert worker_grew("scheduler_decisions_total", outcome="placed") == 1
    assert worker_grew("scheduler_decisions_total", outcome="no_valid_host") == 1
    insufficient = "insufficient MEMORY_MB"
    assert worker_grew("scheduler_no_valid_host_reasons_total", reason=insufficient) == 1
    # The giant removed all three hosts; the small one none.
    assert worker_grew("scheduler_hosts_rejected_total", reason=insufficient) == 3
    assert worker_grew("scheduler_decision_seconds_count") == 2
    assert worker_grew("scheduler_engine_wait_seconds_count") >= 2

    def conductor_grew(name: str, **labels: str) -> float:
        return grew(conductor, conductor_before, name, **labels)

    assert conductor_grew("conductor_reschedules_total", kind="build") == 1
    assert conductor_grew("conductor_retries_exhausted_total", kind="build") == 0

    # The gauges: the cloud as the store holds it.
    for rc, (used, capacity) in store_totals(cluster).items():
        assert value(worker, "scheduler_resource_capacity", resource_class=rc) == capacity, rc
        assert value(worker, "scheduler_resource_used", resource_class=rc) == used, rc
    assert value(worker, "scheduler_hosts", state="up") == 3
    assert value(worker, "scheduler_hosts", state="down") == 0
    assert value(worker, "scheduler_hosts", state="disabled") == 0
