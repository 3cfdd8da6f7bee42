"""The step guard (:mod:`scheduler.steps`): every method the compute's and the
conductor's RPC servers answer is a guarded step, nothing else is answered,
and a result naming another consumer as its migration moves no allocation."""

from __future__ import annotations

import inspect
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from compute_sim.hosts import HostShape
from compute_sim.simulator import ComputeSimulator
from conductor_stub.manager import ConductorEndpoint
from scheduler import conf as conf_mod
from scheduler import rpc
from scheduler.objects import ACTIVE, RESIZING, migration_uuid_for
from scheduler.rpc import RequestContext
from scheduler.rpc.transport import make_client
from scheduler.steps import ACCESS_POLICY, GUARDED_ATTR, exposed_methods, owns_migration
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import active_on, cloud, resizing
from tests.unit.factories import Recorded, spec

ENDPOINTS = [
    pytest.param(ComputeSimulator, rpc.ComputeClient, id="compute"),
    pytest.param(ConductorEndpoint, rpc.ConductorClient, id="conductor"),
]


def client_methods(client: type) -> set[str]:
    """What a client sends: its public methods (one per remote call)."""
    return {
        name
        for name, member in inspect.getmembers(client, inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.parametrize("endpoint, client", ENDPOINTS)
def test_every_method_the_server_answers_is_a_guarded_step(endpoint: type, client: type) -> None:
    exposed = exposed_methods(endpoint)
    unguarded = sorted(n for n, m in exposed.items() if not getattr(m, GUARDED_ATTR, None))
    assert unguarded == [], f"answered but not guarded: {unguarded}"
    assert set(exposed) == client_methods(client), "the server answers what the client sends"


@pytest.mark.parametrize("endpoint, client", ENDPOINTS)
def test_no_other_public_method_is_answered(endpoint: type, client: type) -> None:
    """oslo.messaging's default policy answers any public method: ``stop``,
    ``register`` or ``report_instances`` of the compute would be RPC methods."""
    policy = ACCESS_POLICY()
    public = [n for n in dir(endpoint) if not n.startswith("_") and callable(getattr(endpoint, n))]
    answered = {n for n in public if policy.is_allowed(endpoint, n)}
    assert answered == client_methods(client)
    assert {"stop", "register", "report_instances"} <= set(public) - answered or (
        endpoint is ConductorEndpoint
    )


@pytest.fixture
def transport() -> Iterator[Any]:
    conf_mod.set_defaults()
    conf_mod.CONF([], project="scheduler", default_config_files=[])
    t = rpc.get_transport(conf_mod.CONF, url=f"fake://{uuidlib.uuid4().hex}")
    yield t
    t.cleanup()


def test_a_server_with_the_policy_refuses_an_undeclared_method(transport: Any) -> None:
    store = MemoryStore()
    sim = ComputeSimulator(store, Recorded(), ["h1"], "sim", HostShape())  # type: ignore[arg-type]
    server = rpc.get_server(transport, "compute-policy", "sim", [sim], access_policy=ACCESS_POLICY)
    server.start()
    try:
        client = make_client(transport, "compute-policy", "1.0", 5, server="sim")
        with pytest.raises(Exception, match="stop"):  # NoSuchMethod, rebuilt on the caller
            client.call(RequestContext(), "stop")
    finally:
        server.stop()
        server.wait()
        sim.stop()


@pytest.mark.parametrize(
    "request_id, owned",
    [("req-1", True), ("req-2", False), (None, False), ("", False)],
)
def test_a_migration_is_owned_only_under_the_request_it_was_derived_from(
    request_id: str | None, owned: bool
) -> None:
    instance = "6b3c2d8e-7a57-4f0c-9c2a-0f3e7d1c2b11"
    assert owns_migration(instance, migration_uuid_for(instance, "req-1"), request_id) is owned


@pytest.mark.parametrize(
    "method",
    ["resize_result", "reschedule", "live_migration_precheck_failed"],
)
def test_a_result_naming_another_instance_as_its_migration_moves_nothing(method: str) -> None:
    """Issue 28's B3: the stale-migration undo handed that consumer's allocation
    to the instance named."""
    store = cloud("h1", "h2")
    victim = active_on(store, "h2", "victim")
    uuid = active_on(store, "h1", "i1")
    before = {c.uuid: c.allocations for c in store.list_consumers()}
    conductor = ConductorEndpoint(store, Recorded(), Recorded())  # type: ignore[arg-type]
    ctxt = RequestContext(request_id="req-forged")
    request_spec = spec().to_primitive()  # well-typed: the guard, not the boundary, refuses it
    with structlog.testing.capture_logs() as logs:
        if method == "resize_result":
            conductor.resize_result(ctxt, uuid, victim, "h2", True)
        elif method == "reschedule":
            conductor.reschedule(
                ctxt, uuid, request_spec, "h2", "forged", [], migration_uuid=victim
            )
        else:
            conductor.live_migration_precheck_failed(
                ctxt, uuid, victim, request_spec, "h2", "forged", []
            )
    assert {c.uuid: c.allocations for c in store.list_consumers()} == before
    assert {(r.uuid, r.state, r.host) for r in store.list_instances()} == {
        (victim, ACTIVE, "h2"),
        (uuid, ACTIVE, "h1"),
    }
    assert [e["event"] for e in logs] == ["step_refused"]


def test_a_late_copy_of_the_instances_own_move_is_still_undone() -> None:
    """A result of a move the record is no longer under, from a copy carrying
    that move's request id, hands the parked allocation back as before."""
    store = cloud("h1", "h2")
    uuid, migration = resizing(store, "h1", None)
    store.move_allocations(migration, uuid)  # the move ended (given up)
    store.update_instance(uuid, state=ACTIVE, migration_uuid=None, source_host=None)
    store.move_allocations(uuid, migration)  # ... then a late copy parked it again
    conductor = ConductorEndpoint(store, Recorded(), Recorded())  # type: ignore[arg-type]
    conductor.resize_result(RequestContext(request_id="req-1"), uuid, migration, "h2", True)
    assert store.get_consumer(migration) is None
    assert store.get_consumer(uuid) is not None
    assert store.get_instance(uuid).state == ACTIVE != RESIZING
