"""RPC arguments typed and checked at the boundary (:mod:`scheduler.arguments`,
issue 35): a message to the compute or the conductor whose arguments are not
of their kinds is refused whole, logged once (``rpc_refused``) and changes
nothing, even when the step it names is due; the well-typed one still goes on."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import structlog

from compute_sim.simulator import ComputeSimulator
from conductor_stub.manager import ConductorEndpoint
from scheduler import arguments
from scheduler.log import RepeatLimiter
from scheduler.objects import ACTIVE, BUILDING
from scheduler.rpc import RequestContext
from scheduler.steps import exposed_methods, guarded
from tests.fixtures import simulator
from tests.fixtures.simulator import CTXT, INSTANCE, MIGRATION, SPEC, Sim, selection
from tests.unit.conductor_stub.helpers import ask, building, cloud
from tests.unit.factories import Recorded

#: The simulator suite's fixture.
make = simulator.make


@pytest.fixture(autouse=True)
def fresh_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test counts its own refusals (the limiter is the process's)."""
    monkeypatch.setattr(arguments, "REPEATS", RepeatLimiter())


#: The issue's values, and the other families of bad ones.
BAD = {
    "five": 5,
    "minus-one": -1,
    "huge-float": 1e308,
    "nan": float("nan"),
    "empty": "",
    "long": "x" * 300,
    "none": None,
    "list": [1],
    "dict": {"a": 1},
    "bool": True,
    "unknown-host": "nowhere",
}


@pytest.mark.parametrize("endpoint", [ComputeSimulator, ConductorEndpoint])
def test_every_argument_of_every_method_has_a_kind(endpoint: type) -> None:
    for name, method in exposed_methods(endpoint).items():
        kinds = arguments.kinds_of(inspect.unwrap(method))
        params = [p for p in inspect.signature(inspect.unwrap(method)).parameters]
        assert set(kinds) == set(params) - {"self", "ctxt"}, name


def test_a_method_with_an_untyped_argument_cannot_be_declared() -> None:
    with pytest.raises(TypeError, match="not typed with an argument kind"):

        class Endpoint:
            @guarded(None)
            def step(self, ctxt: Any, instance_uuid: str) -> None:
                raise AssertionError("never declared")


def snapshot(sim: Sim) -> Any:
    return (
        [(c.uuid, c.allocations) for c in sim.store.list_consumers()],
        [(r.uuid, r.state, r.task_state, r.host, r.node) for r in sim.store.list_instances()],
        {h: sim.sim.driver.list_instances(h) for h in sim.sim.hosts},
        sim.sim.ledger.steps_of(INSTANCE),
        list(sim.conductor.names),
        list(sim.compute.names),
    )


def due_finish_resize(sim: Sim) -> None:
    """INSTANCE resized h1 -> h2, its ``finish_resize`` due on h2."""
    sim.claim(MIGRATION, "h1")
    sim.claim(INSTANCE, "h2")
    sim.prep("h2")
    sim.wait("resize_instance")
    sim.sim.resize_instance(CTXT, INSTANCE, MIGRATION, "h2", "h2")
    sim.wait("finish_resize")


FINISH = {"instance_uuid": INSTANCE, "migration_uuid": MIGRATION, "dest_host": "h2"}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("argument", [*FINISH, "dest_node"])
def test_a_due_finish_resize_with_one_bad_argument_changes_nothing(
    make: Any, argument: str, bad: Any
) -> None:
    """The issue's message: ``finish_resize`` with 5 (or -1, 1e308, "", ...)
    where a uuid, a host or a node goes, the step otherwise due here."""
    if argument == "dest_node" and bad == "nowhere":
        pytest.skip("a well-typed node name")
    sim = make(build_time=0.0)
    due_finish_resize(sim)
    before = snapshot(sim)
    args = {**FINISH, "dest_node": "h2", argument: bad}
    with structlog.testing.capture_logs() as logs:
        sim.sim.finish_resize(CTXT, **args)
    assert snapshot(sim) == before, "nothing acted on"
    assert [(e["event"], e["method"], e["argument"]) for e in logs] == [
        ("rpc_refused", "finish_resize", argument)
    ]
    # The well-typed message is still served.
    sim.sim.finish_resize(CTXT, **FINISH, dest_node="h2")
    assert sim.conductor.last("resize_result")[0][1:] == (INSTANCE, MIGRATION, "h2", True)


def test_the_issues_message_is_refused_at_the_boundary(make: Any) -> None:
    sim = make(build_time=0.0)
    before = snapshot(sim)
    with structlog.testing.capture_logs() as logs:
        sim.sim.finish_resize(CTXT, 5, 5, 5, 5)
        sim.sim.finish_resize(CTXT, INSTANCE, MIGRATION, "h2", "h2", "one too many")
        sim.sim.finish_resize(CTXT, INSTANCE)
    assert snapshot(sim) == before
    assert [e["event"] for e in logs] == ["rpc_refused"] * 3
    sim.sim.report_instances()  # and the reports go on


def test_a_local_host_must_be_one_of_this_process() -> None:
    with pytest.raises(arguments.ArgumentRefused, match="not a host of this process"):
        arguments.checked(
            "terminate_instance",
            {"host": (arguments.LOCAL_HOST, False)},
            {"host": "h9"},
            {"h1", "h2"},
        )
    assert arguments.checked("m", {"host": (arguments.HOST, False)}, {"host": "h9"}, {"h1"}) == {
        "host": "h9"
    }


def test_a_uuid_is_taken_in_its_canonical_form() -> None:
    upper = INSTANCE.upper()
    assert arguments.checked(
        "m", {"instance_uuid": (arguments.UUID, False)}, {"instance_uuid": upper}, None
    ) == {"instance_uuid": INSTANCE}


def test_a_stream_of_bad_messages_logs_a_few_lines(make: Any) -> None:
    sim = make(build_time=0.0)
    with structlog.testing.capture_logs() as logs:
        for n in range(50):
            sim.sim.reap_instance(CTXT, n, "h1", "storm")
    refused = [e for e in logs if e["event"] == "rpc_refused"]
    assert 1 <= len(refused) <= arguments.REPEATS.burst + 1


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("argument", ["instance_uuid", "host", "node", "availability_zone"])
def test_a_due_build_succeeded_with_one_bad_argument_changes_nothing(
    argument: str, bad: Any
) -> None:
    """The conductor's side: a result whose step is due (BUILDING, its claim on
    h1) but whose node or zone is not a name records nothing."""
    if bad is None and argument == "availability_zone" or bad == "nowhere":
        pytest.skip("a well-typed value (the guard's business)")
    store = cloud("h1", "h2")
    uuid = building(store)
    store.claim(uuid, ask("h1"))
    conductor = ConductorEndpoint(store, Recorded(), Recorded())  # type: ignore[arg-type]
    ctxt = RequestContext(request_id="req-forged")
    args = {"instance_uuid": uuid, "host": "h1", "node": "h1", "availability_zone": "az"}
    with structlog.testing.capture_logs() as logs:
        conductor.build_succeeded(ctxt, **{**args, argument: bad})
    assert store.get_instance(uuid).state == BUILDING
    assert [e["event"] for e in logs] == ["rpc_refused"]
    conductor.build_succeeded(ctxt, **args)
    record = store.get_instance(uuid)
    assert (record.state, record.node, record.availability_zone) == (ACTIVE, "h1", "az")


@pytest.mark.parametrize(
    "reason, details, uuids",
    [
        pytest.param(5, "d", None, id="reason-a-number"),
        pytest.param("r", {"a": 1}, None, id="details-a-dict"),
        pytest.param("r", "d", 5, id="uuids-a-number"),
        pytest.param("r", "d", "abc", id="uuids-a-string"),
        pytest.param("r", "d", [], id="uuids-empty"),
    ],
)
def test_a_schedule_failed_with_a_bad_argument_fails_nothing(
    reason: Any, details: Any, uuids: Any
) -> None:
    store = cloud("h1")
    uuid = building(store)
    conductor = ConductorEndpoint(store, Recorded(), Recorded())  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        conductor.schedule_failed(
            RequestContext(), [uuid] if uuids is None else uuids, reason, details
        )
    assert store.get_instance(uuid).state == BUILDING
    assert [e["event"] for e in logs] == ["rpc_refused"]


def _build(**changes: Any) -> dict[str, Any]:
    return {
        "instance_uuid": INSTANCE,
        "selection": selection("h1").to_primitive(),
        "host_list": [],
        **changes,
    }


@pytest.mark.parametrize(
    "builds, why",
    [
        pytest.param([], "must be a non-empty list of builds", id="empty"),
        pytest.param({"a": 1}, "must be a non-empty list of builds", id="not-a-list"),
        pytest.param([_build(extra=1)], "a mapping of exactly", id="unknown-field"),
        pytest.param([{"instance_uuid": INSTANCE}], "a mapping of exactly", id="missing-fields"),
        pytest.param([_build(instance_uuid="x")], "instance_uuid", id="bad-uuid"),
        pytest.param([_build(host_list=[5])], "selection must be an object", id="bad-alternate"),
        pytest.param(
            [_build(selection={"host": 5})], "selection is missing field", id="bad-selection"
        ),
        pytest.param([_build(), _build()], "names an instance twice", id="twice"),
    ],
)
def test_a_batched_build_s_builds_are_checked_whole(builds: Any, why: str) -> None:
    with pytest.raises(arguments.ArgumentRefused, match=why):
        arguments.checked(
            "build_and_run_instances",
            {"builds": (arguments.BUILDS, False)},
            {"builds": builds},
            None,
        )


def test_a_batched_build_with_one_bad_build_builds_none_of_them(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.record()
    sim.claim(INSTANCE, "h1")
    with structlog.testing.capture_logs() as logs:
        sim.sim.build_and_run_instances(
            CTXT, SPEC.to_primitive(), [_build(), _build(instance_uuid="not-a-uuid")]
        )
    assert [e["event"] for e in logs] == ["rpc_refused"]
    assert sim.sim.hosts_running(INSTANCE) == [] and sim.conductor.names == []
