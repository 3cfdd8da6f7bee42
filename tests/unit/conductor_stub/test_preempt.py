"""A preemption through the lifecycle on the in-memory store: the preempting
claim fences the victim, the conductor's sweep ends it through the delete
path, and the preemptor is built on the host only once the victim's VM is
gone there; a late or forged build, a replayed result and a killed conductor
change nothing (:mod:`conductor_stub.tasks.preempt`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from compute_sim.hosts import provider_uuid
from conductor_stub.redrive import Sweeper
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import ConsumerDeleted
from scheduler.objects import (
    ACTIVE,
    DELETED,
    DELETING,
    ERROR,
    PREEMPTING,
    SPAWNING,
    AllocationRequest,
)
from scheduler.store import Eviction, Victim
from tests.fixtures.cloud import CTXT, SETTINGS, Cloud
from tests.fixtures.simulator import SPEC
from tests.unit.factories import NOW, Recorded, uuid_of

#: The host's memory left once the victim runs: none (the preemptor needs it).
HOST = "h1"


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    made = Cloud()
    made.wire.receivers["build_and_run_instance"] = lambda ctxt, uuid, spec, sel, alts: (
        made.sim.build_and_run_instance(
            ctxt, uuid, spec.to_primitive(), sel.to_primitive(), [a.to_primitive() for a in alts]
        )
    )
    yield made
    made.sim.stop()


def running_victim(cloud: Cloud, name: str = "victim") -> str:
    """A preemptible low-priority instance built and ACTIVE on HOST."""
    uuid = cloud.booting(name)
    cloud.store.claim(uuid, AllocationRequest({provider_uuid(HOST): SPEC.resources}, "p", "u"))
    cloud.build(uuid, HOST)
    cloud.settle(HOST)
    cloud.wire.deliver("build_succeeded")
    cloud.store.update_instance(uuid, preemptible=True, priority=1, priority_class="spot")
    assert cloud.store.get_instance(uuid).state == ACTIVE
    assert cloud.sim.hosts_running(uuid) == [HOST]
    return uuid


def preempt(cloud: Cloud, victims: list[str], name: str = "preemptor") -> str:
    """The worker's step: the preemptor claims HOST, evicting ``victims``."""
    uuid = cloud.booting(name)
    read = []
    for victim in victims:
        held = cloud.store.get_consumer(victim)
        assert held is not None
        read.append(
            Victim(victim, held.allocations, HOST, cloud.store.get_instance(victim).updated_at)
        )
    assert cloud.store.claim_preempting(
        uuid,
        AllocationRequest({provider_uuid(HOST): SPEC.resources}, "p", "u"),
        read,
        10,
        eviction=Eviction("req-preempt", NOW, HOST, HOST, None, "gold", 10),
    )
    return uuid


def sweeper(cloud: Cloud, now: list[float]) -> Sweeper:
    """The conductor's sweep, on the cloud's wire, at ``now[0]``."""
    return Sweeper(
        cloud.store,
        Recorded(),  # type: ignore[arg-type]
        Resizer(cloud.store, Recorded(), Recorded()),  # type: ignore[arg-type]
        SETTINGS,
        clock=lambda: now[0],
        deleter=Deleter(cloud.store, cloud.wire.client(), SETTINGS, clock=lambda: now[0]),
    )


def builds(cloud: Cloud) -> list[tuple[Any, ...]]:
    return [args for method, args, _ in cloud.wire.held if method == "build_and_run_instance"]


def test_the_victim_goes_then_the_preemptor_is_built_where_it_ran(cloud: Cloud) -> None:
    victim = running_victim(cloud)
    preemptor = preempt(cloud, [victim])
    record = cloud.store.get_instance(victim)
    assert (record.state, record.fault, record.preempted_by) == (
        DELETING,
        f"preempted by instance {preemptor}",
        preemptor,
    )
    with pytest.raises(ConsumerDeleted):  # the victim is fenced
        cloud.claim(victim, "h2")
    # The sweep finds the victim's delete due and sends its terminate.
    sweeper(cloud, [NOW]).sweep()
    assert cloud.wire.pending() == ["terminate_instance"]
    assert builds(cloud) == []
    cloud.wire.deliver("terminate_instance")
    assert cloud.sim.hosts_running(victim) == []
    # Its host's answer finishes the delete, and only then is the build cast.
    cloud.wire.deliver("instance_terminated")
    record = cloud.store.get_instance(victim)
    assert (record.state, record.fault) == (DELETED, f"preempted by instance {preemptor}")
    (cast,) = builds(cloud)
    assert (cast[1], cast[3].host) == (preemptor, HOST)
    assert cloud.store.get_instance(preemptor).task_state == SPAWNING
    cloud.wire.deliver("build_and_run_instance")
    cloud.settle(HOST)
    cloud.wire.deliver("build_succeeded")
    assert cloud.store.get_instance(preemptor).state == ACTIVE
    assert cloud.sim.hosts_running(preemptor) == [HOST]


def test_a_build_before_the_victim_is_gone_is_refused(cloud: Cloud) -> None:
    """A late run_instance copy, or a forged build, while the preemptor waits:
    the compute refuses it (the host never runs both)."""
    victim = running_victim(cloud)
    preemptor = preempt(cloud, [victim])
    cloud.build(preemptor, HOST)
    cloud.settle(HOST)
    assert cloud.sim.hosts_running(preemptor) == []
    assert "build_succeeded" not in cloud.wire.pending()
    assert cloud.store.get_instance(preemptor).task_state == PREEMPTING


def test_a_replayed_answer_or_a_repeated_check_builds_once(cloud: Cloud) -> None:
    victim = running_victim(cloud)
    preemptor = preempt(cloud, [victim])
    sweeper(cloud, [NOW]).sweep()
    cloud.wire.deliver("terminate_instance")
    cloud.wire.deliver("instance_terminated")
    assert len(builds(cloud)) == 1
    # The host's answer again, the conductor's check again: nothing more.
    cloud.endpoint.instance_terminated(CTXT, victim, HOST)
    assert not cloud.endpoint.deleter.preempter.build_if_ready(preemptor)
    assert len(builds(cloud)) == 1


def test_the_preemptor_waits_for_every_victim(cloud: Cloud) -> None:
    first = running_victim(cloud, "v1")
    second = running_victim(cloud, "v2")
    preemptor = preempt(cloud, [first, second])
    assert cloud.store.get_instance(preemptor).victims == (first, second)
    sweeper(cloud, [NOW]).sweep()
    cloud.wire.deliver_all("terminate_instance")
    cloud.wire.deliver("instance_terminated")
    assert builds(cloud) == []
    cloud.wire.deliver("instance_terminated")
    assert len(builds(cloud)) == 1


def test_a_conductor_killed_before_the_build_is_carried_on_by_the_sweep(cloud: Cloud) -> None:
    """The victim's delete finished but the build was never cast (the
    conductor died between): the preemptor's deadline builds it."""
    victim = running_victim(cloud)
    preemptor = preempt(cloud, [victim])
    now = [NOW]
    sweeper(cloud, now).sweep()
    cloud.wire.deliver("terminate_instance")
    cloud.wire.held.clear()  # instance_terminated lost with the conductor
    now[0] = NOW + SETTINGS.delete_timeout + 1
    sweep = sweeper(cloud, now)
    sweep.sweep()  # the victim's delete re-sent
    cloud.wire.deliver("terminate_instance")  # gone already: answered again
    cloud.wire.held.clear()  # and lost again
    assert cloud.store.get_instance(victim).state == DELETING
    # The delete gives up on its host after its re-drives, then builds.
    for _ in range(SETTINGS.max_redrives + 1):
        now[0] += SETTINGS.delete_timeout + 1
        sweep.sweep()
        cloud.wire.held[:] = [h for h in cloud.wire.held if h[0] != "terminate_instance"]
    assert cloud.store.get_instance(victim).state == DELETED
    assert [args[1] for args in builds(cloud)] == [preemptor]
    assert cloud.store.get_instance(preemptor).task_state == SPAWNING


def test_the_preemptor_deadline_waits_then_fails_cleanly(cloud: Cloud) -> None:
    """A victim whose delete does not end in time: the preemptor waits
    ``max_redrives`` times, then fails to ERROR, its claim released."""
    victim = running_victim(cloud)
    preemptor = preempt(cloud, [victim])
    # Hold the victim's delete off (as if its sweep had not reached it yet).
    cloud.store.update_instance(victim, deadline=None)
    record = cloud.store.get_instance(preemptor)
    now = [record.deadline or NOW]
    sweep = sweeper(cloud, now)
    for _ in range(SETTINGS.max_redrives):
        now[0] = (cloud.store.get_instance(preemptor).deadline or 0) + 1
        sweep.sweep()
        assert cloud.store.get_instance(preemptor).task_state == PREEMPTING
    now[0] = (cloud.store.get_instance(preemptor).deadline or 0) + 1
    sweep.sweep()
    record = cloud.store.get_instance(preemptor)
    assert (record.state, record.task_state) == (ERROR, None)
    assert cloud.store.get_consumer(preemptor) is None
    assert builds(cloud) == []
    # The victim's delete still ends, and builds nothing.
    cloud.deleter.terminate(cloud.store.get_instance(victim))
    cloud.wire.deliver("terminate_instance")
    cloud.wire.deliver("instance_terminated")
    assert cloud.store.get_instance(victim).state == DELETED
    assert builds(cloud) == []
    assert cloud.store.get_instance(preemptor).state == ERROR


def test_nothing_is_built_for_a_preemptor_no_longer_waiting(cloud: Cloud) -> None:
    """A forged or stale call for an instance that does not wait: nothing."""
    victim = running_victim(cloud)
    assert not cloud.endpoint.deleter.preempter.build_if_ready(victim)
    assert not cloud.endpoint.deleter.preempter.build_if_ready(uuid_of("nobody"))
    assert builds(cloud) == []
    assert cloud.store.get_instance(victim).state == ACTIVE


def test_a_preemptor_deleted_while_it_waits_is_never_built(cloud: Cloud) -> None:
    victim = running_victim(cloud)
    preemptor = preempt(cloud, [victim])
    cloud.deleter.delete(preemptor)  # its claim's host is asked too
    sweeper(cloud, [NOW]).sweep()  # the victim's terminate
    cloud.wire.deliver_all("terminate_instance")
    cloud.wire.deliver_all("instance_terminated")
    assert builds(cloud) == []
    for uuid in (victim, preemptor):
        assert cloud.store.get_instance(uuid).state == DELETED
        assert cloud.store.get_consumer(uuid) is None
    assert cloud.sim.hosts_running(victim) == cloud.sim.hosts_running(preemptor) == []
