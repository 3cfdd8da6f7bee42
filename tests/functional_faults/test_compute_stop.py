"""A compute stopped gracefully (SIGTERM) takes its hosts out of scheduling at once.

Its hosts are marked down in the store as it stops, and the change reaches
every worker's host view through the change feed: builds booted the moment
after go to the computes still running, none to the stopped one's hosts to
wait there for the build timeout. Started again, it heartbeats and its hosts
are up again, in the store and in the worker's view (the compute filter,
run alone by the worker, keeps them).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from scheduler import rpc, rules
from scheduler.flavors import load_catalog
from scheduler.objects import RequestSpec
from tests.functional_faults.conftest import FaultCluster, wait_until

#: Far beyond what the test waits: a host counts down only because it was
#: marked so, and a build sent to a stopped host would end only at the timeout.
SERVICE_DOWN_TIME = 60
BUILD_TIMEOUT = 60
#: What booting after the stop may take at most (well under both).
PROMPTLY = 15.0


def _hosts(result: dict[str, Any]) -> Counter[str]:
    """Instances per simulator (``--name-prefix``), by the host each ended on."""
    return Counter(str(i["host"]).rsplit("-", 1)[0] for i in result["instances"])


def _down_in_the_view(client: rpc.SchedulerClient) -> set[str]:
    """The hosts the worker's view counts down (the compute filter, alone)."""
    spec = RequestSpec(flavor=load_catalog("")["m1.tiny"], project_id="p", user_id="u")
    run = client.run_filter(rpc.RequestContext.admin(), spec, "ComputeFilter")
    return set(run.removed)


@pytest.mark.timeout(120)
def test_a_gracefully_stopped_compute_gets_no_builds_and_comes_back(
    cluster: FaultCluster, transport: Any
) -> None:
    cluster.write_config(
        scheduler={"service_down_time": SERVICE_DOWN_TIME},
        conductor={"build_timeout": BUILD_TIMEOUT},
    )
    cluster.start_conductor()
    cluster.start_compute(2, "--build-time", "0.01", name="live")
    stopping = cluster.start_compute(2, "--build-time", "0.01", name="stopping")
    worker = cluster.start_worker()
    client = rpc.SchedulerClient(transport, timeout=30)
    warm = cluster.boot("--count", "8", "--flavor", "m1.tiny", timeout=PROMPTLY)
    assert set(_hosts(warm)) == {"live", "stopping"}, "both computes take builds"
    assert _down_in_the_view(client) == set()

    stopping.stop()  # SIGTERM, and wait for it to exit
    assert stopping.popen.returncode == 0
    started = time.monotonic()
    result = cluster.boot("--count", "16", "--flavor", "m1.tiny", timeout=PROMPTLY)
    took = time.monotonic() - started
    states = Counter(i["state"] for i in result["instances"])
    print(f"\ncompute stop: 16 boots after the stop {dict(states)} in {took:.2f} s")
    assert states == {"ACTIVE": 16}, result
    assert _hosts(result) == {"live": 16}, "nothing sent to the stopped compute's hosts"
    assert took < PROMPTLY
    gone = {"stopping-0000", "stopping-0001"}
    assert _down_in_the_view(client) == gone
    assert stopping.count("hosts_marked_down") == 1

    # Started again: it heartbeats, and its hosts are up again.
    cluster.start_compute(2, "--build-time", "0.01", name="stopping")
    now = time.time()
    for host in gone:
        service = cluster.store.get_service(host)
        assert service is not None and rules.is_up(now, service.last_seen, SERVICE_DOWN_TIME)
    wait_until(lambda: not _down_in_the_view(client), 10, "the hosts up in the worker's view")
    worker.assert_kept_serving()
