"""A compute simulator killed with builds in flight.

Two simulators serve 20 hosts each; one builds slowly (3 s a build) and is
killed with SIGKILL while builds are under way on it. Those builds never
report. Once their deadline passes the conductor re-drives them; by then the
dead simulator's hosts have stopped heartbeating (``service_down_time`` 5 s),
so the scheduler releases each such claim and places the instance afresh on a
live host (rescheduled) — or, if the re-drives run out first, the instance
ends in ERROR with "the request timed out" and its claim released. Nothing is
stuck, doubled or leaked (instances built on the dead hosts before the kill
stay ACTIVE there, as Nova's do until evacuated).
"""

from __future__ import annotations

import json
import signal

from compute_sim.hosts import provider_uuid
from scheduler.exceptions import RequestTimedOut
from tests.functional_faults.conftest import FaultCluster, wait_until
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

DOOMED = [f"doomed-{i:04d}" for i in range(20)]


def test_a_compute_killed_with_builds_in_flight(cluster: FaultCluster) -> None:
    cluster.write_config(
        scheduler={"service_down_time": 5},
        compute={"heartbeat_interval": 1},
        conductor=FAST_CONDUCTOR,
    )
    conductor = cluster.start_conductor()
    cluster.start_compute(20, "--build-time", "0.05", name="steady")
    doomed = cluster.start_compute(20, "--build-time", "3", name="doomed")
    worker = cluster.start_worker()
    storm = start_storm(cluster, 300)
    doomed_rps = {provider_uuid(h) for h in DOOMED}

    def building_on_doomed() -> set[str]:
        building = {r.uuid for r in storm.records() if r.state == "BUILDING"}
        return {
            c.uuid
            for c in cluster.store.list_consumers()
            if c.uuid in building and set(c.allocations) & doomed_rps
        }

    # A handful is enough to prove the point; how many overlap depends on how
    # fast the storm is sent, which a loaded machine slows down.
    wait_until(
        lambda: len(building_on_doomed()) >= 5, 90, "builds under way on the doomed", interval=0.05
    )
    doomed.popen.send_signal(signal.SIGKILL)
    doomed.popen.wait()
    # A build the doomed compute finished just before it died is not lost: its
    # success may still be on its way to the conductor (the record said BUILDING
    # a moment ago) and ends ACTIVE there. The simulator logs a success before
    # it reports it, so such builds are known.
    finished = {
        e.get("instance_uuid") for e in doomed.log_events() if e.get("event") == "build_succeeded"
    }
    lost_builds = building_on_doomed() - finished
    in_flight = storm.mark_fault()

    storm.settle(150)
    records = {r.uuid: r for r in assert_settled_cleanly(storm)}
    rescheduled = [u for u in lost_builds if records[u].state == "ACTIVE"]
    timed_out = [u for u in lost_builds if records[u].state == "ERROR"]
    figures = storm.figures(
        builds_lost_with_the_compute=len(lost_builds),
        rescheduled_to_live_hosts=len(rescheduled),
        error_after_deadline=len(timed_out),
        claims_released_from_down_hosts=worker.count("allocation_on_down_host_released"),
        redrives_logged=conductor.count("request_redriven"),
    )
    print("\ncompute SIGKILL:", json.dumps(figures))
    assert in_flight > 0 and lost_builds
    # Each lost build was rescheduled onto a live host, or failed after its deadline.
    assert all(records[u].host not in DOOMED for u in rescheduled)
    assert all(records[u].fault == RequestTimedOut.USER_MESSAGE for u in timed_out)
    assert rescheduled, "the scheduler placed the lost builds again on live hosts"
