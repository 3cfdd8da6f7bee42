"""The reconciler with real processes: what the hosts run against what the store holds.

* The store goes back about a second in time mid-storm (a private Redis with
  append-only persistence: its files copied during a boot storm, the storm
  let go on for a second, Redis SIGKILLed, the earlier copy put back and
  Redis started on it, as a power cut with ``appendfsync everysec`` or a
  failover to a replica that was behind would leave it). Records the boot
  client was told were accepted vanish, with their claims; VMs built in the
  lost second run with no record, or with a record gone back to BUILDING.
  Within one reconcile interval plus one build timeout (and the grace, and a
  report) the invariants hold again, and ``boot --wait`` reports the records
  that vanished with nothing running them as lost instead of hanging.
* A raw ``run_instance`` for an instance uuid that has no record: whatever it
  claimed and built is accounted for or gone after one reconcile interval
  plus the grace, and the conductor logs one warning for the build result.
* ``scheduler-admin audit`` against a real deployment shows the findings,
  ``--fix`` repairs them and the next audit finds nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid as uuidlib
from collections.abc import Callable

import pytest

from conductor_stub.findings import LOST_FAULT
from scheduler.objects import ERROR, FINAL_STATES, AllocationRequest
from tests.fixtures.amqp import SPEC, envelope, publish
from tests.fixtures.cli import boot_in_background
from tests.fixtures.reconcile import (
    BUILD_TIMEOUT,
    CONDUCTOR,
    RECONCILE,
    REPORT_INTERVAL,
    redis_files,
)
from tests.functional_faults.conftest import FaultCluster, PrivateRedis, free_port, wait_until
from tests.functional_faults.storm import start_storm

pytestmark = pytest.mark.timeout(120)

#: One reconcile interval plus one build timeout, plus the grace and a report:
#: the longest the invariants may take to hold again after a fault.
REPAIR_WITHIN = BUILD_TIMEOUT + sum(RECONCILE[k] for k in ("reconcile_interval", "orphan_grace"))
REPAIR_WITHIN += 2 * REPORT_INTERVAL


def accounting_holds(cluster: FaultCluster) -> Callable[[], bool]:
    def check() -> bool:
        try:
            cluster.check_accounting()
        except AssertionError:
            return False
        return True

    return check


def admin(cluster: FaultCluster, *args: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cmd.admin", "--config-file", str(cluster.config_file)]
        + list(args),
        capture_output=True,
        timeout=60,
    )
    assert out.returncode in (0, 1), out.stderr.decode()[-4000:]
    return out.returncode, out.stdout.decode()


def test_the_store_went_back_a_second_in_time_mid_storm(
    private_redis: Callable[..., PrivateRedis], make_cluster: Callable[..., FaultCluster]
) -> None:
    redis_server = private_redis()
    cluster = make_cluster(redis_url=redis_server.url())
    cluster.write_config(conductor=CONDUCTOR, compute={"report_interval": REPORT_INTERVAL})
    conductor = cluster.start_conductor()
    cluster.start_compute(10, "--build-time", "1.5")
    worker = cluster.start_worker()
    storm = start_storm(cluster, 150)
    wait_until(lambda: storm.states()["ACTIVE"] >= 30, 60, "the storm to be under way")

    # The copy the store will go back to.
    saved = redis_server.dir / "saved"
    shutil.copytree(redis_files(redis_server), saved)
    copied = time.monotonic()
    # A boot told its instances were accepted, all inside the second the store
    # loses: 15 members of an anti-affinity group on 10 hosts, so that 10 are
    # built (the boot still waits on them when the store goes back) and 5 are
    # refused, and so are never run by anything.
    waiting = boot_in_background(
        cluster, 15, "--group-policy", "anti-affinity", "--wait", "--timeout", "60"
    )
    wait_until(
        lambda: len(cluster.store.list_instances()) >= len(storm.uuids) + 15,
        10,
        "the boot's records",
    )
    time.sleep(max(0.0, 1.0 - (time.monotonic() - copied)))
    assert redis_server.popen is not None
    redis_server.popen.kill()
    redis_server.popen.wait(10)
    shutil.rmtree(redis_files(redis_server))
    shutil.copytree(saved, redis_files(redis_server))
    redis_server.start()
    restored = time.monotonic()

    storm.settle(60)
    wait_until(accounting_holds(cluster), REPAIR_WITHIN + 30, "the invariants to hold again")
    repaired_in = time.monotonic() - restored
    stdout, stderr = waiting.communicate(timeout=90)
    assert waiting.returncode in (0, 1), stderr.decode()[-4000:]
    boot = json.loads(stdout)
    assert not boot["summary"]["timed_out"], boot["summary"]  # no hang
    lost = [i for i in boot["instances"] if i["fault"] == LOST_FAULT]
    assert boot["summary"]["lost"] == len(lost) and (waiting.returncode == 1) == bool(lost)
    # Those refused vanished with nothing running them: lost. The others came
    # back as their hosts built them (their records re-created), or are lost too.
    assert len(lost) >= 5, boot["summary"]
    assert {i["state"] for i in boot["instances"] if i not in lost} <= {"ACTIVE"}, boot
    # The worker sees the store went back in time at its next request, and
    # reloads its host view. A worker reads the feed when it decides, so one
    # request is sent now: the storm may have been scheduled whole before the
    # store went back, and then nothing since has asked the worker anything.
    # Which of the two signals it sees depends on where its cursor was: an
    # entry the store lost (the stream is truncated under it), or one it kept
    # while its own claims of the lost second never come (a write lost).
    cluster.boot("--count", "1", timeout=60)
    assert worker.count("host_view_stream_truncated") + worker.count("host_view_write_lost") >= 1

    booted = [i["uuid"] for i in boot["instances"]]
    records = cluster.store.list_instances(storm.uuids + booted)
    assert {r.state for r in records} <= FINAL_STATES
    assert all(r.state != ERROR or r.fault for r in records)
    actions = [e for e in conductor.log_events() if e.get("event") == "reconcile_action"]
    figures = {
        "storm": len(storm.uuids),
        "boots_in_the_lost_second": len(booted),
        "lost_reported_by_boot_wait": len(lost),
        "actions": {
            k: sum(1 for a in actions if a["kind"] == k) for k in {a["kind"] for a in actions}
        },
        "worker_reloads": worker.count("host_view_loaded"),
        "redrives": conductor.count("request_redriven"),
        "seconds_restore_to_invariants": round(repaired_in, 1),
        "bound_seconds": REPAIR_WITHIN,
    }
    print("\nstore rolled back:", json.dumps(figures))
    assert repaired_in <= REPAIR_WITHIN, figures
    # The audit finds nothing left to repair, and counts the lost records.
    code, out = admin(cluster, "audit")
    assert out.splitlines()[-1] == (
        "findings: stray_vm=0 lost_record=0 missing_allocation=0 orphan_allocation=0 "
        f"lost_boot={len(lost)} lost_vm=0 misplaced_vm=0 lost_delete=0 lost_shelve=0 "
        "lost_resize=0 overcommit=0 stale_report=0 pending_unindexed=0 stale_pending=0"
    ), out
    assert code == 1


def test_a_run_instance_for_an_instance_with_no_record(
    make_cluster: Callable[..., FaultCluster],
) -> None:
    cluster = make_cluster()
    port = free_port()
    cluster.write_config(
        conductor={**CONDUCTOR, "health_port": port},
        compute={"report_interval": REPORT_INTERVAL},
    )
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(2, "--build-time", "0.01")
    worker = cluster.start_worker()
    uuid = str(uuidlib.uuid4())
    publish(
        cluster,
        envelope("run_instance", {"request_spec": SPEC, "instance_uuids": [uuid]}),
        "application/json",
    )
    # Either the worker refuses it up front, or it is claimed and built: then the
    # reconciler accounts for the VM (a record, ACTIVE where it runs) or reaps it.
    wait_until(lambda: uuid in worker.log_path.read_text(), 10, "the worker to take it")
    wait_until(
        lambda: (
            cluster.store.list_instances([uuid])
            or (cluster.store.get_consumer(uuid) is None and uuid not in cluster.running_vms())
        ),
        REPAIR_WITHIN,
        "the instance recorded, or nothing held or run for it",
    )
    wait_until(accounting_holds(cluster), REPAIR_WITHIN, "the invariants to hold")
    held = cluster.store.get_consumer(uuid)
    running = cluster.running_vms().get(uuid, set())
    [record] = cluster.store.list_instances([uuid]) or [None]
    if held is not None or running:
        assert record is not None and record.state == "ACTIVE", record
        assert running == {record.host}, running
    actions = [e for e in conductor.log_events() if e.get("event") == "reconcile_action"]
    print(
        "\nrun_instance with no record:",
        json.dumps(
            {
                "built": compute.count("vm_started"),
                "actions": [(a["kind"], a["outcome"]) for a in actions],
                "record": record.state if record else None,
            }
        ),
    )
    # Each action is counted on the conductor's /metrics.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    for kind in {a["kind"] for a in actions}:
        assert f'conductor_reconcile_actions_total{{kind="{kind}"}} ' in metrics, metrics
    logs = conductor.log_path.read_text()
    assert "Traceback" not in logs
    if compute.count("vm_started"):
        assert conductor.count("build_result_for_unknown_instance") >= 1


def test_audit_shows_findings_and_fix_clears_them(
    make_cluster: Callable[..., FaultCluster],
) -> None:
    cluster = make_cluster()
    # The daemon's reconciler stays out of the way: the audit is the one to act.
    cluster.write_config(
        conductor={**CONDUCTOR, "reconcile_interval": 600.0},
        compute={"report_interval": REPORT_INTERVAL},
    )
    cluster.start_conductor()
    compute = cluster.start_compute(2, "--build-time", "0.01")
    cluster.start_worker()
    [instance] = cluster.boot("--count", "1")["instances"]
    stray = instance["uuid"]
    host = instance["host"]
    # A record that went to ERROR while its VM still runs, and a claim no one's.
    cluster.store.update_instance(stray, state=ERROR, task_state=None, updated_at=time.time())
    orphan = str(uuidlib.uuid4())
    root = cluster.store.get_provider_by_name(host).uuid
    cluster.store.claim(orphan, AllocationRequest({root: {"VCPU": 1}}, "p", "u"))
    reported = time.time()
    wait_until(
        lambda: any(r.reported_at > reported + 0.1 for r in cluster.store.instance_reports()),
        10,
        "a report after the change",
    )

    code, out = admin(cluster, "audit")
    assert code == 1, out
    lines = out.splitlines()
    assert any(line.startswith(f"stray_vm           {stray}  host={host}") for line in lines), out
    assert any(line.startswith(f"orphan_allocation  {orphan}") for line in lines), out

    code, out = admin(cluster, "audit", "--fix", "--grace", "0", "--json")
    assert code == 0, out
    assert json.loads(out)["repaired"] == {"stray_vm": 1, "orphan_allocation": 1}
    wait_until(lambda: compute.count("orphan_vm_reaped") == 1, 10, "the VM reaped")
    assert cluster.store.get_consumer(orphan) is None
    wait_until(lambda: not cluster.running_vms(), 10, "nothing running")

    # The reaped VM's allocation is no one's now: the next audit finds it.
    reported = time.time()
    wait_until(
        lambda: any(r.reported_at > reported + 0.1 for r in cluster.store.instance_reports()),
        10,
        "a report after the reap",
    )
    code, out = admin(cluster, "audit", "--fix", "--grace", "0")
    assert code == 0 and f"orphan_allocation  {stray}" in out, out
    code, out = admin(cluster, "audit")
    assert code == 0, out
    assert out.strip() == (
        "findings: stray_vm=0 lost_record=0 missing_allocation=0 orphan_allocation=0 lost_boot=0 "
        "lost_vm=0 misplaced_vm=0 lost_delete=0 lost_shelve=0 lost_resize=0 overcommit=0 "
        "stale_report=0 pending_unindexed=0 stale_pending=0"
    )
