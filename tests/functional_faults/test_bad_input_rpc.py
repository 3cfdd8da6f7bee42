"""Bad input to the compute's and the conductor's RPC methods, over real RabbitMQ
into real processes (issue 35), as ``test_bad_input.py`` sends the scheduler's.

A settled cloud (two compute processes, a conductor, a worker; a few
instances booted ACTIVE) takes, method by method, a batch of casts drawn by
hypothesis: each argument well-typed (real instances and hosts, a valid
request spec, Selection, flavor) but at least one drawn from every family of
bad value (:data:`tests.strategies.bad_arguments`: wrong types, empty, huge,
non-finite, unknown names; sometimes also an argument the method does not
take, or one left out). Cast many fast, then check, after every batch: the
processes acknowledged it all (a sentinel each, sent last, is served), nothing
changed (records, allocations, the VMs running), every compute's reports are
fresh and the reconciler finds nothing (no ``stale_report``), no process
restarted or crashed (``Exception during message handling``), and the
invariant checker (:meth:`Cluster.check_accounting`) holds.
``SCHEDULER_FUZZ_SCALE`` scales the cases (5,460 at 1).
"""

from __future__ import annotations

import inspect
import os
import time
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute_sim.hosts import provider_uuid
from compute_sim.simulator import ComputeSimulator
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.reconcile import Reconciler, ReconcileSettings
from scheduler import arguments, rpc
from scheduler.exceptions import InvalidRequest
from scheduler.objects import ACTIVE, AllocationRequest, Flavor, RequestSpec, Selection
from scheduler.rpc.transport import COMPUTE_TOPIC, CONDUCTOR_TOPIC, make_client
from scheduler.steps import exposed_methods
from tests import strategies as fuzz
from tests.functional_faults.conftest import FaultCluster

SCALE = float(os.environ.get("SCHEDULER_FUZZ_SCALE", "1"))
#: Cases per method: 26 methods (15 of the compute's, 11 of the conductor's),
#: 5,460 cases in all at scale 1.
PER_METHOD = max(1, int(210 * SCALE))
REPORT_MAX_AGE = 5.0
COMPUTES = {"fa": 3, "fb": 3}  # name prefix -> hosts
HOSTS = {name: [f"{name}-{i:04d}" for i in range(n)] for name, n in COMPUTES.items()}
FLAVOR = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)
SPEC = RequestSpec(flavor=FLAVOR, project_id="p", user_id="u")


def _selection(host: str) -> dict[str, Any]:
    rp = provider_uuid(host)
    return Selection(
        host=host,
        node=host,
        provider_uuid=rp,
        allocation_request=AllocationRequest({rp: SPEC.resources}, "p", "u"),
        weight=1.0,
    ).to_primitive()


def _valid(local: list[str], instances: list[str]) -> dict[arguments.Kind, Any]:
    """A well-typed value of each kind (a host of the target where it must be)."""
    every = [h for hosts in HOSTS.values() for h in hosts]
    selections = st.sampled_from([_selection(h) for h in every])
    return {
        arguments.UUID: st.one_of(st.sampled_from(instances), fuzz.uuids),
        arguments.MIGRATION: st.one_of(fuzz.uuids, st.just("")),
        arguments.UUIDS: st.lists(st.sampled_from(instances), min_size=1, max_size=3, unique=True),
        arguments.HOST: st.sampled_from(every),
        arguments.LOCAL_HOST: st.sampled_from(local),
        arguments.NAME: st.sampled_from(every),
        arguments.FLAG: st.booleans(),
        arguments.TEXT: st.text(max_size=20),
        arguments.REQUEST_SPEC: st.just(SPEC.to_primitive()),
        arguments.FLAVOR: st.just(FLAVOR.to_primitive()),
        arguments.SELECTION: selections,
        arguments.SELECTIONS: st.lists(selections, max_size=2),
        arguments.BUILDS: st.lists(
            st.fixed_dictionaries(
                {
                    "instance_uuid": st.one_of(st.sampled_from(instances), fuzz.uuids),
                    "selection": selections,
                    "host_list": st.lists(selections, max_size=2),
                }
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda b: b["instance_uuid"],
        ),
    }


class Refused:
    """Whether the boundary refuses a value as a ``kind`` (what makes a case
    bad), on a process serving ``local``."""

    def __init__(self, kind: arguments.Kind, local: list[str]) -> None:
        self.kind, self.local = kind, local

    def __call__(self, value: Any) -> bool:
        try:
            self.kind.check(value, "argument", self.local)
        except (InvalidRequest, TypeError, ValueError, AttributeError):
            return True
        return False


@dataclass(frozen=True)
class Draws:
    """What a target's cases are drawn from, built once (hypothesis validates
    a strategy when first drawn from): well-typed and bad values of each kind."""

    valid: dict[arguments.Kind, Any]
    bad: dict[arguments.Kind, Any]

    @classmethod
    def of(cls, local: list[str], instances: list[str]) -> Draws:
        valid = _valid(local, instances)
        return cls(valid, {k: fuzz.bad_arguments.filter(Refused(k, local)) for k in valid})


@st.composite
def bad_call(draw: st.DrawFn, method: Any, draws: Draws) -> Any:
    """The arguments of one bad message to ``method``."""
    kinds = arguments.kinds_of(inspect.unwrap(method))
    args = {name: draw(draws.valid[kind]) for name, (kind, _) in kinds.items()}
    bad = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, max_size=2, unique=True))
    for name in bad:
        args[name] = draw(draws.bad[kinds[name][0]])
    extra = draw(st.sampled_from(("none", "none", "none", "unknown", "missing")))
    if extra == "unknown":
        args[draw(st.sampled_from(("instance", "hosts", "uuid", "x")))] = 1
    elif extra == "missing":
        del args[draw(st.sampled_from(sorted(args)))]
    return args


def snapshot(cluster: FaultCluster) -> Any:
    records = sorted(
        (r.uuid, r.state, r.task_state, r.host, r.node, r.fault, r.migration_uuid)
        for r in cluster.store.scan_instances()
    )
    held = sorted(
        (c.uuid, repr(sorted(c.allocations.items()))) for c in cluster.store.list_consumers()
    )
    return records, held, cluster.running_vms()


def test_bad_arguments_to_every_compute_and_conductor_method_change_nothing(
    cluster: FaultCluster, transport: Any
) -> None:
    cluster.write_config(conductor={"report_max_age": REPORT_MAX_AGE})
    conductor = cluster.start_conductor()
    computes = {
        name: cluster.start_compute(n, "--build-time", "0.01", name=name)
        for name, n in COMPUTES.items()
    }
    worker = cluster.start_worker()
    booted = cluster.boot("--count", "6", "--flavor", "m1.tiny")
    assert booted["summary"]["states"] == {"ACTIVE": 6}
    instances = sorted(r.uuid for r in cluster.store.scan_instances())
    time.sleep(1.5)  # a report of every host since the boots
    before = snapshot(cluster)
    assert {r[1] for r in before[0]} == {ACTIVE}
    pids = {p.name: p.popen.pid for p in cluster.processes}
    compute_version = rpc.ComputeClient.REAP_VERSION
    targets = [
        (
            f"compute:{name}",
            make_client(transport, COMPUTE_TOPIC, compute_version, 30, f"sim-{name}"),
            ComputeSimulator,
            HOSTS[name],
            computes[name],
        )
        for name in COMPUTES
    ]
    targets.append(
        (
            "conductor",
            make_client(transport, CONDUCTOR_TOPIC, "1.6", 30),
            ConductorEndpoint,
            [h for hosts in HOSTS.values() for h in hosts],
            conductor,
        )
    )
    cast: Counter[str] = Counter()
    started = time.monotonic()
    for label, client, endpoint, local, proc in targets:
        methods = exposed_methods(endpoint)
        if label == "compute:fb":  # each compute method to one process or the other
            methods = dict(sorted(methods.items())[1::2])
        elif label.startswith("compute"):
            methods = dict(sorted(methods.items())[0::2])
        draws = Draws.of(local, instances)
        for name, method in sorted(methods.items()):
            cast_batch(client, name, method, draws, cast)
        settle(cluster, client, label, proc, local)
        check(cluster, before, pids)
    seconds = time.monotonic() - started
    print(f"\ncompute/conductor fuzz: {sum(cast.values())} cases in {seconds:.0f} s: {dict(cast)}")
    every = {*exposed_methods(ComputeSimulator), *exposed_methods(ConductorEndpoint)}
    assert set(cast) == every and min(cast.values()) >= PER_METHOD
    worker.assert_kept_serving()


def cast_batch(client: Any, name: str, method: Any, draws: Draws, cast: Counter[str]) -> None:
    """:data:`PER_METHOD` bad messages to ``name``, cast one after another."""

    @settings(
        max_examples=PER_METHOD,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(args=bad_call(method, draws))
    def case(args: dict[str, Any]) -> None:
        ctxt = rpc.RequestContext(request_id=f"req-fuzz-{sum(cast.values())}")
        client.cast(ctxt, name, **args)
        cast[name] += 1

    case()


_SENT = Counter[str]()


def settle(cluster: FaultCluster, client: Any, label: str, proc: Any, local: list[str]) -> None:
    """Cast a well-typed sentinel after the batch and wait until ``proc`` has
    served it (the batch before it is in), then a report interval more."""
    _SENT[label] += 1
    request_id = f"req-sentinel-{label}-{_SENT[label]}"
    ctxt = rpc.RequestContext(request_id=request_id)
    nobody = str(uuidlib.uuid4())
    if label.startswith("compute"):
        client.cast(ctxt, "reap_instance", instance_uuid=nobody, host=local[0], reason=request_id)
    else:
        client.cast(ctxt, "instance_shelved", instance_uuid=nobody, host=local[0])
    deadline = time.monotonic() + 120
    while request_id not in proc.log_path.read_text(errors="replace"):
        assert proc.popen.poll() is None, f"{proc.name} exited"
        assert time.monotonic() < deadline, f"{proc.name} did not serve the batch"
        time.sleep(0.2)
    time.sleep(1.5)  # the last of the batch, and a report since


def check(cluster: FaultCluster, before: Any, pids: dict[str, int]) -> None:
    assert snapshot(cluster) == before, "a bad message changed something"
    now = time.time()
    for report in cluster.store.instance_reports():
        assert now - report.reported_at < 3, f"{report.host}'s report is stale"
    findings = Reconciler(
        cluster.store, None, ReconcileSettings(report_max_age=REPORT_MAX_AGE)
    ).audit()
    assert findings == [], findings
    for proc in cluster.processes:
        assert proc.popen.poll() is None and pids[proc.name] == proc.popen.pid, proc.name
        for event in ("report_entry_dropped", "instances_report_failed", "host_listing_failed"):
            assert proc.count(event) == 0, (proc.name, event)
        assert "Exception during message handling" not in proc.log_path.read_text(), proc.name
    cluster.check_accounting()
