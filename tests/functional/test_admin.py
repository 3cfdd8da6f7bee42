"""``scheduler-admin`` against a real worker, RabbitMQ and Redis: explain on an
unplaceable request (counted reasons, nothing claimed), on a placeable one,
explain host by host (``--json --all-hosts``, ``--only-filter``) against what
the engine decides, the refusal of a non-admin explain, hosts, and an
instance's fault."""

from __future__ import annotations

import json
import uuid as uuidlib
from typing import Any

import pytest

from scheduler import rpc
from scheduler.engine import Engine
from scheduler.exceptions import Forbidden, NoValidHost
from scheduler.explain import ExplainReport
from scheduler.flavors import load_catalog
from scheduler.objects import Flavor, RequestSpec, ServerGroup
from scheduler.service import engine_settings
from scheduler.store import Service
from tests.fixtures.cli import admin_cli
from tests.functional.conftest import Cluster, Process
from tests.unit.factories import private_conf

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)


def usage_of(cluster: Cluster) -> dict[str, Any]:
    return {p.name: dict(p.usages) for p in cluster.store.list_providers()}


def test_explain_an_unplaceable_request_counts_the_reasons_and_claims_nothing(
    cluster: Cluster, transport: Any
) -> None:
    # 8 hosts too small for m1.xlarge, 4 big ones: one disabled, three holding
    # a member of an anti-affinity group.
    giant = cluster.tmp / "flavors.json"
    giant.write_text(json.dumps({"m1.giant": {"vcpus": 1, "memory_mb": 200000}}))
    cluster.write_config(conductor={"flavors_file": str(giant)})
    cluster.start_conductor()
    cluster.start_compute(8, "--memory-mb", "16384", name="small")
    cluster.start_compute(4, "--memory-mb", "131072", name="big")
    cluster.store.set_service_disabled("big-0003", True, "maintenance")
    worker = cluster.start_worker()
    group = ServerGroup(uuid=str(uuidlib.uuid4()), policy="anti-affinity")
    members = [str(uuidlib.uuid4()) for _ in range(3)]
    placed = rpc.SchedulerClient(transport).select_destinations(
        rpc.RequestContext(),
        RequestSpec(flavor=SMALL, project_id="p", user_id="u", num_instances=3, group=group),
        members,
    )
    assert sorted(per[0].host for per in placed) == ["big-0000", "big-0001", "big-0002"]
    consumers_before, usage_before = cluster.store.list_consumers(), usage_of(cluster)

    text = admin_cli(
        cluster,
        "explain",
        "--flavor",
        "m1.xlarge",
        "--group-policy",
        "anti-affinity",
        "--group-uuid",
        group.uuid,
    )
    as_json = admin_cli(
        cluster,
        "explain",
        "--flavor",
        "m1.xlarge",
        "--group-policy",
        "anti-affinity",
        "--group-uuid",
        group.uuid,
        "--json",
    )

    assert text.returncode == 1, text.stderr  # 1: would not be placed
    print(text.stdout)  # the sample the note shows
    # The disabled host's reason depends on the stage that removes it.
    summary = "0/12 hosts available: 8 insufficient MEMORY_MB, 3 server group anti-affinity, 1 "
    assert any(
        line.startswith(summary) and "disabled" in line for line in text.stdout.splitlines()
    ), text.stdout
    assert "dry run: nothing was claimed" in text.stdout
    assert "result: NO VALID HOST" in text.stdout
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["placeable"] is False
    (only,) = report["instances"]
    assert sum(only["reasons"].values()) == 12
    assert only["reasons"]["insufficient MEMORY_MB"] == 8
    assert only["reasons"]["server group anti-affinity"] == 3
    stages = [stage["stage"] for stage in only["stages"]]
    assert stages.index("candidates") < stages.index("ServerGroupAntiAffinityFilter")
    assert only["stages"][-1]["survivors"] == 0
    # Nothing claimed, nothing consumed.
    assert cluster.store.list_consumers() == consumers_before
    assert usage_of(cluster) == usage_before
    assert worker.count("explained") == 2

    # A placeable request: where it would go and each weigher's share.
    placeable = admin_cli(cluster, "explain", "--flavor", "m1.small", "--count", "2", "--json")
    assert placeable.returncode == 0, placeable.stderr
    report = json.loads(placeable.stdout)
    assert report["placeable"] is True and len(report["instances"]) == 2
    top = report["instances"][0]["top"]
    assert top and set(top[0]["contributions"]) == set(report["weighers"])
    assert cluster.store.list_consumers() == consumers_before

    # What the hosts hold.
    hosts = admin_cli(cluster, "hosts", "--json")
    assert hosts.returncode == 0, hosts.stderr
    rows = {row["host"]: row for row in json.loads(hosts.stdout)}
    assert len(rows) == 12 and all(row["up"] for row in rows.values())
    assert rows["big-0003"]["disabled"] is True
    assert rows["big-0003"]["disabled_reason"] == "maintenance"
    assert rows["big-0000"]["usage"]["MEMORY_MB"] == {"used": 2048, "capacity": 131072 - 512}
    table = admin_cli(cluster, "hosts")
    assert "12 hosts: 12 up, 0 down, 1 disabled" in table.stdout
    assert "disabled (maintenance)" in table.stdout

    # An instance no host fits: the user's fault is generic, the admin's counted.
    cluster.store.set_service_disabled("big-0003", False)
    booted = cluster.boot("--count", "1", "--flavor", "m1.giant")
    (failed,) = booted["instances"]
    assert failed["state"] == "ERROR" and failed["fault"] == NoValidHost.USER_MESSAGE
    shown = admin_cli(cluster, "instance", "show", failed["uuid"])
    assert shown.returncode == 0, shown.stderr
    assert "  fault          No valid host was found." in shown.stdout.splitlines()
    assert (
        "  fault details  0/12 hosts available: 12 insufficient MEMORY_MB   [admin only]"
        in shown.stdout.splitlines()
    )
    missing = admin_cli(cluster, "instance", "show", str(uuidlib.uuid4()))
    assert missing.returncode == 2 and "not found" in missing.stderr

    for uuid in members:
        assert cluster.store.release(uuid)


def test_explain_all_hosts_names_what_the_engine_decides(cluster: Cluster, transport: Any) -> None:
    # Six equal hosts (their weights tie, the pick among 3 is drawn), one of
    # them disabled, and two too small for m1.small.
    cluster.write_config(filter_scheduler={"host_subset_size": 3})
    cluster.start_compute(6, "--memory-mb", "16384", name="even")
    cluster.start_compute(2, "--memory-mb", "2048", name="tiny")
    cluster.store.set_service_disabled("even-0005", True, "maintenance")
    cluster.start_worker()
    request_id, uuids = f"req-{uuidlib.uuid4()}", [str(uuidlib.uuid4()) for _ in range(2)]
    spec = RequestSpec(
        flavor=load_catalog()["m1.small"], project_id="admin", user_id="admin", num_instances=2
    )

    out = admin_cli(
        cluster,
        "explain",
        "--flavor",
        "m1.small",
        "--count",
        "2",
        "--json",
        "--all-hosts",
        "--request-id",
        request_id,
        "--instance-uuid",
        *uuids,
    )
    assert out.returncode == 0, out.stderr
    report = ExplainReport.from_primitive(json.loads(out.stdout))
    first = report.instances[0].detail
    assert first is not None
    assert dict(first.stage("DisabledComputesRequestFilter").removed) == {"even-0005": "disabled"}
    assert dict(first.stage("candidates").removed) == {
        "tiny-0000": "insufficient MEMORY_MB",
        "tiny-0001": "insufficient MEMORY_MB",
    }
    assert sorted(w.host for w in first.weighed) == [f"even-000{n}" for n in range(5)]

    # An engine in this process, over the same store with the worker's
    # settings, decides host by host what the worker reported.
    local = Engine(cluster.store, engine_settings(private_conf([str(cluster.config_file)])))
    mine = local.explain(request_id, spec, uuids, all_hosts=True)
    assert [i.detail for i in report.instances] == [i.detail for i in mine.instances]
    run = local.run_filter("ComputeFilter", spec)

    # The real decision for the same request id and uuids: the same hosts.
    placed = rpc.SchedulerClient(transport, timeout=30).select_destinations(
        rpc.RequestContext(request_id=request_id), spec, uuids
    )
    assert [per[0].host for per in placed] == [i.host for i in report.instances]
    for uuid in uuids:
        assert cluster.store.release(uuid)

    # One filter alone on every host, as the engine runs it.
    only = admin_cli(cluster, "explain", "--flavor", "m1.small", "--only-filter", "ComputeFilter")
    assert only.returncode == 0, only.stderr
    assert only.stdout.splitlines()[0] == "ComputeFilter alone on 8 hosts: 1 removed, 7 kept"
    assert dict(run.removed) == {"even-0005": "disabled"}
    assert any(line.split() == ["even-0005", "disabled"] for line in only.stdout.splitlines())


#: Contexts that are not admin contexts, by name (one cluster serves them all).
NON_ADMIN = {
    "member": rpc.RequestContext(user_id="alice", project_id="p", roles=["member"]),
    "admin-role-without-is_admin": rpc.RequestContext(
        user_id="bob", project_id="p", roles=["admin"]
    ),
    "anonymous": rpc.RequestContext(),
}


def test_explain_refuses_a_non_admin_context(cluster: Cluster, transport: Any) -> None:
    cluster.start_compute(2)
    worker = cluster.start_worker()
    client = rpc.SchedulerClient(transport, timeout=30)
    spec = RequestSpec(flavor=SMALL, project_id="p", user_id="u")
    for name, ctxt in NON_ADMIN.items():
        with pytest.raises(Forbidden) as err:
            client.explain(ctxt, spec)
        assert err.value.message == "forbidden: explain requires an admin context", name
    assert worker.count("explain_refused") == len(NON_ADMIN)
    # An admin is served by the same worker, which kept running.
    report = client.explain(rpc.RequestContext.admin(user_id="ops", project_id="admin"), spec)
    assert report.placeable and cluster.store.list_consumers() == []


def scheduled_on(worker: Process) -> list[str]:
    """The hosts a worker cast builds to, in order."""
    return [e["host"] for e in worker.log_events() if e.get("event") == "instance_scheduled"]


def test_host_disable_is_seen_by_every_worker_at_once_and_enable_undoes_it(
    cluster: Cluster,
) -> None:
    cluster.start_conductor()
    compute = cluster.start_compute(2)
    workers = [cluster.start_worker("worker-a"), cluster.start_worker("worker-b")]
    (running,) = cluster.boot("--count", "1")["instances"]
    assert running["state"] == "ACTIVE"
    busy = running["host"]
    [free] = {"compute-0000", "compute-0001"} - {busy}
    held_before = cluster.store.get_consumer(running["uuid"])
    held_rpc_server = (cluster.store.get_service(busy) or Service(busy, "-")).rpc_server

    disabled = admin_cli(cluster, "host", "disable", busy, "--reason", "maintenance")
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout == f"host {busy} disabled (maintenance)\n"
    # No wait: the next requests, whichever worker takes each, avoid the host
    # (though it is the emptier one, which the RAM weigher prefers).
    seen = [len(scheduled_on(w)) for w in workers]
    booted = cluster.boot("--count", "8")["instances"]
    assert [(i["state"], i["host"]) for i in booted] == [("ACTIVE", free)] * 8
    after = [scheduled_on(w)[n:] for w, n in zip(workers, seen, strict=True)]
    assert all(after), f"each worker should have placed some: {after}"
    # What runs there is untouched.
    assert cluster.store.get_instance(running["uuid"]).state == "ACTIVE"
    assert cluster.store.get_consumer(running["uuid"]) == held_before
    hosts = {row["host"]: row for row in json.loads(admin_cli(cluster, "hosts", "--json").stdout)}
    assert (hosts[busy]["disabled"], hosts[busy]["disabled_reason"]) == (True, "maintenance")

    enabled = admin_cli(cluster, "host", "enable", busy)
    assert enabled.returncode == 0 and enabled.stdout == f"host {busy} enabled\n"
    # The emptier host wins again at once.
    (back,) = cluster.boot("--count", "1")["instances"]
    assert back["host"] == busy

    # conductor-stub list / show read the same records.
    code, out, err = cluster.conductor_stub("list", "--host", free, "--json")
    assert code == 0, err
    listed = {r["uuid"] for r in json.loads(out)["instances"]}
    assert listed == {i["uuid"] for i in booted}
    code, out, err = cluster.conductor_stub("show", running["uuid"], "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["state"], shown["host"], shown["flavor"]) == ("ACTIVE", busy, "m1.small")
    assert "allocations" not in shown
    code, out, err = cluster.conductor_stub("show", running["uuid"], "--json", "--admin")
    assert json.loads(out)["allocations"], err

    unknown = admin_cli(cluster, "host", "disable", "compute-9999")
    assert unknown.returncode == 2
    assert unknown.stderr == "scheduler-admin: host compute-9999 not found\n"
    assert all(not s.disabled for s in cluster.store.list_services())
    for w in workers:
        w.assert_kept_serving()

    # A compute restarting does not enable a host an admin disabled: its
    # registration keeps the service's state, its trait report keeps the
    # status trait. It serves under its predecessor's RPC server name (its
    # queue taken over, not one more left behind).
    admin_cli(cluster, "host", "disable", busy, "--reason", "psu")
    compute.stop()
    cluster.start(
        "compute-again",
        "compute_sim.cmd",
        "--hosts",
        "2",
        "--name-prefix",
        "compute",
        ready="compute_sim_started",
    )
    service = cluster.store.get_service(busy)
    assert service is not None and service.rpc_server == held_rpc_server
    assert (service.disabled, service.disabled_reason) == (True, "psu")
    assert "COMPUTE_STATUS_DISABLED" in cluster.store.get_provider_by_name(busy).traits


def test_refusals_lists_the_boots_no_host_could_take(cluster: Cluster) -> None:
    """``scheduler-admin refusals``: a worker keeps each NoValidHost it decides
    (time, request id, instances, hosts removed per reason) in the store."""
    cluster.start_conductor()
    cluster.start_compute(2)
    cluster.start_worker()
    code, stdout, stderr = cluster.conductor_stub(
        "boot", "--extra-spec", "trait:CUSTOM_NOWHERE=required", "--wait", "--json"
    )
    assert code == 1, stderr
    (refused,) = json.loads(stdout)["instances"]
    out = admin_cli(cluster, "refusals", "--json")
    assert out.returncode == 0, out.stderr
    (kept,) = json.loads(out.stdout)["refusals"]
    assert kept["instance_uuids"] == [refused["uuid"]]
    assert kept["action"] == "run_instance"
    assert kept["reasons"] == {"missing trait CUSTOM_NOWHERE": 2}
    assert kept["request_id"] == cluster.store.get_instance(refused["uuid"]).request_id
