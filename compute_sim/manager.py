"""Simulated compute hosts: many in one process, each a real resource provider.

Each host registers as a root resource provider with VCPU, MEMORY_MB and
DISK_GB inventory (and, if asked, traits, aggregates with metadata, and GPU
child providers with VGPU inventory and traits of their own), heartbeats,
and is reached over RPC on topic ``compute``
through the one server name this process listens on (its service records
say so). A build "takes" ``build_time`` seconds and fails with probability
``fail_rate`` (or always, on the hosts named in ``fail_hosts``). A failed
build releases its claim and hands the instance back to the conductor with
the remaining alternates; a success is reported to the conductor.

Builds are idempotent per instance uuid, host and request id (a re-driven
or rescheduled build keeps its request's id; an unshelve is a new request):
a repeated cast for a build still under way is ignored, one for a build that succeeded reports the
success again (the first report may have been lost), and one after a failure
is a new attempt. A failed build releases the instance's claim only if that
claim is on this host: a stale attempt never drops the live one's.

A host builds only while the store holds the instance's claim on that very
host (:func:`conductor_stub.records.holds_on`, the conductor's reading too)
and the instance's record is BUILDING, checked when the build starts and
again before its VM starts (or its failure is handed back): a duplicated
cast after the attempt failed and went elsewhere, a build the conductor gave
up (ERROR after its timeout, claim released) while the host was frozen, a
build of an instance being deleted or with no record is dropped
(``build_without_claim_dropped``, with the stage and why): no VM, nothing
reported, nothing released. An evacuation's rebuild is guarded the same way
(the record REBUILDING under that migration).

A resize walks prep -> resize -> finish as in Nova: ``prep_resize`` on the
destination (which fails on the hosts named in ``fail_resize_hosts``),
``resize_instance`` on the source, ``finish_resize`` on the destination,
then ``resize_result`` to the conductor. The source is the host of the
migration consumer's allocation. A failed prep releases the destination's
claim *before* handing the resize back for a retry on the alternates.
``confirm_resize`` (on the source) drops the migration's allocation;
``revert_resize`` (on the destination) drops the instance's and hands the
migration's back to it, in one atomic step, stops the VM there and asks the
source (``finish_revert_resize``, in whichever process serves it) to run it
again and tell the conductor. Every step is idempotent per
migration, so the conductor may re-drive any of them. A step that drops or
hands back an allocation goes on only when the instance's record says it is
due here: ``confirm_resize`` and ``revert_resize`` only for a RESIZED
instance whose confirm (revert) the conductor has begun, under the very
migration named, with its source (destination) a host of this process; a
new ``prep_resize`` walk only for a RESIZING instance under that migration.
Anything else (a forged or stale cast naming another instance's migration)
is refused (``forged_resize_step_refused``, with what did not match) and
nothing changes. A live migration's pre-checks likewise start only for a
MIGRATING instance under that migration
(``forged_live_migration_step_refused``).

A live migration walks pre-checks -> migration -> post as in Nova:
``check_can_live_migrate_destination`` on the destination (claimed for the
instance by then), which has the source checked too
(``check_can_live_migrate_source``); either fails with probability
``live_migration_fail_rate`` (or always, on the hosts named in
``live_migration_fail_hosts``), and a failure releases the destination's
claim *before* handing the migration back to the conductor for the next
alternate (``live_migration_precheck_failed``). Past both checks the source
migrates the instance (its VM stops there) and
``post_live_migration_at_destination`` starts it on the destination, which
tells the conductor (``live_migrated``); a source whose migration holds
nothing by then (the conductor gave the migration up and handed the
allocation back) stays put. Every step is idempotent per
migration and destination: a repeat of one under way is ignored, of one
done walks on (or reports) again.

A delete reaches each host that may run the instance or be building it
(``terminate_instance``): the host destroys the VM, if it runs there, and
remembers the instance as terminated (for ``terminated_retention`` seconds,
``[conductor] deleted_retention``, as long as the store fences its claims;
its build memory goes at once), so a build or resize step still in
flight for it, or arriving later (whatever order the casts come in), makes
no VM and reports nothing; then it tells the conductor
(``instance_terminated``), which releases the claims. What runs where is
logged as it changes (``vm_started`` / ``vm_stopped``, with the instance
and the host), so a test can tell what each host runs: a build that
succeeded, a resize finished on its destination (off the source), a revert
back on the source (off the destination).

A shelve reaches the host the instance runs on
(``shelve_offload_instance``): the host destroys the VM and tells the
conductor (``instance_shelved``), which releases the allocation; nothing is
remembered, so an unshelve may build the instance on the same host again.
An evacuation's destination rebuilds the instance (``rebuild_instance``),
failing as a build does (``fail_hosts``, ``fail_rate``: the claim here
released, then the alternates handed back), and reports ``rebuild_result``;
idempotent per migration and host. A process whose heartbeats stopped for
longer than ``service_down_time`` (stopped, or cut off from the store) finds,
before its next heartbeat, the VMs whose instance records no longer place
them on their host (evacuated meanwhile, or deleted) and destroys them
(``evacuated_vm_destroyed``, ``vm_stopped``) instead of running them a
second time; it never reports them.

Every ``[compute] report_interval`` seconds (and once right after
registration) the process reports, in one store write for all its hosts
(:meth:`ComputeSimulator.report_instances`), what each host really runs (the
resource tracker's role; a host that runs nothing reports an empty list):
per VM a :class:`~scheduler.store.RunningInstance` with the amounts its
claim took (the Selection it was built, rebuilt, resized or live-migrated
with, summed over the host's providers), the claim's project and user, the
id of the request that put it there, and the migration while a move
involving this host is under way (a resize's destination until confirmed or
reverted, a live migration's source once checked and its destination, an
evacuation's destination), dropped once the instance's record no longer
names that migration. A revert runs the VM on its source again with the
amounts it had there. A process back from an outage destroys the VMs
evacuated meanwhile before it reports. The reconciler compares the reports with the records
and allocations; for a VM no live record places on its host it casts
``reap_instance`` (RPC 1.8), and the host destroys it (``orphan_vm_reaped``
and ``vm_stopped``) or, with ``running_deleted_instance_action = log``,
only logs it (``orphan_vm_found``); nothing is reported to the conductor.

Each host reports its capabilities once at registration (architecture,
hypervisor type and version, supported instances, NUMA cells, PCI devices
and any other attribute, as ``capabilities`` describes) and its stats
whenever a build or a resize's prep starts or ends: operations in progress
(``num_io_ops``, as Nova counts a resize's prep), the operations started
since the simulator started (``num_io_ops_started``) and, per image property
value, how many of its instances run such an image (counted when a build
succeeds; a resize does not move the count). Reports go to the store only
when they change, never with heartbeats; the count of operations started
makes every report after one a change, so it reaches the workers even when
the operation began and ended within one ``stats_interval``.

Reporting is guarded by provider generations: a write that meets a stale
generation re-reads the provider and decides again from what it now holds
(:meth:`ComputeSimulator._report`), never repeating the write blindly. The
simulator owns the traits it reports; it keeps ``COMPUTE_STATUS_DISABLED``
(the store writes it with the service record) and ``CUSTOM_*`` traits it
does not report (an operator's).
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
import uuid as uuidlib
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import oslo_messaging

from compute_sim import steps
from conductor_stub.records import record_built
from scheduler.engine.capabilities import IO_OPS_STAT, CapabilityReport, image_property_stat
from scheduler.exceptions import GenerationConflict, ProviderExists, StoreError
from scheduler.log import bind_request, get_logger
from scheduler.objects import (
    DISK_GB,
    MEMORY_MB,
    VCPU,
    RequestSpec,
    Selection,
    evacuated_from,
)
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.rpc import ComputeClient, ConductorClient
from scheduler.steps import StepGuard, guarded, holds_on
from scheduler.store import (
    Aggregate,
    InstanceReport,
    InstanceStore,
    Inventory,
    PlacementStore,
    RunningInstance,
    Service,
    ServiceReport,
    ServiceStore,
)

LOG = get_logger(__name__)


class ComputeStore(PlacementStore, ServiceStore, InstanceStore, Protocol):
    """What a compute uses: its providers and the claims on them, its
    service records (registration, reports, heartbeats, build results), and
    the instance records it reads when it comes back from an outage (to
    find the VMs evacuated from it)."""


#: Provider uuids are derived from host names, so a restarted simulator finds
#: its providers again instead of registering duplicates.
PROVIDER_NAMESPACE = uuidlib.UUID("5b1d7a40-2f5e-4c1e-9a57-6f0b6c2d9e11")


# What one host knows of a build it was cast.
BUILD_RUNNING = "running"
BUILD_ACTIVE = "active"
BUILD_FAILED = "failed"
# What the destination knows of a resize: prepping, handed to the source,
# finished (the instance runs here), or failed / abandoned.
STEP_PREP = "prep"
STEP_RESIZING = "resizing"
STEP_FINISHED = "finished"
STEP_FAILED = "failed"
# What a host knows of a live migration (per migration and destination):
# checking (on either side), migrating (the source passed its check), landed
# on the destination, or failed.
LIVE_CHECKING = "checking"
LIVE_MIGRATING = "migrating"
LIVE_LANDED = "landed"
LIVE_FAILED = "failed"
# What ``reap_instance`` does with a VM no live record places on its host
# (``[compute] running_deleted_instance_action``).
REAP = "reap"
LOG_ONLY = "log"
# How a build's success reaches the conductor (``compute-sim --build-results``):
# written to the store by this process, by the conductor's rule, or cast.
RESULTS_IN_STORE = "store"
RESULTS_BY_CAST = "cast"
BUILD_RESULTS = (RESULTS_IN_STORE, RESULTS_BY_CAST)
#: The defaults of ``--build-results`` and ``--stats-interval`` (the demo's
#: too). The class's own defaults are a cast per result and each stats change
#: reported at once: one message or write per step, which unit tests step through.
DEFAULT_BUILD_RESULTS = RESULTS_IN_STORE
DEFAULT_STATS_INTERVAL = 0.1
#: The stat counting the operations this process started on a host (builds,
#: resizes' preps, live migrations' checks): it only grows, so a host's report
#: after an operation started always differs from the one before it.
OPS_STARTED_STAT = "num_io_ops_started"


def provider_uuid(host: str) -> str:
    return str(uuidlib.uuid5(PROVIDER_NAMESPACE, host))


def aggregate_uuid(name: str) -> str:
    return str(uuidlib.uuid5(PROVIDER_NAMESPACE, f"aggregate:{name}"))


def gpu_name(host: str, n: int) -> str:
    """The name of a host's ``n``-th GPU child provider."""
    return f"{host}-gpu{n}"


def running_vm(
    ctxt: Any,
    instance_uuid: str,
    allocations: Mapping[str, Mapping[str, int]],
    project_id: str | None,
    user_id: str | None,
    migration_uuid: str | None = None,
) -> RunningInstance:
    """A VM as its host reports it: the amounts of ``allocations`` summed over
    the host's providers, for ``project_id`` / ``user_id`` (else the request
    context's), under the request's id, and the move it belongs to (None:
    none)."""
    amounts: Counter[str] = Counter()
    for resources in allocations.values():
        amounts.update(resources)
    return RunningInstance(
        uuid=instance_uuid,
        resources=dict(amounts),
        project_id=project_id or getattr(ctxt, "project_id", None),
        user_id=user_id or getattr(ctxt, "user_id", None),
        request_id=getattr(ctxt, "request_id", None),
        migration_uuid=migration_uuid,
    )


@dataclass(frozen=True)
class AggregateSpec:
    """An aggregate every host of the simulator joins, with its metadata.

    Read from ``name`` or ``name:key=value,key=value`` (``--aggregate``).
    """

    name: str
    metadata: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> AggregateSpec:
        name, _, pairs = text.partition(":")
        metadata = {}
        for pair in filter(None, (p.strip() for p in pairs.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"aggregate metadata must be key=value, got {pair!r}")
            metadata[key.strip()] = value.strip()
        if not name.strip():
            raise ValueError(f"an aggregate needs a name: {text!r}")
        return cls(name.strip(), metadata)


@dataclass(frozen=True)
class Topology:
    """Traits, aggregates and child providers of the simulated hosts.

    ``traits`` go on the first ``traits_on`` hosts (None: all of them);
    ``vgpus_per_gpu`` > 0 gives each host ``gpus_per_host`` GPU child
    providers, each with that much VGPU inventory and ``gpu_traits``.
    """

    traits: tuple[str, ...] = ()
    traits_on: int | None = None
    aggregates: tuple[AggregateSpec, ...] = ()
    vgpus_per_gpu: int = 0
    gpus_per_host: int = 1
    gpu_traits: tuple[str, ...] = ("CUSTOM_VGPU",)

    def host_traits(self, position: int) -> frozenset[str]:
        on = self.traits_on is None or position < self.traits_on
        return frozenset(self.traits) if on else frozenset()

    def gpus(self) -> int:
        return self.gpus_per_host if self.vgpus_per_gpu > 0 else 0


@dataclass(frozen=True)
class HostShape:
    """What each simulated host reports."""

    vcpus: int = 16
    memory_mb: int = 65536
    disk_gb: int = 1000
    cpu_allocation_ratio: float = 4.0
    ram_allocation_ratio: float = 1.0
    disk_allocation_ratio: float = 1.0
    reserved_host_memory_mb: int = 512
    reserved_host_disk_gb: int = 0
    reserved_host_cpus: int = 0

    def inventories(self) -> dict[str, Inventory]:
        return {
            VCPU: Inventory(
                total=self.vcpus,
                reserved=self.reserved_host_cpus,
                allocation_ratio=self.cpu_allocation_ratio,
            ),
            MEMORY_MB: Inventory(
                total=self.memory_mb,
                reserved=self.reserved_host_memory_mb,
                allocation_ratio=self.ram_allocation_ratio,
            ),
            DISK_GB: Inventory(
                total=self.disk_gb,
                reserved=self.reserved_host_disk_gb,
                allocation_ratio=self.disk_allocation_ratio,
            ),
        }


class DelayedRunner:
    """Runs callables after a delay on one thread (a build "in progress")."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="compute-sim-builds", daemon=True)
        self._thread.start()

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), fn))
            self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - one bad build must not stop the rest
                LOG.error("simulated_build_crashed", error=repr(exc))


@dataclass(frozen=True)
class LiveMove:
    """One live migration's step as a host was cast it: the instance, its
    migration, the destination's Selection (``chosen``) and what the
    pre-checks carry on with (the request, the alternates after it, the
    source; the post on the destination carries none of them)."""

    instance_uuid: str
    migration_uuid: str
    chosen: Selection
    spec: RequestSpec | None = None
    alternates: list[Selection] = field(default_factory=list)
    source_host: str = ""
    block_migration: bool = False

    @classmethod
    def read(
        cls,
        instance_uuid: str,
        migration_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
        source_host: str,
        block_migration: bool,
    ) -> LiveMove:
        return cls(
            instance_uuid,
            migration_uuid,
            Selection.from_primitive(selection),
            RequestSpec.from_primitive(request_spec),
            [Selection.from_primitive(s) for s in host_list],
            source_host,
            block_migration,
        )

    @property
    def dest(self) -> str:
        return self.chosen.host

    def key(self, side: str) -> tuple[str, str, str]:
        """What a host knows of this migration is kept under, per ``side``."""
        return (self.migration_uuid, self.dest, side)


class ComputeSimulator:
    """The hosts of one simulator process and their RPC endpoint.

    It serves compute RPC 1.8 (``reap_instance`` is the newest method; the
    history is :class:`~scheduler.rpc.ComputeClient`'s).
    """

    target = oslo_messaging.Target(version="1.8")

    def __init__(
        self,
        store: ComputeStore,
        conductor: ConductorClient,
        hosts: Sequence[str],
        rpc_server: str,
        shape: HostShape,
        build_time: float = 0.05,
        fail_rate: float = 0.0,
        fail_hosts: Sequence[str] = (),
        availability_zones: Sequence[str] = (),
        seed: int | None = None,
        compute: ComputeClient | None = None,
        fail_resize_hosts: Sequence[str] = (),
        topology: Topology = Topology(),
        capabilities: CapabilityReport | None = None,
        report_stats: bool = True,
        service_down_time: float = 60.0,
        live_migration_fail_rate: float = 0.0,
        live_migration_fail_hosts: Sequence[str] = (),
        terminated_retention: float = 86400.0,
        running_deleted_instance_action: str = REAP,
        build_results: str = RESULTS_BY_CAST,
        stats_interval: float = 0.0,
    ) -> None:
        if build_results not in BUILD_RESULTS:
            raise ValueError(
                f"build_results must be one of {', '.join(BUILD_RESULTS)}, got {build_results!r}"
            )
        self.build_results = build_results
        self.store = store
        self.conductor = conductor
        self.hosts = list(hosts)
        self._host_set = set(self.hosts)
        self.guard = StepGuard(store, self._host_set)
        self.rpc_server = rpc_server
        self.shape = shape
        self.build_time = build_time
        self.fail_rate = fail_rate
        self.fail_hosts = set(fail_hosts)
        self.availability_zones = list(availability_zones)
        self.topology = topology
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        # instance -> (host, request id) -> BUILD_*: a re-driven or duplicated
        # build shares its request's id; an unshelve is a new request. An
        # instance's entries go when it is deleted or shelved here.
        self._builds: dict[str, dict[tuple[str, str | None], str]] = {}
        # (instance, host) -> the VM that runs there, as the host reports it.
        self._running: dict[tuple[str, str], RunningInstance] = {}
        # migration -> the VM a resize took off its source (a host of this
        # process), run there again by a revert with the amounts it had;
        # forgotten when the resize is confirmed or reverted.
        self._resized_away: dict[str, RunningInstance] = {}
        # Instances a delete reached here: nothing is built or started for them
        # again, for ``terminated_retention`` seconds (as long as the store's
        # fence against their claims lasts), oldest first in _terminated_at.
        self._terminated: set[str] = set()
        self._terminated_at: deque[tuple[float, str]] = deque()
        self.terminated_retention = terminated_retention
        if running_deleted_instance_action not in (REAP, LOG_ONLY):
            raise ValueError(
                f"running_deleted_instance_action must be {REAP} or {LOG_ONLY}, "
                f"got {running_deleted_instance_action!r}"
            )
        self.running_deleted_instance_action = running_deleted_instance_action
        self._failing: set[str] = set()  # hosts whose last build failed
        # Resizes: to cast the walk's next step, and what steps this process has seen.
        self.compute = compute
        self.fail_resize_hosts = set(fail_resize_hosts)
        self._migrations: dict[tuple[str, str], str] = {}  # (migration, dest) -> STEP_*
        # (migration, dest) -> the zone its Selection named, reported when it finishes
        self._resize_zones: dict[tuple[str, str], str | None] = {}
        # (migration, dest) -> the VM a resize's prep will run there once
        # finished (its Selection's amounts); taken when it finishes
        self._resize_vms: dict[tuple[str, str], RunningInstance] = {}
        # Live migrations: (migration, destination, side) -> LIVE_*, side
        # "dest" or "source" (both may be hosts of this process).
        self.live_migration_fail_rate = live_migration_fail_rate
        self.live_migration_fail_hosts = set(live_migration_fail_hosts)
        self._live: dict[tuple[str, str, str], str] = {}
        self._runner = DelayedRunner()
        self.builds_ok = 0
        self.builds_failed = 0
        self.capabilities = capabilities
        self.report_stats = report_stats
        self._report_lock = threading.Lock()  # reports leave in the order they were made
        # Stats changed since the last report are written together, at most
        # ``stats_interval`` seconds late (0: each change at once).
        self.stats_interval = stats_interval
        self._stats_due: set[str] = set()
        self._io_ops: dict[str, int] = dict.fromkeys(self.hosts, 0)
        self._ops_started: dict[str, int] = dict.fromkeys(self.hosts, 0)
        self._image_counts: dict[str, dict[str, int]] = {h: {} for h in self.hosts}
        # A heartbeat later than this after the last one: the hosts were down.
        self.service_down_time = service_down_time
        self._last_beat: float | None = None
        self._last_reported: tuple[int, int] | None = None  # (hosts, VMs) last reported

    # --- registration ---------------------------------------------------------------

    def register(self) -> None:
        """Create (or find again) each host's providers; report inventory,
        traits, zone and aggregates."""
        zone_aggs = {}
        for zone in self.availability_zones:
            agg = Aggregate(
                uuid=aggregate_uuid(zone), name=zone, metadata={"availability_zone": zone}
            )
            self.store.put_aggregate(agg)
            zone_aggs[zone] = agg.uuid
        shared = set()
        for spec in self.topology.aggregates:
            agg = Aggregate(uuid=aggregate_uuid(spec.name), name=spec.name, metadata=spec.metadata)
            self.store.put_aggregate(agg)
            shared.add(agg.uuid)
        inventories = self.shape.inventories()
        gpu_inventory = {"VGPU": Inventory(total=self.topology.vgpus_per_gpu)}
        for i, host in enumerate(self.hosts):
            uuid = provider_uuid(host)
            self._create(uuid, host)
            aggregates = set(shared)
            if self.availability_zones:
                zones = self.availability_zones
                aggregates.add(zone_aggs[zones[i % len(zones)]])
            self._report(uuid, inventories, aggregates, self.topology.host_traits(i))
            for n in range(self.topology.gpus()):
                name = gpu_name(host, n)
                self._create(provider_uuid(name), name, parent_uuid=uuid)
                self._report(
                    provider_uuid(name), gpu_inventory, set(), frozenset(self.topology.gpu_traits)
                )
        # Heartbeat first: the service records fed next carry it, so every
        # worker's view counts the hosts up at once (a record fed with no
        # heartbeat reads as down until the view re-reads heartbeats).
        self.heartbeat()
        self.store.register_services(
            Service(host=h, rpc_server=self.rpc_server, last_seen=time.time()) for h in self.hosts
        )
        capabilities = self.capabilities.to_primitive() if self.capabilities is not None else None
        self.store.report_services(
            ServiceReport(
                h, capabilities=capabilities, stats=self._stats(h) if self.report_stats else None
            )
            for h in self.hosts
        )
        LOG.info("hosts_registered", count=len(self.hosts), rpc_server=self.rpc_server)

    def _create(self, uuid: str, name: str, parent_uuid: str | None = None) -> None:
        try:
            self.store.create_provider(uuid, name, parent_uuid)
        except ProviderExists:
            pass  # a restarted simulator finds its providers again

    @staticmethod
    def traits_to_write(current: frozenset[str], reported: frozenset[str]) -> frozenset[str]:
        """The traits a provider should hold: what this host reports, plus the
        ones it does not own (the status trait, an operator's CUSTOM_* ones)."""
        kept = {
            t
            for t in current
            if t == COMPUTE_STATUS_DISABLED or (t.startswith("CUSTOM_") and t not in reported)
        }
        return frozenset(kept) | reported

    def _report(
        self,
        uuid: str,
        inventories: dict[str, Inventory],
        aggregates: set[str],
        traits: frozenset[str] = frozenset(),
        attempts: int = 5,
    ) -> None:
        """Write inventory, aggregates and traits, guarded by the provider generation.

        Each attempt reads the provider and writes only what differs from
        this host's report, each write on the generation the previous one
        returned. On a conflict (someone else wrote in between: an operator,
        the store disabling the service), re-read and decide again from what
        the store now holds; never a blind repeat.
        """
        for _ in range(attempts):
            provider = self.store.get_provider(uuid)
            generation = provider.generation
            try:
                if dict(provider.inventories) != inventories:
                    generation = self.store.set_inventory(uuid, generation, inventories)
                if set(provider.aggregates) != aggregates:
                    generation = self.store.set_aggregates(uuid, generation, aggregates)
                wanted = self.traits_to_write(provider.traits, traits)
                if provider.traits != wanted:
                    self.store.set_traits(uuid, generation, wanted)
                return
            except GenerationConflict:
                LOG.info("provider_generation_conflict", provider=uuid)
        raise GenerationConflict(uuid=uuid, expected="?", actual="?")

    def heartbeat(self) -> None:
        """Say the hosts are alive. After a gap longer than ``service_down_time``
        (the process was stopped, or could not reach the store) they counted as
        down meanwhile and their instances may have been evacuated: destroy
        those VMs first (:meth:`destroy_evacuated`), so that nothing runs twice
        once the hosts count as up again."""
        now = time.time()
        if self._last_beat is not None and now - self._last_beat > self.service_down_time:
            LOG.warning("heartbeat_gap", seconds=round(now - self._last_beat, 1))
            self.destroy_evacuated()
        self.store.heartbeat(self.hosts, now)
        self._last_beat = now

    def destroy_evacuated(self) -> list[tuple[str, str]]:
        """Destroy every VM of this process that its instance record no longer
        places here (:func:`evacuated_from`); return the (instance, host) pairs
        destroyed. They are never reported: the instance lives elsewhere."""
        with self._lock:
            running = sorted(self._running)
        found = {r.uuid: r for r in self.store.list_instances(sorted({u for u, _ in running}))}
        destroyed = []
        for uuid, host in running:
            if evacuated_from(found.get(uuid), host):
                with self._lock:
                    self._stop_vm(uuid, host)
                destroyed.append((uuid, host))
                LOG.info("evacuated_vm_destroyed", instance_uuid=uuid, host=host)
        return destroyed

    def running_instances(self) -> list[InstanceReport]:
        """What each host of this process runs now, one report per host (an
        empty one for a host that runs nothing). A VM's move is reported only
        while its instance record still names that migration (the move ends
        with the conductor, which tells no compute: confirmed, given up)."""
        with self._lock:
            moving = {u for (u, _), vm in self._running.items() if vm.migration_uuid}
        if moving:
            records = {r.uuid: r for r in self.store.list_instances(sorted(moving))}
            with self._lock:
                for (uuid, host), vm in list(self._running.items()):
                    record = records.get(uuid)
                    if vm.migration_uuid and record and record.migration_uuid != vm.migration_uuid:
                        self._running[(uuid, host)] = replace(vm, migration_uuid=None)
        now = time.time()
        with self._lock:
            per_host: dict[str, list[RunningInstance]] = {h: [] for h in self.hosts}
            for (_, host), vm in sorted(self._running.items()):
                per_host[host].append(vm)
        return [InstanceReport(h, now, tuple(vms)) for h, vms in per_host.items()]

    def report_instances(self) -> None:
        """Write what every host runs (:meth:`running_instances`), in one store
        write. Logged at info when the counts change, else at debug."""
        if self._last_beat is not None and time.time() - self._last_beat > self.service_down_time:
            # Back from an outage: destroy the evacuated VMs before saying what runs.
            self.heartbeat()
        reports = self.running_instances()
        self.store.report_instances(reports)
        counts = (len(reports), sum(len(r.instances) for r in reports))
        log = LOG.info if counts != self._last_reported else LOG.debug
        log("instances_reported", hosts=counts[0], vms=counts[1])
        self._last_reported = counts

    def _moving(self, instance_uuid: str, host: str, migration_uuid: str) -> None:
        """The VM on ``host`` belongs to this move now (if it runs there)."""
        with self._lock:
            vm = self._running.get((instance_uuid, host))
            if vm is not None:
                self._running[(instance_uuid, host)] = replace(vm, migration_uuid=migration_uuid)

    def _stats(self, host: str) -> dict[str, int]:
        return {
            IO_OPS_STAT: self._io_ops[host],
            OPS_STARTED_STAT: self._ops_started[host],
            **self._image_counts[host],
        }

    def _count(self, host: str, io_ops: int, image: dict[str, str] | None = None) -> None:
        """Change a host's counters and report them (in order, and only if
        enabled): at once, or with every host's changes of the next
        ``stats_interval`` seconds in one store write (a build's start and end
        inside it cost one write, not two).

        A worker counts an operation it placed on a host as in progress
        until the host's next report reaches it, and the store feeds only a
        report that changed: an operation that starts and ends within one
        interval leaves ``num_io_ops`` as it was, so it is the count of
        operations started (:data:`OPS_STARTED_STAT`) that makes the report
        a change, and every worker's count the host's own again."""
        with self._report_lock:
            self._io_ops[host] = max(self._io_ops[host] + io_ops, 0)
            self._ops_started[host] += max(io_ops, 0)
            for prop, value in (image or {}).items():
                stat = image_property_stat(prop, str(value))
                self._image_counts[host][stat] = self._image_counts[host].get(stat, 0) + 1
            if not self.report_stats:
                return
            if self.stats_interval <= 0:
                self._report_stats([host])
                return
            if not self._stats_due:
                self._runner.later(self.stats_interval, self._report_due_stats)
            self._stats_due.add(host)

    def _report_due_stats(self) -> None:
        with self._report_lock:
            hosts, self._stats_due = sorted(self._stats_due), set()
            self._report_stats(hosts)

    def _report_stats(self, hosts: list[str]) -> None:
        """One store write of ``hosts``' stats; the caller holds the report lock."""
        try:
            self.store.report_services([ServiceReport(h, stats=self._stats(h)) for h in hosts])
        except StoreError as exc:  # a later report carries the counts again
            LOG.warning("stats_report_failed", hosts=hosts, error=exc.message)

    def stop(self) -> None:
        self._runner.stop()

    # --- RPC endpoint: builds -------------------------------------------------------

    @guarded(steps.build)
    def build_and_run_instance(
        self,
        ctxt: Any,
        instance_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
    ) -> None:
        chosen = Selection.from_primitive(selection)
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=chosen.host,
        ):
            key = (chosen.host, getattr(ctxt, "request_id", None))
            with self._lock:
                terminated = instance_uuid in self._terminated
                status = self._builds.get(instance_uuid, {}).get(key)
                if not terminated and (status is None or status == BUILD_FAILED):
                    self._builds.setdefault(instance_uuid, {})[key] = BUILD_RUNNING
            if terminated:
                LOG.info("build_of_deleted_instance_ignored")
                return
            if status == BUILD_RUNNING:
                LOG.info("build_duplicate_ignored")
                return
            if status == BUILD_ACTIVE:
                # Built already: the first report may have been lost, say it again.
                LOG.info("build_duplicate_reported")
                self._report_built(ctxt, instance_uuid, chosen)
                return
            spec = RequestSpec.from_primitive(request_spec)
            alternates = [Selection.from_primitive(s) for s in host_list]
            self._count(chosen.host, +1)
            self._runner.later(
                self.build_time,
                lambda: self._finish_build(ctxt, instance_uuid, spec, chosen, alternates),
            )

    def _finish_build(
        self,
        ctxt: Any,
        instance_uuid: str,
        spec: RequestSpec,
        chosen: Selection,
        alternates: list[Selection],
    ) -> None:
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=chosen.host,
        ):
            key = (chosen.host, getattr(ctxt, "request_id", None))
            builds = self._builds.setdefault(instance_uuid, {})
            with self._lock:
                cancelled = instance_uuid in self._terminated
                if cancelled:
                    builds[key] = BUILD_FAILED
            if cancelled:  # deleted while building: no VM, nothing to report
                self._count(chosen.host, -1)
                LOG.info("build_cancelled_by_delete")
                return
            if self.guard.refused(steps.build_step(instance_uuid, chosen.host)):
                # Its claim went meanwhile (the conductor gave the build up, or
                # another attempt holds it elsewhere): no VM, nothing reported.
                with self._lock:
                    builds[key] = BUILD_FAILED
                self._count(chosen.host, -1)
                return
            failed = chosen.host in self.fail_hosts or self._rng.random() < self.fail_rate
            image = dict(spec.image.properties) if spec.image is not None else {}
            self._count(chosen.host, -1, None if failed else image)
            if failed:
                # Release before handing back, so the retry can never be refused
                # for resources its own failed attempt still holds; and while
                # this build still counts as running, so a duplicate cast
                # arriving meanwhile is not taken for a new attempt.
                self._release_if_here(instance_uuid, chosen)
                with self._lock:
                    builds[key] = BUILD_FAILED
                    self.builds_failed += 1
                    first_failure = chosen.host not in self._failing
                    self._failing.add(chosen.host)
                self.store.record_build_result(chosen.host, success=False)
                LOG.info("build_failed", first_failure=first_failure, alternates=len(alternates))
                self.conductor.reschedule(
                    ctxt, instance_uuid, spec, chosen.host, "simulated build failure", alternates
                )
                return
            with self._lock:
                if instance_uuid in self._terminated:  # deleted meanwhile
                    builds[key] = BUILD_FAILED
                    LOG.info("build_cancelled_by_delete")
                    return
                builds[key] = BUILD_ACTIVE
                self._start_vm(self._vm(ctxt, instance_uuid, chosen), chosen.host)
                self.builds_ok += 1
                was_failing = chosen.host in self._failing
                self._failing.discard(chosen.host)
            if was_failing:
                self.store.record_build_result(chosen.host, success=True)
            LOG.info("build_succeeded")
            self._report_built(ctxt, instance_uuid, chosen)

    def _report_built(self, ctxt: Any, instance_uuid: str, chosen: Selection) -> None:
        """Say where the instance runs (the host, node and zone of the Selection
        it was built from): in the store itself, by the conductor's rule
        (:func:`conductor_stub.manager.record_built`), or in a cast to the
        conductor (``build_results``). A store that cannot be written loses
        nothing: the record stays BUILDING, the conductor re-drives the request
        once its deadline passes, and the repeated build reports again."""
        if self.build_results == RESULTS_BY_CAST:
            self.conductor.build_succeeded(
                ctxt, instance_uuid, chosen.host, chosen.node, chosen.availability_zone
            )
            return
        try:
            record_built(
                self.store, instance_uuid, chosen.host, chosen.node, chosen.availability_zone
            )
        except StoreError as exc:
            LOG.warning("build_result_not_recorded", error=exc.message)

    def _release_if_here(self, consumer_uuid: str, chosen: Selection) -> bool:
        """Release the consumer's claim if it is the one on this host.

        A stale attempt (a re-driven request's duplicate) must not drop the
        claim of the attempt that is live on another host.
        """
        if not holds_on(self.store, consumer_uuid, chosen.host):
            return False
        return self.store.release(consumer_uuid)

    # --- RPC endpoint: resize ---------------------------------------------------------

    @guarded(steps.prep_resize)
    def prep_resize(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        new_flavor: dict[str, Any],
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
    ) -> None:
        """On the destination: check in, then hand over to the source (or fail)."""
        chosen = Selection.from_primitive(selection)
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=chosen.host,
            migration_uuid=migration_uuid,
        ):
            key = (migration_uuid, chosen.host)
            with self._lock:
                self._resize_zones[key] = chosen.availability_zone
                self._resize_vms[key] = self._vm(ctxt, instance_uuid, chosen, migration_uuid)
                step = self._migrations.get(key)
                if step is None or step == STEP_FAILED:
                    self._migrations[key] = STEP_PREP
            if step == STEP_PREP:
                LOG.info("prep_resize_duplicate_ignored")
                return
            if step == STEP_RESIZING:
                # A re-drive: a later step may have been lost, so walk it again
                # (every step is idempotent).
                LOG.info("prep_resize_duplicate_walks_again")
                self._hand_over(ctxt, instance_uuid, migration_uuid, chosen)
                return
            if step == STEP_FINISHED:
                LOG.info("prep_resize_duplicate_reported")
                self.conductor.resize_result(
                    ctxt,
                    instance_uuid,
                    migration_uuid,
                    chosen.host,
                    True,
                    availability_zone=chosen.availability_zone,
                )
                return
            LOG.info("prep_resize", new_flavor=new_flavor.get("name"))
            spec = RequestSpec.from_primitive(request_spec)
            alternates = [Selection.from_primitive(s) for s in host_list]
            self._count(chosen.host, +1)
            self._runner.later(
                self.build_time,
                lambda: self._finish_prep(
                    ctxt, instance_uuid, migration_uuid, spec, chosen, alternates
                ),
            )

    def _finish_prep(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        chosen: Selection,
        alternates: list[Selection],
    ) -> None:
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=chosen.host,
            migration_uuid=migration_uuid,
        ):
            key = (migration_uuid, chosen.host)
            self._count(chosen.host, -1)
            with self._lock:
                cancelled = instance_uuid in self._terminated
                if cancelled:
                    self._migrations[key] = STEP_FAILED
            if cancelled:
                LOG.info("resize_cancelled_by_delete")
                return
            if chosen.host in self.fail_resize_hosts:
                # Nova's bug 1741125 was a retry refused for the resources its
                # own failed attempt still held: release first, then hand back.
                released = self._release_if_here(instance_uuid, chosen)
                with self._lock:
                    self._migrations[key] = STEP_FAILED
                LOG.info("prep_resize_failed", released=released, alternates=len(alternates))
                self.conductor.reschedule(
                    ctxt,
                    instance_uuid,
                    spec,
                    chosen.host,
                    "simulated resize failure",
                    alternates,
                    migration_uuid=migration_uuid,
                )
                return
            with self._lock:
                self._migrations[key] = STEP_RESIZING
            self._hand_over(ctxt, instance_uuid, migration_uuid, chosen)

    def _hand_over(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, chosen: Selection
    ) -> None:
        source = self._source_host(migration_uuid)
        if source is None:
            # The migration holds nothing: the conductor gave the resize up
            # (and handed the allocation back). Nothing to walk.
            with self._lock:
                self._migrations[(migration_uuid, chosen.host)] = STEP_FAILED
            LOG.warning("resize_abandoned")
            return
        assert self.compute is not None, "a simulator that resizes needs a compute client"
        self.compute.resize_instance(
            ctxt, source, instance_uuid, migration_uuid, chosen.host, chosen.node
        )

    def _source_host(self, migration_uuid: str) -> str | None:
        """The host of the migration's allocation: where the instance comes from
        (the root of the provider tree it is allocated from: a child provider,
        such as a GPU pool, is not a host)."""
        held = self.store.get_consumer(migration_uuid)
        if held is None:
            return None
        if held.host:
            return held.host
        provider = self.store.get_provider(next(iter(held.allocations)))
        if provider.root_uuid and provider.root_uuid != provider.uuid:
            provider = self.store.get_provider(provider.root_uuid)
        return provider.name

    @guarded(steps.resize_instance)
    def resize_instance(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, dest_host: str, dest_node: str
    ) -> None:
        """On the source: "copy the disk", then let the destination finish."""
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            dest_host=dest_host,
        ):
            LOG.info("resize_instance")
            assert self.compute is not None, "a simulator that resizes needs a compute client"
            source = self._source_host(migration_uuid)
            if source is not None:  # its disk goes to the destination
                with self._lock:
                    gone = self._stop_vm(instance_uuid, source)
                    if gone is not None:  # a revert runs it there again
                        self._resized_away[migration_uuid] = gone
            compute = self.compute
            self._runner.later(
                self.build_time,
                lambda: compute.finish_resize(
                    ctxt, dest_host, dest_node, instance_uuid, migration_uuid
                ),
            )

    @guarded(steps.finish_resize)
    def finish_resize(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, dest_host: str, dest_node: str
    ) -> None:
        """On the destination: the instance runs here now; tell the conductor."""
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=dest_host,
            migration_uuid=migration_uuid,
        ):
            key = (migration_uuid, dest_host)
            with self._lock:
                vm = self._resize_vms.pop(key, None)
            if vm is None:  # finished already, or prepped before this process started
                vm = self._vm_held(ctxt, instance_uuid, dest_host, migration_uuid)
            with self._lock:
                if instance_uuid in self._terminated:
                    self._migrations[key] = STEP_FAILED
                    LOG.info("resize_cancelled_by_delete")
                    return
                again = self._migrations.get(key) == STEP_FINISHED
                self._migrations[key] = STEP_FINISHED
                zone = self._resize_zones.get(key)
                self._start_vm(vm, dest_host)
            LOG.info("finish_resize_reported_again" if again else "finish_resize")
            self.conductor.resize_result(
                ctxt, instance_uuid, migration_uuid, dest_host, True, availability_zone=zone
            )

    @guarded(steps.confirm_resize)
    def confirm_resize(self, ctxt: Any, instance_uuid: str, migration_uuid: str) -> None:
        """On the source: drop the source's allocation (the migration's)."""
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        ):
            released = self.store.release(migration_uuid)
            with self._lock:
                self._resized_away.pop(migration_uuid, None)
            LOG.info("resize_confirmed", released=released)
            self.conductor.resize_confirmed(ctxt, instance_uuid, migration_uuid)

    @guarded(steps.revert_resize)
    def revert_resize(self, ctxt: Any, instance_uuid: str, migration_uuid: str) -> None:
        """On the destination: drop the instance's allocation here and hand the
        source's back to it, in one step; stop the VM here; then the source
        finishes (``finish_revert_resize``), in whichever process serves it.

        A repeat (a re-driven revert) finds the allocation moved already and
        asks the source again: the source is then where the instance's own
        allocation is.
        """
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        ):
            source = self._source_host(migration_uuid)
            moved = self.store.move_allocations(migration_uuid, instance_uuid, replace=True)
            if source is None:
                source = self._source_host(instance_uuid)
            with self._lock:
                for running, host in list(self._running):
                    if running == instance_uuid and host != source:
                        self._stop_vm(instance_uuid, host)
            LOG.info("resize_reverted_here", moved=moved, source=source)
            if source is None:  # nothing held any more: deleted meanwhile
                self.conductor.resize_reverted(ctxt, instance_uuid, migration_uuid)
                return
            assert self.compute is not None, "a simulator that resizes needs a compute client"
            self.compute.finish_revert_resize(ctxt, source, instance_uuid, migration_uuid)

    @guarded(steps.finish_revert_resize)
    def finish_revert_resize(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, source_host: str
    ) -> None:
        """On the source: run the instance here again (unless a delete reached
        it), then tell the conductor the revert is done. Idempotent."""
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=source_host,
        ):
            with self._lock:
                away = self._resized_away.pop(migration_uuid, None)
            vm = (
                replace(away, migration_uuid=None, request_id=getattr(ctxt, "request_id", None))
                if away is not None
                else self._vm_held(ctxt, instance_uuid, source_host)
            )
            with self._lock:
                if instance_uuid not in self._terminated:
                    self._start_vm(vm, source_host)
            LOG.info("resize_reverted")
            self.conductor.resize_reverted(ctxt, instance_uuid, migration_uuid)

    # --- RPC endpoint: live migration -----------------------------------------------

    @guarded(steps.check_destination)
    def check_can_live_migrate_destination(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
        source_host: str,
        block_migration: bool = False,
    ) -> None:
        """On the destination: check it can take the instance, then have the
        source checked (or hand the migration back)."""
        move = LiveMove.read(
            instance_uuid,
            migration_uuid,
            request_spec,
            selection,
            host_list,
            source_host,
            block_migration,
        )
        step = self._live_step(ctxt, move, "dest")
        with self._live_bound(ctxt, move, move.dest):
            if step is None:
                return
            if step == LIVE_MIGRATING:  # a re-drive: a later step may have been lost
                LOG.info("live_migration_check_walks_again")
                self._check_source(ctxt, move)
                return
            if step == LIVE_LANDED:
                LOG.info("live_migration_reported_again")
                self._report_live_migrated(ctxt, move)
                return
            LOG.info("check_can_live_migrate_destination", block_migration=block_migration)
        self._count(move.dest, +1)
        self._runner.later(self.build_time, lambda: self._finish_dest_check(ctxt, move))

    def _finish_dest_check(self, ctxt: Any, move: LiveMove) -> None:
        self._count(move.dest, -1)
        with self._live_bound(ctxt, move, move.dest):
            if not self._live_passes(move, "dest"):
                self._precheck_failed(ctxt, move, "destination")
                return
            with self._lock:
                self._live[move.key("dest")] = LIVE_MIGRATING
            self._check_source(ctxt, move)

    def _check_source(self, ctxt: Any, move: LiveMove) -> None:
        assert self.compute is not None, "a simulator that migrates needs a compute client"
        assert move.spec is not None, "a pre-check carries its request"
        self.compute.check_can_live_migrate_source(
            ctxt,
            move.source_host,
            move.instance_uuid,
            move.migration_uuid,
            move.spec,
            move.chosen,
            move.alternates,
            move.block_migration,
        )

    @guarded(steps.check_source)
    def check_can_live_migrate_source(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
        source_host: str,
        block_migration: bool = False,
    ) -> None:
        """On the source: check it can let the instance go, then migrate it to
        ``selection``'s host (or hand the migration back)."""
        move = LiveMove.read(
            instance_uuid,
            migration_uuid,
            request_spec,
            selection,
            host_list,
            source_host,
            block_migration,
        )
        step = self._live_step(ctxt, move, "source")
        with self._live_bound(ctxt, move, source_host):
            if step is None:
                return
            if step in (LIVE_MIGRATING, LIVE_LANDED):  # migrated: the post may be lost
                LOG.info("live_migration_source_walks_again")
                self._post(ctxt, move)
                return
            LOG.info("check_can_live_migrate_source", dest=move.dest)
            self._moving(move.instance_uuid, source_host, move.migration_uuid)
        self._runner.later(self.build_time, lambda: self._live_migrate(ctxt, move))

    def _live_migrate(self, ctxt: Any, move: LiveMove) -> None:
        """The source's check, then the migration itself: off the source."""
        with self._live_bound(ctxt, move, move.source_host):
            if not self._live_passes(move, "source"):
                self._precheck_failed(ctxt, move, "source")
                return
            if self.store.get_consumer(move.migration_uuid) is None:
                # The migration holds nothing: the conductor gave the live
                # migration up (the source's allocation handed back). Stay.
                with self._lock:
                    self._live[move.key("source")] = LIVE_FAILED
                LOG.warning("live_migration_abandoned")
                return
            with self._lock:
                if move.instance_uuid in self._terminated:  # deleted meanwhile
                    self._live[move.key("source")] = LIVE_FAILED
                    LOG.info("live_migration_cancelled_by_delete")
                    return
                self._live[move.key("source")] = LIVE_MIGRATING
                self._stop_vm(move.instance_uuid, move.source_host)
            LOG.info("live_migration", dest=move.dest)
            self._post(ctxt, move)

    def _post(self, ctxt: Any, move: LiveMove) -> None:
        assert self.compute is not None, "a simulator that migrates needs a compute client"
        self.compute.post_live_migration_at_destination(
            ctxt, move.chosen, move.instance_uuid, move.migration_uuid
        )

    @guarded(steps.post_live_migration)
    def post_live_migration_at_destination(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, selection: dict[str, Any]
    ) -> None:
        """On the destination: the instance runs here now; tell the conductor."""
        chosen = Selection.from_primitive(selection)
        move = LiveMove(instance_uuid, migration_uuid, chosen)
        with self._live_bound(ctxt, move, chosen.host):
            with self._lock:
                if instance_uuid in self._terminated:
                    self._live[move.key("dest")] = LIVE_FAILED
                    LOG.info("live_migration_cancelled_by_delete")
                    return
                again = self._live.get(move.key("dest")) == LIVE_LANDED
                self._live[move.key("dest")] = LIVE_LANDED
                self._start_vm(self._vm(ctxt, instance_uuid, chosen, migration_uuid), chosen.host)
            LOG.info("live_migration_reported_again" if again else "post_live_migration")
            self._report_live_migrated(ctxt, move)

    def _report_live_migrated(self, ctxt: Any, move: LiveMove) -> None:
        self.conductor.live_migrated(
            ctxt,
            move.instance_uuid,
            move.migration_uuid,
            move.dest,
            move.chosen.node,
            move.chosen.availability_zone,
        )

    def _live_step(self, ctxt: Any, move: LiveMove, side: str) -> str | None:
        """Check in a live migration's pre-check on its ``side`` ("dest" or
        "source"; the guard has found the step due): the step it had reached
        there, :data:`LIVE_CHECKING` when a new check starts; None, logged,
        when the cast is to be ignored (a deleted instance, a check under
        way)."""
        host = move.dest if side == "dest" else move.source_host
        with self._live_bound(ctxt, move, host):
            with self._lock:
                if move.instance_uuid in self._terminated:
                    LOG.info("live_migration_of_deleted_instance_ignored")
                    return None
                step = self._live.get(move.key(side))
                if step is None or step == LIVE_FAILED:
                    self._live[move.key(side)] = LIVE_CHECKING
                    return LIVE_CHECKING
            if step == LIVE_CHECKING:
                LOG.info("live_migration_check_duplicate_ignored", side=side)
                return None
            return step

    def _live_passes(self, move: LiveMove, side: str) -> bool:
        """Draw one pre-check on ``side``'s host (False: it failed, or the
        instance was deleted meanwhile; either way this step is over)."""
        with self._lock:
            if move.instance_uuid in self._terminated:
                self._live[move.key(side)] = LIVE_FAILED
                LOG.info("live_migration_cancelled_by_delete")
                return False
        host = move.dest if side == "dest" else move.source_host
        failed = (
            host in self.live_migration_fail_hosts
            or self._rng.random() < self.live_migration_fail_rate
        )
        if failed:
            with self._lock:
                self._live[move.key(side)] = LIVE_FAILED
        return not failed

    def _precheck_failed(self, ctxt: Any, move: LiveMove, side: str) -> None:
        """Release the destination's claim, then hand the migration back to the
        conductor for the next alternate (nothing if deleted meanwhile)."""
        with self._lock:
            if move.instance_uuid in self._terminated:
                return
        assert move.spec is not None, "a pre-check carries its request"
        released = self._release_if_here(move.instance_uuid, move.chosen)
        LOG.info(
            "live_migration_precheck_failed",
            side=side,
            dest=move.dest,
            released=released,
            alternates=len(move.alternates),
        )
        self.conductor.live_migration_precheck_failed(
            ctxt,
            move.instance_uuid,
            move.migration_uuid,
            move.spec,
            move.dest,
            f"simulated live migration pre-check failure on the {side}",
            move.alternates,
        )

    @contextmanager
    def _live_bound(self, ctxt: Any, move: LiveMove, host: str) -> Iterator[None]:
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=move.instance_uuid,
            migration_uuid=move.migration_uuid,
            host=host,
        ):
            yield

    # --- RPC endpoint: evacuate -------------------------------------------------------

    @guarded(steps.rebuild)
    def rebuild_instance(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
    ) -> None:
        """On an evacuation's destination (1.6): rebuild the instance here, then
        tell the conductor (``rebuild_result``). It fails as a build does (on
        the ``fail_hosts``, or at ``fail_rate``): the claim here is released
        first, then the alternates are handed back. Idempotent per migration
        and host, as a resize's steps are: a repeat of one under way is
        ignored, of one done is reported again."""
        chosen = Selection.from_primitive(selection)
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=chosen.host,
            migration_uuid=migration_uuid,
        ):
            key = (migration_uuid, chosen.host)
            with self._lock:
                terminated = instance_uuid in self._terminated
                step = self._migrations.get(key)
                if not terminated and (step is None or step == STEP_FAILED):
                    self._migrations[key] = STEP_PREP
            if terminated:
                LOG.info("rebuild_of_deleted_instance_ignored")
                return
            if step == STEP_PREP:
                LOG.info("rebuild_duplicate_ignored")
                return
            if step == STEP_FINISHED:
                LOG.info("rebuild_duplicate_reported")
                self._report_rebuilt(ctxt, instance_uuid, migration_uuid, chosen)
                return
            LOG.info("rebuild_instance")
            spec = RequestSpec.from_primitive(request_spec)
            alternates = [Selection.from_primitive(s) for s in host_list]
            self._count(chosen.host, +1)
            self._runner.later(
                self.build_time,
                lambda: self._finish_rebuild(
                    ctxt, instance_uuid, migration_uuid, spec, chosen, alternates
                ),
            )

    def _finish_rebuild(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        chosen: Selection,
        alternates: list[Selection],
    ) -> None:
        with bind_request(
            request_id=getattr(ctxt, "request_id", None),
            instance_uuid=instance_uuid,
            host=chosen.host,
            migration_uuid=migration_uuid,
        ):
            key = (migration_uuid, chosen.host)
            self._count(chosen.host, -1)
            if self.guard.refused(steps.rebuild_step(instance_uuid, migration_uuid, chosen.host)):
                with self._lock:
                    self._migrations[key] = STEP_FAILED
                return
            failed = chosen.host in self.fail_hosts or self._rng.random() < self.fail_rate
            with self._lock:
                if instance_uuid in self._terminated:
                    self._migrations[key] = STEP_FAILED
                    LOG.info("rebuild_cancelled_by_delete")
                    return
                if not failed:
                    self._migrations[key] = STEP_FINISHED
                    self._start_vm(
                        self._vm(ctxt, instance_uuid, chosen, migration_uuid), chosen.host
                    )
            if not failed:
                LOG.info("rebuild_succeeded")
                self._report_rebuilt(ctxt, instance_uuid, migration_uuid, chosen)
                return
            released = self._release_if_here(instance_uuid, chosen)
            with self._lock:
                self._migrations[key] = STEP_FAILED
            LOG.info("rebuild_failed", released=released, alternates=len(alternates))
            self.conductor.rebuild_result(
                ctxt,
                instance_uuid,
                migration_uuid,
                chosen.host,
                False,
                reason="simulated rebuild failure",
                spec=spec,
                alternates=alternates,
            )

    def _report_rebuilt(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, chosen: Selection
    ) -> None:
        self.conductor.rebuild_result(
            ctxt,
            instance_uuid,
            migration_uuid,
            chosen.host,
            True,
            node=chosen.node,
            availability_zone=chosen.availability_zone,
        )

    # --- RPC endpoint: delete ---------------------------------------------------------

    @guarded(steps.terminate)
    def terminate_instance(self, ctxt: Any, instance_uuid: str, host: str) -> None:
        """Destroy the instance's VM on ``host`` (if it runs there) and cancel
        whatever is in flight for it in this process; then tell the conductor.

        Idempotent: a repeat (the conductor re-drives a delete it has not heard
        back on) destroys nothing more and reports again.
        """
        with bind_request(
            request_id=getattr(ctxt, "request_id", None), instance_uuid=instance_uuid, host=host
        ):
            with self._lock:
                self._remember_terminated(instance_uuid)
                destroyed = (instance_uuid, host) in self._running
                self._stop_vm(instance_uuid, host)
            LOG.info("instance_terminated", destroyed=destroyed)
            self.conductor.instance_terminated(ctxt, instance_uuid, host)

    # --- RPC endpoint: reap -----------------------------------------------------------

    @guarded(steps.reap)
    def reap_instance(self, ctxt: Any, instance_uuid: str, host: str, reason: str) -> None:
        """(1.8) The reconciler found the instance's VM running on ``host`` with
        no live record placing it there: destroy it (``orphan_vm_reaped``), or
        only log it (``orphan_vm_found``), as ``running_deleted_instance_action``
        says. Idempotent; a host not of this process, or a VM not running
        there, is logged and left alone. Nothing is reported: the reconciler
        deals with the allocations."""
        with bind_request(
            request_id=getattr(ctxt, "request_id", None), instance_uuid=instance_uuid, host=host
        ):
            with self._lock:
                running = (instance_uuid, host) in self._running
                if running and self.running_deleted_instance_action == REAP:
                    self._stop_vm(instance_uuid, host)
            if not running:
                LOG.info("orphan_vm_not_running", reason=reason)
            elif self.running_deleted_instance_action == REAP:
                LOG.warning("orphan_vm_reaped", reason=reason)
            else:
                LOG.warning("orphan_vm_found", reason=reason)

    # --- RPC endpoint: shelve ---------------------------------------------------------

    @guarded(steps.shelve_offload)
    def shelve_offload_instance(self, ctxt: Any, instance_uuid: str, host: str) -> None:
        """Destroy the VM of an instance being shelved (if it runs on ``host``),
        then tell the conductor, which releases its allocation.

        Idempotent: a repeat destroys nothing more and reports again. Unlike a
        delete, nothing is remembered: an unshelve may build it here again.
        """
        with bind_request(
            request_id=getattr(ctxt, "request_id", None), instance_uuid=instance_uuid, host=host
        ):
            with self._lock:
                destroyed = (instance_uuid, host) in self._running
                self._stop_vm(instance_uuid, host)
                self._builds.pop(instance_uuid, None)  # an unshelve is a new request
            LOG.info("instance_offloaded", destroyed=destroyed)
            self.conductor.instance_shelved(ctxt, instance_uuid, host)

    def _remember_terminated(self, instance_uuid: str) -> None:
        """(Under the lock.) The instance is deleted: nothing more is built for
        it here; what its builds were is forgotten, and so are the instances
        terminated longer ago than ``terminated_retention``, so that the
        memory follows the deletes of the retention, not every delete ever."""
        now = time.monotonic()
        if instance_uuid not in self._terminated:
            self._terminated.add(instance_uuid)
            self._terminated_at.append((now, instance_uuid))
        self._builds.pop(instance_uuid, None)
        while self._terminated_at and now - self._terminated_at[0][0] > self.terminated_retention:
            _, old = self._terminated_at.popleft()
            self._terminated.discard(old)

    # --- what runs where --------------------------------------------------------------

    def hosts_running(self, instance_uuid: str) -> list[str]:
        """The hosts of this process that run the instance's VM."""
        with self._lock:
            return sorted(h for u, h in self._running if u == instance_uuid)

    def _start_vm(self, vm: RunningInstance, host: str) -> None:
        """(Under the lock.) The VM runs on ``host`` now (a VM already running
        there takes the newer amounts and move)."""
        started = (vm.uuid, host) not in self._running
        self._running[(vm.uuid, host)] = vm
        if started:
            LOG.info("vm_started", instance_uuid=vm.uuid, host=host)

    def _stop_vm(self, instance_uuid: str, host: str) -> RunningInstance | None:
        """(Under the lock.) The VM no longer runs on ``host``: the one that
        ran there, None if none did."""
        vm = self._running.pop((instance_uuid, host), None)
        if vm is not None:
            LOG.info("vm_stopped", instance_uuid=instance_uuid, host=host)
        return vm

    def _vm(
        self,
        ctxt: Any,
        instance_uuid: str,
        chosen: Selection,
        migration_uuid: str | None = None,
    ) -> RunningInstance:
        """The VM a step builds from ``chosen``: the amounts its claim takes,
        for the claim's project and user (see :func:`running_vm`)."""
        claim = chosen.allocation_request
        return running_vm(
            ctxt, instance_uuid, claim.allocations, claim.project_id, claim.user_id, migration_uuid
        )

    def _vm_held(
        self, ctxt: Any, instance_uuid: str, host: str, migration_uuid: str | None = None
    ) -> RunningInstance:
        """The VM of a step whose amounts this process no longer knows (it
        started after the step began): what the instance holds on ``host``."""
        held = self.store.get_consumer(instance_uuid)
        if held is None:
            return running_vm(ctxt, instance_uuid, {}, None, None, migration_uuid)
        ours = self._providers_of(host)
        here = {rp: res for rp, res in held.allocations.items() if rp in ours}
        return running_vm(ctxt, instance_uuid, here, held.project_id, held.user_id, migration_uuid)

    def _providers_of(self, host: str) -> set[str]:
        """The providers of ``host``'s tree: its root and its GPU children."""
        return {provider_uuid(host)} | {
            provider_uuid(gpu_name(host, n)) for n in range(self.topology.gpus())
        }
