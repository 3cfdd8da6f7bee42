"""The RPC boundary: what each client method sends at the version it pins
(scheduler: 1.0, 1.1 for explain, 1.3 for select_destinations with zones,
1.4 for explain's uuids and all hosts and for run_filter; compute and
conductor: 1.1, 1.2 when a Selection names a zone, 1.3 for the delete's
terminate_instance and instance_terminated), and that
the context and typed errors cross it (over oslo.messaging's fake:// driver)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import oslo_messaging
import pytest

from scheduler import rpc
from scheduler.exceptions import Forbidden, InvalidRequest, NoValidHost, SchedulerUnavailable
from scheduler.explain import (
    HOST_FILTER,
    ExplainReport,
    InstanceExplanation,
    StageHosts,
    StageSurvivors,
    WeighedHostReport,
)
from scheduler.objects import AllocationRequest, Flavor, RequestSpec, Selection
from tests.fixtures import rpc as rpc_fixtures
from tests.fixtures.rpc import spied

#: The fake:// transport fixture, one per module.
transport = rpc_fixtures.transport

RP = "7f1c9a52-0b7e-4d0a-8d7c-3e2b1a0c9d88"
SPEC = RequestSpec(
    flavor=Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1), project_id="p", user_id="u"
)
SEL = Selection(
    host="h1",
    node="h1",
    provider_uuid=RP,
    weight=0.5,
    allocation_request=AllocationRequest({RP: {"VCPU": 1}}, "p", "u"),
)
ZONED = dataclasses.replace(SEL, availability_zone="east")
REPORT = ExplainReport(
    request_id="req-abc",
    flavor="m1.tiny",
    resources={"VCPU": 1, "MEMORY_MB": 512},
    num_instances=1,
    placeable=True,
    weighers={"RAMWeigher": 1.0},
    instances=(
        InstanceExplanation(
            position=0,
            hosts=3,
            stages=(StageSurvivors("candidates", 2),),
            reasons={"insufficient MEMORY_MB": 1},
            top=(WeighedHostReport("h1", 1.0, {"RAMWeigher": 1.0}),),
            host="h1",
        ),
    ),
)


class Recorder:
    """Records every method called on it, with its context and arguments.

    Serves every version up to ``version`` (1.4 unless told), as a worker does.
    """

    def __init__(self, version: str = "1.4") -> None:
        self.target = oslo_messaging.Target(version=version)
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []
        self.event = threading.Event()
        self.raise_next: Exception | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        @oslo_messaging.expected_exceptions(InvalidRequest, NoValidHost, Forbidden)
        def method(ctxt: Any, **kwargs: Any) -> Any:
            self.calls.append((name, ctxt, kwargs))
            self.event.set()
            if self.raise_next is not None:
                exc, self.raise_next = self.raise_next, None
                raise exc
            if name == "explain":
                return REPORT.to_primitive()
            if name == "run_filter":
                return FILTER_RUN.to_primitive()
            # As a worker answers: the zone only to a client that asked for it.
            zoned = ZONED if kwargs.get("return_zones") else ZONED.without_zone()
            return [[zoned.to_primitive()]]

        return method


@pytest.fixture(scope="module")
def servers(transport: Any) -> Iterator[Recorder]:
    rec = Recorder()
    servers = [
        rpc.get_server(transport, topic, server, [rec])
        for topic, server in (
            (rpc.SCHEDULER_TOPIC, "s1"),
            (rpc.COMPUTE_TOPIC, "sim-1"),
            (rpc.CONDUCTOR_TOPIC, "c1"),
        )
    ]
    # Workers that only know 1.0 and 1.2, on topics of their own.
    servers.append(rpc.get_server(transport, OLD_TOPIC, "old-1", [Recorder(version="1.0")]))
    servers.append(rpc.get_server(transport, V1_2_TOPIC, "old-2", [OLD_WORKER]))
    for s in servers:
        s.start()
    yield rec
    for s in servers:
        s.stop()
        s.wait()


@pytest.fixture
def recorder(servers: Recorder) -> Recorder:
    servers.calls.clear()
    servers.event.clear()
    return servers


def _wait(rec: Recorder) -> tuple[str, Any, dict[str, Any]]:
    assert rec.event.wait(5), "nothing arrived"
    return rec.calls[-1]


CTXT = rpc.RequestContext(request_id="req-abc", user_id="u", project_id="p", roles=["member"])
ADMIN = rpc.RequestContext.admin(request_id="req-adm", user_id="ops", project_id="admin")
OLD_TOPIC = "scheduler-1.0"
V1_2_TOPIC = "scheduler-1.2"
#: The worker on V1_2_TOPIC, before Selections had a zone.
OLD_WORKER = Recorder(version="1.2")
FILTER_RUN = StageHosts("ComputeFilter", HOST_FILTER, ("h1",), {"h2": "disabled"})


def test_select_destinations_sends_v1_3_arguments_and_context(
    transport: Any, recorder: Recorder
) -> None:
    client = rpc.SchedulerClient(transport)
    result = client.select_destinations(CTXT, SPEC, ["i-1"], return_alternates=False)
    name, ctxt, kwargs = recorder.calls[-1]
    assert name == "select_destinations"
    assert kwargs == {
        "request_spec": SPEC.to_primitive(),
        "instance_uuids": ["i-1"],
        "return_alternates": False,
        "return_zones": True,
    }
    assert ctxt.request_id == "req-abc" and ctxt.roles == ["member"]
    assert result == [[ZONED]]
    assert result[0][0].availability_zone == "east"


@pytest.mark.usefixtures("servers")  # the 1.2 worker must be serving
def test_a_1_2_worker_is_asked_again_as_before_and_its_selections_have_no_zone(
    transport: Any,
) -> None:
    """Refused at 1.3 (before anything ran), the client asks as a 1.2 client
    did, and takes the Selections without a zone."""
    OLD_WORKER.calls.clear()
    client = rpc.SchedulerClient(transport, topic=V1_2_TOPIC, timeout=5)
    result = client.select_destinations(CTXT, SPEC, ["i-1"])
    assert [kwargs for _, _, kwargs in OLD_WORKER.calls] == [
        {"request_spec": SPEC.to_primitive(), "instance_uuids": ["i-1"], "return_alternates": True}
    ]
    assert result == [[ZONED.without_zone()]]
    assert result[0][0].availability_zone is None


def test_an_older_servers_refusal_arrives_typed_over_a_real_transport() -> None:
    """Over RabbitMQ the refusal is rebuilt from its module name (the fake
    driver above hands the exception object over): unless the dispatcher's
    module is allowed, the client would see a RemoteError and not fall back."""
    from oslo_messaging._drivers import common

    wire = common.serialize_remote_exception(
        (oslo_messaging.UnsupportedVersion, oslo_messaging.UnsupportedVersion("1.3"), None)
    )
    err = common.deserialize_remote_exception(wire, rpc.ALLOWED_EXMODS)
    assert isinstance(err, oslo_messaging.UnsupportedVersion)


@pytest.mark.parametrize(
    "send, method, expected",
    [
        pytest.param(
            lambda t: rpc.SchedulerClient(t).run_instance(CTXT, SPEC, ["i-1"]),
            "run_instance",
            {"request_spec": SPEC.to_primitive(), "instance_uuids": ["i-1"]},
            id="run_instance",
        ),
        pytest.param(
            lambda t: rpc.SchedulerClient(t).resize(CTXT, "i-1", "h0", SPEC.flavor, SPEC),
            "resize",
            {
                "instance_uuid": "i-1",
                "source_host": "h0",
                "new_flavor": SPEC.flavor.to_primitive(),
                "request_spec": SPEC.to_primitive(),
            },
            id="resize",
        ),
        pytest.param(
            lambda t: rpc.ComputeClient(t, lambda host: "sim-1").build_and_run_instance(
                CTXT, "i-1", SPEC, SEL, [SEL]
            ),
            "build_and_run_instance",
            {
                "instance_uuid": "i-1",
                "request_spec": SPEC.to_primitive(),
                "selection": SEL.to_primitive(),
                "host_list": [SEL.to_primitive()],
            },
            id="build_and_run_instance",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).reschedule(CTXT, "i-1", SPEC, "h1", "boom", [SEL]),
            "reschedule",
            {
                "instance_uuid": "i-1",
                "request_spec": SPEC.to_primitive(),
                "failed_host": "h1",
                "reason": "boom",
                "host_list": [SEL.to_primitive()],
                "migration_uuid": None,
            },
            id="reschedule",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).schedule_failed(CTXT, ["i-1"], "r", "d"),
            "schedule_failed",
            {"instance_uuids": ["i-1"], "reason": "r", "details": "d"},
            id="schedule_failed",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).build_succeeded(CTXT, "i-1", "h1", "h1"),
            "build_succeeded",
            {"instance_uuid": "i-1", "host": "h1", "node": "h1"},
            id="build_succeeded",
        ),
    ],
)
def test_casts_send_v1_arguments(
    transport: Any, recorder: Recorder, send: Any, method: str, expected: dict[str, Any]
) -> None:
    send(transport)
    name, ctxt, kwargs = _wait(recorder)
    assert (name, kwargs) == (method, expected)
    assert ctxt.request_id == "req-abc"


def compute(t: Any) -> rpc.ComputeClient:
    return rpc.ComputeClient(t, lambda host: "sim-1")


@pytest.mark.parametrize(
    "send, method, expected",
    [
        pytest.param(
            lambda t: compute(t).prep_resize(CTXT, "i-1", "m-1", SPEC.flavor, SPEC, SEL, [SEL]),
            "prep_resize",
            {
                "instance_uuid": "i-1",
                "migration_uuid": "m-1",
                "new_flavor": SPEC.flavor.to_primitive(),
                "request_spec": SPEC.to_primitive(),
                "selection": SEL.to_primitive(),
                "host_list": [SEL.to_primitive()],
            },
            id="prep_resize",
        ),
        pytest.param(
            lambda t: compute(t).resize_instance(CTXT, "h0", "i-1", "m-1", "h1", "n1"),
            "resize_instance",
            {
                "instance_uuid": "i-1",
                "migration_uuid": "m-1",
                "dest_host": "h1",
                "dest_node": "n1",
            },
            id="resize_instance",
        ),
        pytest.param(
            lambda t: compute(t).finish_resize(CTXT, "h1", "n1", "i-1", "m-1"),
            "finish_resize",
            {
                "instance_uuid": "i-1",
                "migration_uuid": "m-1",
                "dest_host": "h1",
                "dest_node": "n1",
            },
            id="finish_resize",
        ),
        pytest.param(
            lambda t: compute(t).confirm_resize(CTXT, "h0", "i-1", "m-1"),
            "confirm_resize",
            {"instance_uuid": "i-1", "migration_uuid": "m-1"},
            id="confirm_resize",
        ),
        pytest.param(
            lambda t: compute(t).revert_resize(CTXT, "h1", "i-1", "m-1"),
            "revert_resize",
            {"instance_uuid": "i-1", "migration_uuid": "m-1"},
            id="revert_resize",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).reschedule(
                CTXT, "i-1", SPEC, "h1", "boom", [], migration_uuid="m-1"
            ),
            "reschedule",
            {
                "instance_uuid": "i-1",
                "request_spec": SPEC.to_primitive(),
                "failed_host": "h1",
                "reason": "boom",
                "host_list": [],
                "migration_uuid": "m-1",
            },
            id="reschedule-of-a-resize",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).resize_result(
                CTXT, "i-1", "m-1", None, False, "r", "d"
            ),
            "resize_result",
            {
                "instance_uuid": "i-1",
                "migration_uuid": "m-1",
                "host": None,
                "success": False,
                "reason": "r",
                "details": "d",
            },
            id="resize_result",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).resize_confirmed(CTXT, "i-1", "m-1"),
            "resize_confirmed",
            {"instance_uuid": "i-1", "migration_uuid": "m-1"},
            id="resize_confirmed",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).resize_reverted(CTXT, "i-1", "m-1"),
            "resize_reverted",
            {"instance_uuid": "i-1", "migration_uuid": "m-1"},
            id="resize_reverted",
        ),
        # The delete's casts (1.2).
        pytest.param(
            lambda t: rpc.ComputeClient(t, lambda host: "sim-1").terminate_instance(
                CTXT, "h1", "i-1"
            ),
            "terminate_instance",
            {"instance_uuid": "i-1", "host": "h1"},
            id="terminate_instance",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).instance_terminated(CTXT, "i-1", "h1"),
            "instance_terminated",
            {"instance_uuid": "i-1", "host": "h1"},
            id="instance_terminated",
        ),
        pytest.param(
            lambda t: compute(t).shelve_offload_instance(CTXT, "h1", "i-1"),
            "shelve_offload_instance",
            {"instance_uuid": "i-1", "host": "h1"},
            id="shelve_offload_instance",
        ),
        pytest.param(
            lambda t: rpc.ConductorClient(t).instance_shelved(CTXT, "i-1", "h1"),
            "instance_shelved",
            {"instance_uuid": "i-1", "host": "h1"},
            id="instance_shelved",
        ),
    ],
)
def test_resize_and_delete_casts_send_their_arguments(
    transport: Any, recorder: Recorder, send: Any, method: str, expected: dict[str, Any]
) -> None:
    send(transport)
    name, ctxt, kwargs = _wait(recorder)
    assert (name, kwargs) == (method, expected)
    assert ctxt.request_id == "req-abc"


@pytest.mark.parametrize(
    "client, version",
    [
        # The scheduler client's newest version; each method sends its own (below).
        pytest.param(rpc.SchedulerClient, "1.4", id="scheduler"),
        pytest.param(rpc.ComputeClient, "1.9", id="compute"),
        pytest.param(rpc.ConductorClient, "1.6", id="conductor"),
    ],
)
def test_each_client_pins_its_version(client: type, version: str) -> None:
    assert client.VERSION == version  # type: ignore[attr-defined]


def test_typed_errors_cross_the_boundary_whole(transport: Any, recorder: Recorder) -> None:
    client = rpc.SchedulerClient(transport)
    recorder.raise_next = NoValidHost(
        details="0/3 hosts available: 3 insufficient VCPU", reasons={"insufficient VCPU": 3}
    )
    with pytest.raises(NoValidHost) as err:
        client.select_destinations(CTXT, SPEC, ["i-1"])
    assert err.value.details == "0/3 hosts available: 3 insufficient VCPU"
    assert err.value.reasons == {"insufficient VCPU": 3}
    recorder.raise_next = InvalidRequest(reason="flavor.vcpus must be an integer")
    with pytest.raises(InvalidRequest, match="flavor.vcpus must be an integer"):
        client.select_destinations(CTXT, SPEC, ["i-1"])


def test_explain_sends_v1_1_arguments_and_returns_the_typed_report(
    transport: Any, recorder: Recorder
) -> None:
    report = rpc.SchedulerClient(transport).explain(ADMIN, SPEC)
    name, ctxt, kwargs = _wait(recorder)
    assert (name, kwargs) == ("explain", {"request_spec": SPEC.to_primitive()})
    assert ctxt.is_admin is True and ctxt.request_id == "req-adm"
    assert report == REPORT


@pytest.mark.parametrize(
    "method, version",
    [
        pytest.param("select_destinations", "1.0", id="select_destinations"),
        pytest.param("run_instance", "1.0", id="run_instance"),
        pytest.param("resize", "1.0", id="resize"),
        pytest.param("explain", "1.1", id="explain"),
        pytest.param("run_filter", "1.4", id="run_filter"),
    ],
)
def test_each_method_pins_the_version_that_introduced_it(method: str, version: str) -> None:
    assert rpc.SchedulerClient.SENDS[method] == version
    assert rpc.SchedulerClient.VERSION == "1.4"


def test_explain_with_uuids_and_all_hosts_sends_them(transport: Any, recorder: Recorder) -> None:
    rpc.SchedulerClient(transport).explain(ADMIN, SPEC, instance_uuids=["i-1"], all_hosts=True)
    name, ctxt, kwargs = _wait(recorder)
    assert (name, kwargs) == (
        "explain",
        {"request_spec": SPEC.to_primitive(), "instance_uuids": ["i-1"], "all_hosts": True},
    )
    assert ctxt.request_id == "req-adm"


def test_run_filter_sends_the_name_and_returns_the_typed_run(
    transport: Any, recorder: Recorder
) -> None:
    run = rpc.SchedulerClient(transport).run_filter(ADMIN, SPEC, "ComputeFilter")
    name, _, kwargs = _wait(recorder)
    assert (name, kwargs) == (
        "run_filter",
        {"request_spec": SPEC.to_primitive(), "filter_name": "ComputeFilter"},
    )
    assert run == FILTER_RUN


@pytest.mark.usefixtures("servers")  # the 1.2 worker must be serving
@pytest.mark.parametrize(
    "send",
    [
        pytest.param(lambda c: c.explain(ADMIN, SPEC, instance_uuids=["i-1"]), id="uuids"),
        pytest.param(lambda c: c.explain(ADMIN, SPEC, all_hosts=True), id="all-hosts"),
        pytest.param(lambda c: c.run_filter(ADMIN, SPEC, "ComputeFilter"), id="run_filter"),
    ],
)
def test_what_1_4_added_is_sent_at_1_4_so_an_older_worker_refuses_it(
    transport: Any, send: Any
) -> None:
    with pytest.raises(oslo_messaging.UnsupportedVersion) as err:
        send(rpc.SchedulerClient(transport, topic=V1_2_TOPIC, timeout=5))
    assert err.value.version == "1.4"


@pytest.mark.usefixtures("servers")  # the 1.2 worker must be serving
def test_a_1_2_worker_still_serves_a_plain_explain(transport: Any) -> None:
    assert rpc.SchedulerClient(transport, topic=V1_2_TOPIC, timeout=5).explain(ADMIN, SPEC) == (
        REPORT
    )


FORCED = SPEC.replace(force_hosts=("h1",))


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(
            lambda c: c.select_destinations(ADMIN, FORCED, ["i-1"]), id="select_destinations"
        ),
        pytest.param(lambda c: c.explain(ADMIN, FORCED), id="explain"),
    ],
)
def test_a_forced_spec_is_sent_at_1_2_so_an_older_worker_refuses_it(
    transport: Any, send: Any
) -> None:
    """A 1.1 worker would refuse the unknown field anyway; a 1.0 one must not
    even be asked (it could not say why)."""
    old = rpc.SchedulerClient(transport, topic=OLD_TOPIC, timeout=5)
    with pytest.raises(oslo_messaging.UnsupportedVersion) as err:
        send(old)
    assert err.value.version == "1.2"


def test_a_forced_spec_reaches_a_current_worker_whole(transport: Any, recorder: Recorder) -> None:
    rpc.SchedulerClient(transport).run_instance(ADMIN, FORCED, ["i-1"])
    name, ctxt, kwargs = _wait(recorder)
    assert kwargs["request_spec"]["force_hosts"] == ["h1"]
    assert RequestSpec.from_primitive(kwargs["request_spec"]) == FORCED


@pytest.mark.usefixtures("servers")  # the 1.0 worker must be serving
def test_a_1_0_worker_still_serves_a_1_1_client_except_explain(transport: Any) -> None:
    client = rpc.SchedulerClient(transport, topic=OLD_TOPIC, timeout=5)
    assert client.select_destinations(CTXT, SPEC, ["i-1"]) == [[ZONED.without_zone()]]
    with pytest.raises(oslo_messaging.UnsupportedVersion):
        client.explain(ADMIN, SPEC)


def test_forbidden_crosses_the_boundary_typed(transport: Any, recorder: Recorder) -> None:
    recorder.raise_next = Forbidden(reason="explain requires an admin context")
    with pytest.raises(Forbidden, match="explain requires an admin context"):
        rpc.SchedulerClient(transport).explain(CTXT, SPEC)


@pytest.mark.parametrize(
    "make, send, version, zones",
    [
        pytest.param(
            compute,
            lambda c: c.build_and_run_instance(CTXT, "i-1", SPEC, SEL, [SEL]),
            "1.1",
            [],
            id="build-without-zones",
        ),
        pytest.param(
            compute,
            lambda c: c.build_and_run_instance(CTXT, "i-1", SPEC, SEL, [ZONED]),
            "1.2",
            ["east"],
            id="build-with-a-zoned-alternate",
        ),
        pytest.param(
            compute,
            lambda c: c.prep_resize(CTXT, "i-1", "m-1", SPEC.flavor, SPEC, ZONED, []),
            "1.2",
            ["east"],
            id="prep-resize-zoned",
        ),
        pytest.param(
            compute,
            lambda c: c.confirm_resize(CTXT, "h0", "i-1", "m-1"),
            "1.1",
            [],
            id="other-compute-casts-unchanged",
        ),
        pytest.param(
            rpc.ConductorClient,
            lambda c: c.build_succeeded(CTXT, "i-1", "h1", "h1"),
            "1.1",
            [],
            id="built-without-zone",
        ),
        pytest.param(
            rpc.ConductorClient,
            lambda c: c.build_succeeded(CTXT, "i-1", "h1", "h1", "east"),
            "1.2",
            ["east"],
            id="built-in-a-zone",
        ),
        pytest.param(
            rpc.ConductorClient,
            lambda c: c.reschedule(CTXT, "i-1", SPEC, "h1", "boom", [ZONED]),
            "1.2",
            ["east"],
            id="reschedule-with-zoned-alternates",
        ),
        pytest.param(
            rpc.ConductorClient,
            lambda c: c.resize_result(CTXT, "i-1", "m-1", "h2", True, availability_zone="east"),
            "1.2",
            ["east"],
            id="resized-in-a-zone",
        ),
        pytest.param(
            rpc.ConductorClient,
            lambda c: c.resize_result(CTXT, "i-1", "m-1", "h2", True),
            "1.1",
            [],
            id="resized-without-zone",
        ),
        pytest.param(
            rpc.ConductorClient,
            lambda c: c.schedule_failed(CTXT, ["i-1"], "r", "d"),
            "1.1",
            [],
            id="other-conductor-casts-unchanged",
        ),
    ],
)
def test_a_cast_carrying_a_zone_is_sent_at_1_2_else_as_before(
    transport: Any, make: Any, send: Any, version: str, zones: list[str]
) -> None:
    """So a compute or conductor older than 1.2 refuses it by its version
    rather than by the field; a message with no zone reads as it always did."""
    client = make(transport)
    spy = spied(client)
    send(client)
    [(sent_at, _, kwargs)] = spy.sent
    assert sent_at == version
    carried = [
        s["availability_zone"]
        for s in [kwargs.get("selection") or {}, *kwargs.get("host_list", [])]
        if "availability_zone" in s
    ]
    if "availability_zone" in kwargs:
        carried.append(kwargs["availability_zone"])
    assert carried == zones


def test_a_request_s_builds_are_cast_at_1_9_once_per_compute_process(transport: Any) -> None:
    """The spec once per cast, each build with its Selection and alternates,
    grouped by the process that serves its host; an instance with no
    Selection (deleted meanwhile) is in none."""
    servers = {"h1": "sim-1", "h2": "sim-1", "h3": "sim-2"}
    client = rpc.ComputeClient(transport, servers.__getitem__)
    spy = spied(client)

    def on(host: str) -> Selection:
        return dataclasses.replace(SEL, host=host, node=host)

    sent = client.build_and_run_instances(
        CTXT,
        SPEC.replace(num_instances=4),
        [("i-1", [on("h1"), on("h3")]), ("i-2", [on("h3")]), ("i-3", []), ("i-4", [on("h2")])],
    )

    assert sent == 2 and spy.servers == ["sim-1", "sim-2"]
    assert [(v, m) for v, m, _ in spy.sent] == [("1.9", "build_and_run_instances")] * 2
    single = SPEC.replace(num_instances=1).to_primitive()
    assert [kw for _, _, kw in spy.sent] == [
        {
            "request_spec": single,
            "builds": [
                {
                    "instance_uuid": "i-1",
                    "selection": on("h1").to_primitive(),
                    "host_list": [on("h3").to_primitive()],
                },
                {"instance_uuid": "i-4", "selection": on("h2").to_primitive(), "host_list": []},
            ],
        },
        {
            "request_spec": single,
            "builds": [
                {"instance_uuid": "i-2", "selection": on("h3").to_primitive(), "host_list": []}
            ],
        },
    ]


def test_the_delete_casts_are_sent_at_1_3_alone(transport: Any) -> None:
    """So an older compute or conductor still serves every other cast (and
    refuses a delete's, by its version, rather than taking it for another)."""
    client = compute(transport)
    spy = spied(client)
    client.terminate_instance(CTXT, "h0", "i-1")
    conductor = rpc.ConductorClient(transport)
    conductor_spy = spied(conductor)
    conductor.instance_terminated(CTXT, "i-1", "h0")
    assert [(v, m) for v, m, _ in spy.sent] == [("1.3", "terminate_instance")]
    assert [(v, m) for v, m, _ in conductor_spy.sent] == [("1.3", "instance_terminated")]


def test_the_shelve_casts_are_sent_at_1_4_alone(transport: Any) -> None:
    """Likewise: an older compute or conductor refuses them by their version."""
    client = compute(transport)
    spy = spied(client)
    client.shelve_offload_instance(CTXT, "h0", "i-1")
    conductor = rpc.ConductorClient(transport)
    conductor_spy = spied(conductor)
    conductor.instance_shelved(CTXT, "i-1", "h0")
    assert [(v, m) for v, m, _ in spy.sent] == [("1.4", "shelve_offload_instance")]
    assert [(v, m) for v, m, _ in conductor_spy.sent] == [("1.4", "instance_shelved")]


def test_finish_revert_resize_is_sent_at_1_7_alone_to_the_source(transport: Any) -> None:
    client = compute(transport)
    spy = spied(client)
    client.finish_revert_resize(CTXT, "h0", "i-1", "m-1")
    assert [(v, m, kw) for v, m, kw in spy.sent] == [
        (
            "1.7",
            "finish_revert_resize",
            {"instance_uuid": "i-1", "migration_uuid": "m-1", "source_host": "h0"},
        )
    ]
    assert rpc.ComputeClient.TERMINATE_VERSION == rpc.ConductorClient.TERMINATED_VERSION == "1.3"


def _raises_inside_a_handler(error: Exception) -> None:
    try:
        {}["missing"]
    except KeyError:
        raise error  # noqa: B904 - chained on purpose: the cause must not travel either


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(InvalidRequest(reason="num_instances must be at most 1000"), id="invalid"),
        pytest.param(Forbidden(reason="explain is admin only"), id="forbidden"),
        pytest.param(NoValidHost(), id="no-valid-host"),
        pytest.param(SchedulerUnavailable(), id="unavailable"),
    ],
)
def test_an_expected_error_is_serialized_without_traceback_and_rebuilt_typed(
    error: Exception,
) -> None:
    from oslo_messaging._drivers import common as rpc_common
    from oslo_messaging.rpc.dispatcher import ExpectedException

    @rpc.expected_exceptions(type(error))
    def method() -> None:
        _raises_inside_a_handler(error)

    with pytest.raises(ExpectedException) as wrapped:
        method()
    wire = rpc_common.serialize_remote_exception(wrapped.value.exc_info)
    for text in ("Traceback", ".py", "line ", "KeyError"):
        assert text not in wire, wire
    rebuilt = rpc_common.deserialize_remote_exception(wire, rpc.ALLOWED_EXMODS)
    assert isinstance(rebuilt, type(error))
    assert rebuilt.message == error.message  # type: ignore[attr-defined]


def test_an_unexpected_error_passes_the_decorator_as_it_is() -> None:
    @rpc.expected_exceptions(InvalidRequest)
    def method() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug") as raised:
        method()
    assert raised.value.__traceback__ is not None  # the server logs it whole


def test_a_server_made_here_stops_within_the_idle_poll(
    transport: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # oslo.messaging's rabbit listener lets an idle wait grow to 5 s, and its
    # stop() waits for that wait to end: every server made here caps it.
    from oslo_messaging._drivers import amqpdriver

    monkeypatch.setattr(amqpdriver, "ACK_REQUEUE_EVERY_SECONDS_MAX", 5.0)
    rpc.get_server(transport, "prompt", "host", [])
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX == rpc.transport.IDLE_POLL < 1
    rpc.transport.prompt_stop(10.0)  # never raised again
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX == rpc.transport.IDLE_POLL
