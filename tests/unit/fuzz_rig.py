"""The rig of the RPC API's property-based tests (``test_fuzz_rpc*.py``): what
hypothesis draws, through a real RPC server over oslo.messaging's in-process
``fake://`` transport, into the worker's endpoint and engine on the
in-memory store. The properties are cut into two modules so that the two
test workers share them (each module runs on one worker, with a rig of its
own).

Every case gets a clear error (InvalidRequest, Forbidden, NoValidHost: typed,
with their own messages) or a correct decision (the primaries claimed, of
exactly the amounts asked, on hosts that meet the request's hard
conditions); nothing else ever comes back, oslo.messaging never logs an
exception (no endpoint crashed), a refused request leaves no claim behind,
and after every case each provider's usage is the sum of its allocations and
within its capacity. At least :data:`CASES` cases in all (10,000 a run),
counted per module and printed; ``SCHEDULER_FUZZ_SCALE`` scales them for a
quick run.

The fake driver polls its queues every 50 ms when they are empty; the
rig (:func:`running_rig`) shortens that pause, so a call costs about a
millisecond and the cases run one after another.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import types
import uuid as uuidlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import oslo_messaging
import pytest
from hypothesis import HealthCheck, settings
from oslo_messaging._drivers import impl_fake

from scheduler import conf as conf_mod
from scheduler import rpc
from scheduler.engine.settings import PciAlias
from scheduler.exceptions import Forbidden, InvalidRequest, NoValidHost
from scheduler.manager import SchedulerEndpoint
from scheduler.notifications import EventPayload
from scheduler.notifier import Notifier
from scheduler.objects import RequestSpec, Selection
from scheduler.store import MemoryStore
from tests import strategies as fuzz
from tests.unit.factories import aggregate, az, child, engine, host, populate
from tests.unit.notifying import legacy_checked

SCALE = float(os.environ.get("SCHEDULER_FUZZ_SCALE", "1"))
#: Cases per property; 10,000 in all at scale 1.
CASES = {
    name: max(1, int(n * SCALE))
    for name, n in {
        "select_destinations": 4500,
        "run_instance": 3000,
        "explain": 1000,
        "garbage": 1500,
    }.items()
}
TRIED: Counter[str] = Counter()

AZ1, AZ2 = az("az1-agg", "az1"), az("az2-agg", "az2")
SSD = aggregate("ssd-agg", ssd="true")
TENANT = aggregate("tenant-agg", filter_tenant_id="project-x")
X86_KVM = {
    "supported_instances": [["x86_64", "kvm", "hvm"]],
    "hypervisor_version": 6002000,
    "hypervisor_type": "kvm",
    "cpu_arch": "x86_64",
    "vcpus": 16,
    "pci_devices": [{"vendor_id": "8086", "product_id": "154d", "count": 2}],
    "numa_cells": [{"cpus": 8, "memory_mb": 16384}, {"cpus": 8, "memory_mb": 16384}],
}
ROOT_TRAITS = {
    "trait-a": {"HW_CPU_X86_AVX2", "CUSTOM_FAST"},
    "trait-b": {"HW_CPU_X86_AVX2", "COMPUTE_IMAGE_TYPE_QCOW2"},
}
ZONE_HOSTS = {"az1": {"h0", "h1"}, "az2": {"h2"}}
NEVER = {"off", "gone"}  # disabled, down
HOSTS = [
    host("h0", aggregates=[AZ1.uuid]),
    host("h1", aggregates=[AZ1.uuid]),
    host("h2", aggregates=[AZ2.uuid]),
    host("h3"),
    host("trait-a", traits=ROOT_TRAITS["trait-a"], aggregates=[SSD.uuid]),
    host("trait-b", traits=ROOT_TRAITS["trait-b"]),
    host("caps", capabilities=X86_KVM),
    host("off", disabled=True),
    host("gone", up=False),
    host("gpu", children=[child("gpu-pool", inventory={"VGPU": 4})]),
    host("tiny", vcpus=2, ram=2048, disk=20),
    host("tenant", aggregates=[TENANT.uuid]),
]
assert {h.provider.name for h in HOSTS} == set(fuzz.CLOUD_HOSTS)

CONTEXTS = {
    "member": lambda: rpc.RequestContext(user_id="u", project_id="p", roles=["member"]),
    "admin": lambda: rpc.RequestContext.admin(user_id="ops", project_id="admin"),
    "role-only": lambda: rpc.RequestContext(user_id="u", project_id="p", roles=["admin"]),
    "truthy-admin": lambda: rpc.RequestContext(user_id="u", project_id="p", is_admin=1),
}
FUZZ = settings(
    deadline=None,
    database=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


class RecordingNotifier(Notifier):
    """Keeps what was published, and says when a request's ``.end`` went out."""

    def __init__(self) -> None:
        super().__init__(None, "fuzz")
        self.sent: list[tuple[str, str, dict[str, Any], str | None]] = []
        self._ended: dict[str, threading.Event] = defaultdict(threading.Event)
        self._lock = threading.Lock()

    def _emit(self, priority: str, ctxt: Any, event_type: str, payload: EventPayload) -> None:
        request_id = getattr(ctxt, "request_id", None)
        self.sent.append(
            (priority, event_type, legacy_checked(priority, event_type, payload), request_id)
        )
        if event_type.endswith(".end"):
            with self._lock:
                self._ended[request_id].set()

    def ended(self, request_id: str) -> threading.Event:
        with self._lock:
            return self._ended[request_id]


class Recorder:
    """Stands in for compute and conductor: records each cast."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda ctxt, *args: self.calls.append((name, args))


class OsloErrors(logging.Handler):
    """Counts what oslo.messaging logs at ERROR: an endpoint that raised what it
    does not declare (a crash, as far as its caller can tell)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Rig:
    store: MemoryStore
    endpoint: SchedulerEndpoint
    client: rpc.SchedulerClient
    notifier: RecordingNotifier
    compute: Recorder
    conductor: Recorder
    oslo_errors: OsloErrors
    outcomes: Counter[str] = field(default_factory=Counter)

    def reset(self) -> None:
        """Back to an empty cloud between cases: every claim released."""
        for consumer in self.store.list_consumers():
            self.store.release(consumer.uuid)
        self.compute.calls.clear()
        self.conductor.calls.clear()


@contextmanager
def running_rig() -> Iterator[Rig]:
    """A worker's endpoint served over ``fake://`` on a cloud of :data:`HOSTS`,
    with the fake driver's idle pause cut short (a test module's rig)."""
    real_sleep = time.sleep
    patched = types.SimpleNamespace(
        time=time.time, sleep=lambda pause: real_sleep(min(pause, 0.0005))
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(impl_fake, "time", patched)
        yield from _serve()


def _serve() -> Iterator[Rig]:
    conf_mod.set_defaults()
    conf_mod.CONF([], project="scheduler", default_config_files=[])
    transport = rpc.get_transport(conf_mod.CONF, url=f"fake://{uuidlib.uuid4().hex}")
    store = MemoryStore()
    populate(store, HOSTS, [AZ1, AZ2, SSD, TENANT])
    notifier, compute, conductor = RecordingNotifier(), Recorder(), Recorder()
    eng = engine(store, pci_aliases={"nic": PciAlias("nic", "8086", "154d")})  # type: ignore[arg-type]
    endpoint = SchedulerEndpoint(eng, compute, conductor, notifier)  # type: ignore[arg-type]
    server = rpc.get_server(transport, rpc.SCHEDULER_TOPIC, "fuzz-worker", [endpoint])
    errors = OsloErrors()
    logging.getLogger("oslo_messaging").addHandler(errors)
    server.start()
    r = Rig(
        store,
        endpoint,
        rpc.SchedulerClient(transport, timeout=10),
        notifier,
        compute,
        conductor,
        errors,
    )
    yield r
    server.stop()
    server.wait()
    transport.cleanup()
    logging.getLogger("oslo_messaging").removeHandler(errors)
    print(
        f"\nfuzz cases tried: {dict(TRIED)} (total {sum(TRIED.values())}); "
        f"outcomes: {dict(r.outcomes)}"
    )


# --- what must hold after every case ---------------------------------------------------


def assert_accounting(store: MemoryStore) -> None:
    summed: dict[str, Counter[str]] = defaultdict(Counter)
    for consumer in store.list_consumers():
        for rp, amounts in consumer.allocations.items():
            summed[rp].update(amounts)
    for provider in store.list_providers():
        assert dict(provider.usages) == {rc: n for rc, n in summed[provider.uuid].items() if n}
        for rc, inv in provider.inventories.items():
            assert provider.usages.get(rc, 0) <= inv.capacity, (provider.name, rc)


def readable_uuids(raw: Any) -> list[str]:
    if not isinstance(raw, list):
        return []
    out = []
    for value in raw:
        try:
            out.append(str(uuidlib.UUID(value)))
        except (TypeError, ValueError, AttributeError):
            continue
    return out


def assert_nothing_claimed(rig: Rig, raw_uuids: Any) -> None:
    for uuid in readable_uuids(raw_uuids):
        assert rig.store.get_consumer(uuid) is None, "a refused request left a claim"


def parsed(data: Any) -> RequestSpec | None:
    try:
        return RequestSpec.from_primitive(data)
    except InvalidRequest:
        return None


def assert_clear_refusal(exc: BaseException, ctxt_kind: str, data: Any) -> str:
    """The error is one of the typed ones, with its own message; its kind."""
    if isinstance(exc, InvalidRequest):
        assert exc.message.startswith("invalid request: ") and len(exc.message) > 17
        return "invalid"
    if isinstance(exc, Forbidden):
        assert exc.message.startswith("forbidden: ")
        spec = parsed(data)
        assert ctxt_kind != "admin" and spec is not None and spec.has_destination, (
            "only a valid request from a non-admin that steers it is refused as forbidden"
        )
        return "forbidden"
    if isinstance(exc, NoValidHost):
        assert str(exc) == NoValidHost.USER_MESSAGE
        assert "hosts available" in exc.details
        return "no_valid_host"
    raise AssertionError(f"not a clear error: {type(exc).__name__}: {exc}")


def assert_correct_decision(
    rig: Rig, ctxt_kind: str, data: Any, uuids: list[str], selections: list[list[Selection]]
) -> None:
    spec = parsed(data)
    assert spec is not None, "a request the spec parser refuses was served"
    assert ctxt_kind == "admin" or not spec.has_destination
    assert len(selections) == spec.num_instances == len(uuids)
    wanted = {rc: n for rc, n in spec.resource_request.resources.items() if n > 0}
    names = {p.uuid: p.name for p in rig.store.list_providers()}
    for uuid, (primary, *alternates) in zip(uuids, selections, strict=True):
        held = rig.store.get_consumer(uuid)
        assert held is not None, "the primary is claimed"
        assert {rp: dict(a) for rp, a in held.allocations.items()} == {
            rp: dict(a) for rp, a in primary.allocation_request.allocations.items()
        }
        taken: Counter[str] = Counter()
        for amounts in held.allocations.values():
            taken.update(amounts)
        assert dict(taken) == wanted, "exactly the amounts asked"
        assert primary.host not in NEVER
        assert primary.host.casefold() not in {h.casefold() for h in spec.ignore_hosts}
        if spec.force_hosts:
            assert primary.host.casefold() in {h.casefold() for h in spec.force_hosts}
        if spec.force_nodes:
            assert primary.node in spec.force_nodes
        if spec.requested_destination is not None:
            assert primary.host == spec.requested_destination.host
        zone = spec.availability_zone
        if zone is not None:
            if zone in ZONE_HOSTS:
                assert primary.host in ZONE_HOSTS[zone]
            else:
                assert zone == "nova" and not any(primary.host in h for h in ZONE_HOSTS.values())
        root_traits = ROOT_TRAITS.get(primary.host, set())
        for group in spec.resource_request.groups:
            assert group.required_traits <= root_traits, "a required trait is there"
            if set(names[rp] for rp in held.allocations) == {primary.host}:
                assert not group.forbidden_traits & root_traits
        assert len(alternates) <= 2
        assert primary.host not in {a.host for a in alternates}
    if spec.group is not None and spec.group.is_strict:
        members = rig.store.group_hosts(spec.group.uuid)
        if spec.group.policy == "affinity":
            assert len(members) <= 1
        else:
            assert max(members.values()) <= spec.group.max_server_per_host


def context(kind: str) -> rpc.RequestContext:
    return CONTEXTS[kind]()


def select_case(rig: Rig, kind: str, data: Any, raw_uuids: Any, alternates: Any, tag: str) -> None:
    TRIED[tag] += 1
    rig.reset()
    try:
        raw = rig.client.call_raw(
            context(kind),
            "select_destinations",
            request_spec=data,
            instance_uuids=raw_uuids,
            return_alternates=alternates,
        )
    except (InvalidRequest, Forbidden, NoValidHost) as exc:
        rig.outcomes[assert_clear_refusal(exc, kind, data)] += 1
        assert_nothing_claimed(rig, raw_uuids)
    except oslo_messaging.MessagingTimeout:
        raise AssertionError("no answer: the worker did not serve the call") from None
    else:
        assert alternates is True or alternates is False
        selections = [[Selection.from_primitive(s) for s in per] for per in raw]
        assert_correct_decision(rig, kind, data, list(raw_uuids), selections)
        rig.outcomes["placed"] += 1
    assert_accounting(rig.store)
    assert rig.oslo_errors.records == [], "oslo.messaging logged an endpoint's crash"


def assert_still_serves(rig: Rig, properties: Iterable[str]) -> None:
    """The worker serves a plain request after every case; once every one of
    ``properties`` ran (the whole module, not one test picked with -k), each
    ran at least its :data:`CASES`."""
    rig.reset()
    spec = RequestSpec.from_primitive(
        {"flavor": {"name": "f", "vcpus": 1, "memory_mb": 512}, "project_id": "p", "user_id": "u"}
    )
    uuid = str(uuidlib.uuid4())
    [[primary, *_]] = rig.client.select_destinations(context("member"), spec, [uuid])
    assert rig.store.get_consumer(uuid) is not None and primary.host not in NEVER
    if set(properties) <= set(TRIED):
        assert all(TRIED[p] >= CASES[p] for p in properties)


#: The properties of each module add up to every case of a run.
assert sum(CASES.values()) >= 10000 * SCALE
