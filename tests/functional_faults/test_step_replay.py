"""Every state-changing step, sent twice, replayed, with another instance's ids
and at the wrong step: no instance changes.

DESIGN.md ("The lifecycle"): every message that changes state names its
operation and is acted on only when the record says that operation is at that
step on that host; the bus delivers at least once, late, reordered, and can
carry a forged message. This module sends, on one cluster, a table of such
messages (:data:`CASES`): every state-changing RPC method of the compute
(:class:`compute_sim.manager.ComputeManager`) and of the conductor
(:class:`conductor_stub.manager.ConductorEndpoint`), each as four kinds of
message:

(a) twice: the same real-looking message, sent two times;
(b) replayed: a message an earlier, finished operation of the victim really
    got (its ids, arguments and request id), sent once that operation and a
    later one have finished (a shelve's offload after the unshelve back onto
    the same host, a cold migration's steps after its confirm or revert, a
    live migration's after the instance moved on again, an evacuation's...);
(c) with another instance's ids (another ACTIVE instance's uuid as the
    migration, another instance's host, request or real migration);
(d) the right ids at the wrong step (an ACTIVE instance's own ids to a step of
    a move that is not under way; a RESIZED instance's real migration to a
    confirm or revert nobody asked for: the ``d2`` rows).

Where a kind makes no sense for a method, its row says why (``na``). Each
victim (and each other instance a (c) row names) serves one row only, so what
broke a victim names its row. Once every target process has logged handling
its messages (or after a bounded wait), every instance's record, allocations
and VM are compared with what they were before, each victim must still run
on exactly its record's host, and the cluster's accounting must hold; every
row that broke something is listed, with what, in one failure.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from compute_sim.hosts import provider_uuid
from compute_sim.manager import ComputeManager
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.records import ConductorSettings, move_spec, resize_spec
from conductor_stub.tasks.build import Booter
from conductor_stub.tasks.evacuate import Evacuator
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from conductor_stub.tasks.shelve import Shelver
from scheduler import rpc
from scheduler.flavors import load_catalog
from scheduler.objects import (
    ACTIVE,
    MIGRATING,
    REBUILDING,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    AllocationRequest,
    Destination,
    InstanceRecord,
    RequestSpec,
    Selection,
    migration_uuid_for,
)
from scheduler.service import ServiceResolver
from scheduler.steps import exposed_methods
from tests.functional_faults.conftest import FaultCluster, Process, wait_until

# --- what a victim went through before the forging ------------------------------------

BOOTED = "booted"  # nothing else
SHELVED_BACK = "shelved-back"  # shelved, then unshelved back onto the same host
CONFIRMED = "migrated-confirmed"  # cold-migrated to another host, confirmed
REVERTED = "migrated-reverted"  # cold-migrated to another host, reverted
#: Cold-migrated and reverted, then cold-migrated to a third host and confirmed.
REVERTED_THEN_MOVED = "reverted-then-moved"
#: Cold-migrated to another host and left RESIZED: nobody asked to confirm or revert.
WAITING = "resized-waiting"
#: Cold-migrated to the failing host: its prep failed, back ACTIVE on its source.
PREP_FAILED = "prep-failed"
LIVE_TWICE = "live-migrated-twice"  # live-migrated to another host, then to a third
#: Live-migrated to the failing host: its pre-check failed, back ACTIVE on its source.
PRECHECK_FAILED = "precheck-failed"
EVACUATED = "evacuated"  # rebuilt elsewhere once its host's compute stopped
RESCHEDULED = "build-rescheduled"  # its first build failed (on the failing host)

#: The histories whose earlier operation is a cold migration (a resize's steps).
COLD = (CONFIRMED, REVERTED, REVERTED_THEN_MOVED, WAITING, PREP_FAILED)
#: ... a live migration or an evacuation (a move's request spec).
MOVED = (LIVE_TWICE, PRECHECK_FAILED, EVACUATED)

#: The failing host: every build, resize prep and live-migration pre-check on it
#: fails, which gives a real reschedule (with and without a migration) and a
#: real pre-check failure to replay.
FAILING = "cf-0000"
#: The host whose compute is stopped, to evacuate from.
DOOMED = "cd-0000"
#: The simulator processes whose hosts hold the victims (three hosts each).
SIMS = ("ca", "cb")
#: The conductor's process (the target of its topic's messages).
CONDUCTOR = "conductor"

# --- the ids a row's message names: each a token, resolved per victim -----------------

# Hosts (``at``: where a compute message goes, the host a conductor message names;
# ``to``: the other host it names, a destination, a source or an alternate).
OWN = "own"  # the victim's host
ELSEWHERE = "elsewhere"  # a host of the other simulator process
THIRD = "third"  # another host of that process, not ``at``
SRC, DST = "src", "dst"  # where the earlier operation moved it from, and to
OTHER = "other"  # the other instance's host
# Migrations.
FRESH = "fresh"  # named after this row's own request id, as a new move's is
OWN_UUID = "own-uuid"  # the victim's own uuid
OWN_REQUEST = "own-request"  # named after the victim's boot request id
EARLIER = "earlier"  # the earlier operation's real migration (and request id)
OTHER_UUID = "other-uuid"  # the other instance's uuid
OTHER_MIGRATION = "other-migration"  # the other (RESIZED) instance's real migration
# Request ids (the migration tokens ``earlier`` also name one).
ROW = "row"  # this row's own
BOOT = "boot"  # the victim's boot request
OTHER_BOOT = "other-boot"  # the other instance's boot request


@dataclass(frozen=True)
class Case:
    """One row: ``method`` as a ``kind`` (a-d) message at a victim with
    ``history`` (and, with ``other``, a second instance of that history whose
    ids it names), sent ``times`` times; ``na``: why the kind makes no sense
    for the method (nothing sent)."""

    method: str
    kind: str
    at: str = OWN
    mig: str | None = None
    to: str | None = None
    rid: str = ROW
    history: str = BOOTED
    other: str | None = None
    times: int = 1
    variant: str = ""
    na: str = ""

    @property
    def name(self) -> str:
        if self.variant == "2":  # a second row of that kind
            return f"{self.method} ({self.kind}2)"
        return f"{self.method}{self.variant} ({self.kind})"

    @property
    def topic(self) -> str:
        return "compute" if self.method in COMPUTE_METHODS else "conductor"

    def describe(self) -> str:
        ids = [] if self.method in HOSTLESS else [f"at={self.at}"]
        ids += [f"{k}={v}" for k, v in (("mig", self.mig), ("to", self.to)) if v]
        ids.append(f"rid={self.rid}")
        if self.other:
            ids.append(f"other={self.other}")
        return f"{self.history}: " + " ".join(ids) + (" x2" if self.times == 2 else "")


def row(method: str, kind: str, **ids: Any) -> Case:
    return Case(method, kind, **ids)


def replay(method: str, history: str, **ids: Any) -> Case:
    """A (b) row: the earlier operation's migration and request id."""
    return Case(method, "b", history=history, rid=EARLIER, **{"mig": EARLIER, **ids})


def na(method: str, kind: str, why: str) -> Case:
    return Case(method, kind, na=why)


NO_REPLAY_TERMINATE = (
    "only a delete sends it, and the instance is DELETED for good after it "
    "(nothing that is ACTIVE again got one)"
)
NO_REPLAY_REAP = (
    "only the reconciler sends it, for a VM no live record keeps on its host "
    "(nothing an instance ACTIVE again went through sends one)"
)
NO_REPLAY_SCHEDULE_FAILED = (
    "a real one ends its instance in ERROR for good (an instance in ERROR is never ACTIVE again)"
)

#: The table. Compute rows: ``at`` is the host the cast goes to (a move's
#: destination for prep/finish/revert/check-destination/post/rebuild, its
#: source for resize_instance/confirm/finish_revert/check-source), ``to`` the
#: other host named. Conductor rows: ``at`` is the host the message names (built
#: on, failed on, landed on), ``to`` the alternate offered.
CASES: list[Case] = [
    # compute: builds
    row("build_and_run_instance", "a", rid=BOOT, times=2),
    Case("build_and_run_instance", "b", rid=BOOT, history=SHELVED_BACK),
    row("build_and_run_instance", "c", at=OTHER, rid=OTHER_BOOT, other=BOOTED),
    row("build_and_run_instance", "d"),  # a new attempt on its own host
    # compute: a request's builds in one cast (a batch of the victim's build alone)
    row("build_and_run_instances", "a", rid=BOOT, times=2),
    Case("build_and_run_instances", "b", rid=BOOT, history=SHELVED_BACK),
    row("build_and_run_instances", "c", at=OTHER, rid=OTHER_BOOT, other=BOOTED),
    row("build_and_run_instances", "d"),
    # compute: resize and cold migration
    row("prep_resize", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("prep_resize", CONFIRMED, at=DST),
    row("prep_resize", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("prep_resize", "d", at=ELSEWHERE, mig=OWN_REQUEST, rid=BOOT),
    row("resize_instance", "a", mig=FRESH, to=ELSEWHERE, times=2),
    replay("resize_instance", REVERTED, at=SRC, to=DST),
    row("resize_instance", "c", mig=OTHER_UUID, to=ELSEWHERE, other=BOOTED),
    row("resize_instance", "d", mig=OWN_UUID, to=ELSEWHERE),
    row("finish_resize", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("finish_resize", REVERTED, at=DST),
    row("finish_resize", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("finish_resize", "d", at=ELSEWHERE, mig=OWN_REQUEST, rid=BOOT),
    row("confirm_resize", "a", mig=FRESH, times=2),
    replay("confirm_resize", CONFIRMED, at=SRC),
    row("confirm_resize", "c", mig=OTHER_UUID, other=BOOTED),
    row("confirm_resize", "d", mig=OWN_REQUEST, rid=BOOT),
    Case("confirm_resize", "d", SRC, EARLIER, rid=EARLIER, history=WAITING, variant="2"),
    row("revert_resize", "a", mig=FRESH, times=2),
    replay("revert_resize", REVERTED, at=DST),
    row("revert_resize", "c", mig=OTHER_UUID, other=BOOTED),
    row("revert_resize", "d", mig=OWN_REQUEST, rid=BOOT),
    Case("revert_resize", "d", DST, EARLIER, rid=EARLIER, history=WAITING, variant="2"),
    row("finish_revert_resize", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("finish_revert_resize", REVERTED_THEN_MOVED, at=SRC),
    row("finish_revert_resize", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("finish_revert_resize", "d", at=ELSEWHERE, mig=OWN_REQUEST, rid=BOOT),
    Case("finish_revert_resize", "d", SRC, EARLIER, rid=EARLIER, history=WAITING, variant="2"),
    # compute: live migration
    row("check_can_live_migrate_destination", "a", at=ELSEWHERE, mig=FRESH, to=OWN, times=2),
    replay("check_can_live_migrate_destination", LIVE_TWICE, at=DST, to=SRC),
    row("check_can_live_migrate_destination", "c", at=OTHER, mig=OTHER_UUID, to=OWN, other=BOOTED),
    row(
        "check_can_live_migrate_destination", "d", at=ELSEWHERE, mig=OWN_REQUEST, to=OWN, rid=BOOT
    ),
    row("check_can_live_migrate_source", "a", mig=FRESH, to=ELSEWHERE, times=2),
    replay("check_can_live_migrate_source", LIVE_TWICE, at=SRC, to=DST),
    row("check_can_live_migrate_source", "c", mig=OTHER_UUID, to=OTHER, other=BOOTED),
    row("check_can_live_migrate_source", "d", mig=OWN_REQUEST, to=ELSEWHERE, rid=BOOT),
    row("post_live_migration_at_destination", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("post_live_migration_at_destination", LIVE_TWICE, at=DST),
    row("post_live_migration_at_destination", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("post_live_migration_at_destination", "d", at=ELSEWHERE, mig=OWN_REQUEST, rid=BOOT),
    # compute: evacuation
    row("rebuild_instance", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("rebuild_instance", EVACUATED, at=DST),
    row("rebuild_instance", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("rebuild_instance", "d", mig=OWN_REQUEST, rid=BOOT),
    # compute: delete, reap, shelve
    row("terminate_instance", "a", times=2),
    na("terminate_instance", "b", NO_REPLAY_TERMINATE),
    row("terminate_instance", "c", at=OTHER, other=BOOTED),
    row("terminate_instance", "d", rid=BOOT),
    row("reap_instance", "a", times=2),
    na("reap_instance", "b", NO_REPLAY_REAP),
    row("reap_instance", "c", at=OTHER, other=BOOTED),
    row("reap_instance", "d", rid=BOOT),
    row("shelve_offload_instance", "a", times=2),
    Case("shelve_offload_instance", "b", rid=EARLIER, history=SHELVED_BACK),
    row("shelve_offload_instance", "c", at=OTHER, other=BOOTED),
    row("shelve_offload_instance", "d", rid=BOOT),
    # conductor: builds
    row("build_succeeded", "a", rid=BOOT, times=2),
    Case("build_succeeded", "b", rid=BOOT, history=SHELVED_BACK),
    row("build_succeeded", "c", at=OTHER, other=BOOTED),
    row("build_succeeded", "d"),
    row("reschedule", "a", to=ELSEWHERE, times=2),
    Case("reschedule", "b", FAILING, to=OWN, rid=BOOT, history=RESCHEDULED),
    row("reschedule", "c", at=OTHER, to=OTHER, other=BOOTED),
    row("reschedule", "d", to=ELSEWHERE, rid=BOOT),
    # ... a resize's (with migration_uuid)
    row("reschedule", "a", at=ELSEWHERE, mig=FRESH, to=THIRD, times=2, variant="-resize"),
    replay("reschedule", PREP_FAILED, at=FAILING, variant="-resize"),
    row(
        "reschedule", "c", at=ELSEWHERE, mig=OTHER_UUID, to=THIRD, other=BOOTED, variant="-resize"
    ),
    row("reschedule", "d", at=ELSEWHERE, mig=OWN_REQUEST, to=THIRD, rid=BOOT, variant="-resize"),
    row("schedule_failed", "a", times=2),
    na("schedule_failed", "b", NO_REPLAY_SCHEDULE_FAILED),
    row("schedule_failed", "c", rid=OTHER_BOOT, other=BOOTED),
    row("schedule_failed", "d", rid=BOOT),
    # conductor: resize and cold migration
    row("resize_result", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("resize_result", CONFIRMED, at=DST),
    row("resize_result", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("resize_result", "d", mig=OWN_REQUEST, rid=BOOT),
    row("resize_confirmed", "a", mig=FRESH, times=2),
    replay("resize_confirmed", CONFIRMED),
    row("resize_confirmed", "c", mig=OTHER_MIGRATION, other=WAITING),
    row("resize_confirmed", "d", mig=OWN_REQUEST, rid=BOOT),
    Case("resize_confirmed", "d", DST, EARLIER, rid=EARLIER, history=WAITING, variant="2"),
    row("resize_reverted", "a", mig=FRESH, times=2),
    replay("resize_reverted", REVERTED),
    row("resize_reverted", "c", mig=OTHER_MIGRATION, other=WAITING),
    row("resize_reverted", "d", mig=OWN_REQUEST, rid=BOOT),
    Case("resize_reverted", "d", DST, EARLIER, rid=EARLIER, history=WAITING, variant="2"),
    # conductor: live migration
    row("live_migration_precheck_failed", "a", at=ELSEWHERE, mig=FRESH, to=THIRD, times=2),
    replay("live_migration_precheck_failed", PRECHECK_FAILED, at=FAILING),
    row(
        "live_migration_precheck_failed", "c", at=ELSEWHERE, mig=OTHER_UUID, to=THIRD, other=BOOTED
    ),
    row("live_migration_precheck_failed", "d", at=ELSEWHERE, mig=OWN_REQUEST, to=THIRD, rid=BOOT),
    row("live_migrated", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("live_migrated", LIVE_TWICE, at=DST),
    row("live_migrated", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("live_migrated", "d", mig=OWN_REQUEST, rid=BOOT),
    # conductor: evacuation
    row("rebuild_result", "a", at=ELSEWHERE, mig=FRESH, times=2),
    replay("rebuild_result", EVACUATED, at=DST),
    row("rebuild_result", "c", at=OTHER, mig=OTHER_UUID, other=BOOTED),
    row("rebuild_result", "d", mig=OWN_REQUEST, rid=BOOT),
    # conductor: delete, shelve
    row("instance_terminated", "a", times=2),
    na("instance_terminated", "b", NO_REPLAY_TERMINATE),
    row("instance_terminated", "c", at=OTHER, other=BOOTED),
    row("instance_terminated", "d", rid=BOOT),
    row("instance_shelved", "a", times=2),
    Case("instance_shelved", "b", rid=EARLIER, history=SHELVED_BACK),
    row("instance_shelved", "c", at=OTHER, other=BOOTED),
    row("instance_shelved", "d", rid=BOOT),
]

#: Every state-changing method of each endpoint: each has a row of every kind
#: (or a row saying why the kind makes no sense).
COMPUTE_METHODS = (
    "build_and_run_instance",
    "build_and_run_instances",
    "prep_resize",
    "resize_instance",
    "finish_resize",
    "confirm_resize",
    "revert_resize",
    "finish_revert_resize",
    "check_can_live_migrate_destination",
    "check_can_live_migrate_source",
    "post_live_migration_at_destination",
    "rebuild_instance",
    "terminate_instance",
    "reap_instance",
    "shelve_offload_instance",
)
CONDUCTOR_METHODS = (
    "build_succeeded",
    "reschedule",
    "schedule_failed",
    "resize_result",
    "resize_confirmed",
    "resize_reverted",
    "live_migration_precheck_failed",
    "live_migrated",
    "rebuild_result",
    "instance_terminated",
    "instance_shelved",
)


def test_the_table_covers_every_method_and_kind() -> None:
    """A row of each kind for every state-changing method, and for both forms of
    ``reschedule``; every row named once; every message a method."""
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), Counter(names).most_common(3)
    # ... every method the compute's and the conductor's servers answer.
    assert set(COMPUTE_METHODS) == set(exposed_methods(ComputeManager))
    assert set(CONDUCTOR_METHODS) == set(exposed_methods(ConductorEndpoint))
    have = {(c.method, c.kind) for c in CASES}
    for method in (*COMPUTE_METHODS, *CONDUCTOR_METHODS):
        assert {k for m, k in have if m == method} == set("abcd"), method
        assert method in SENDERS, method
    assert {c.kind for c in CASES if c.variant == "-resize"} == set("abcd")
    assert {c.method for c in CASES} == {*COMPUTE_METHODS, *CONDUCTOR_METHODS}


# --- making and sending the messages ------------------------------------------------------


@dataclass
class Victim:
    """An instance a row forges messages about, and what it went through."""

    uuid: str
    history: str
    boot_rid: str
    #: Its record as the forging starts.
    record: InstanceRecord = field(repr=False)
    #: The earlier operation's record as it started (request id, request spec,
    #: source, the host an admin named), the host it moved from and to.
    op: InstanceRecord | None = field(default=None, repr=False)
    src: str = ""
    dst: str = ""

    @property
    def host(self) -> str:
        assert self.record.host is not None
        return self.record.host

    @property
    def spec(self) -> RequestSpec:
        assert self.record.request_spec is not None
        return RequestSpec.from_primitive(dict(self.record.request_spec))

    @property
    def op_rid(self) -> str:
        assert self.op is not None and self.op.request_id is not None
        return self.op.request_id

    @property
    def mig(self) -> str:
        """The earlier operation's migration (named after its request id)."""
        return migration_uuid_for(self.uuid, self.op_rid)

    @property
    def op_spec(self) -> RequestSpec:
        """The request spec the earlier operation's steps carried."""
        if self.op is not None and self.history in COLD:
            return resize_spec(self.op)[0]
        if self.op is not None and self.history in MOVED:
            return move_spec(self.op)
        return self.spec


@dataclass
class Msg:
    """One message, its ids resolved: about ``v``, under migration ``mig``, to
    (or naming) host ``at``, naming ``to`` too, in context ``ctxt``."""

    v: Victim
    mig: str
    at: str
    to: str | None
    ctxt: rpc.RequestContext
    spec: RequestSpec

    @property
    def uuid(self) -> str:
        return self.v.uuid

    def sel(self, host: str | None) -> Selection:
        """A Selection of ``host`` for the instance, as the scheduler returns one."""
        assert host is not None
        spec = self.spec
        return Selection(
            host=host,
            node=host,
            provider_uuid=provider_uuid(host),
            allocation_request=AllocationRequest(
                {provider_uuid(host): spec.resources}, spec.project_id, spec.user_id
            ),
            weight=1.0,
        )

    def alternates(self) -> list[Selection]:
        return [self.sel(self.to)] if self.to else []


def process_of(host: str) -> str:
    return host.rsplit("-", 1)[0]


Clients = tuple[rpc.ComputeClient, rpc.ConductorClient]
#: The conductor methods that name no host.
HOSTLESS = ("schedule_failed", "resize_confirmed", "resize_reverted")
#: What the simulators say of a build, a resize's prep and a pre-check that failed.
BUILD_FAILED = "simulated build failure"
PREP_FAILED_REASON = "simulated resize failure"
PRECHECK_FAILED_REASON = "simulated live migration pre-check failure on the destination"

#: How each method's message is made of a Msg: compute casts go to ``m.at``.
SENDERS: dict[str, Callable[[Clients, Msg], None]] = {
    "build_and_run_instance": lambda c, m: c[0].build_and_run_instance(
        m.ctxt, m.uuid, m.spec, m.sel(m.at), m.alternates()
    ),
    "build_and_run_instances": lambda c, m: c[0].build_and_run_instances(
        m.ctxt, m.spec, [(m.uuid, [m.sel(m.at), *m.alternates()])]
    ),
    "prep_resize": lambda c, m: c[0].prep_resize(
        m.ctxt, m.uuid, m.mig, m.spec.flavor, m.spec, m.sel(m.at), m.alternates()
    ),
    "resize_instance": lambda c, m: c[0].resize_instance(
        m.ctxt, m.at, m.uuid, m.mig, m.to or "", m.to or ""
    ),
    "finish_resize": lambda c, m: c[0].finish_resize(m.ctxt, m.at, m.at, m.uuid, m.mig),
    "confirm_resize": lambda c, m: c[0].confirm_resize(m.ctxt, m.at, m.uuid, m.mig),
    "revert_resize": lambda c, m: c[0].revert_resize(m.ctxt, m.at, m.uuid, m.mig),
    "finish_revert_resize": lambda c, m: c[0].finish_revert_resize(m.ctxt, m.at, m.uuid, m.mig),
    "check_can_live_migrate_destination": lambda c, m: c[0].check_can_live_migrate_destination(
        m.ctxt, m.uuid, m.mig, m.spec, m.sel(m.at), [], m.to or "", False
    ),
    "check_can_live_migrate_source": lambda c, m: c[0].check_can_live_migrate_source(
        m.ctxt, m.at, m.uuid, m.mig, m.spec, m.sel(m.to), [], False
    ),
    "post_live_migration_at_destination": lambda c, m: c[0].post_live_migration_at_destination(
        m.ctxt, m.sel(m.at), m.uuid, m.mig
    ),
    "rebuild_instance": lambda c, m: c[0].rebuild_instance(
        m.ctxt, m.uuid, m.mig, m.spec, m.sel(m.at), []
    ),
    "terminate_instance": lambda c, m: c[0].terminate_instance(m.ctxt, m.at, m.uuid),
    "reap_instance": lambda c, m: c[0].reap_instance(m.ctxt, m.at, m.uuid, "no live record"),
    "shelve_offload_instance": lambda c, m: c[0].shelve_offload_instance(m.ctxt, m.at, m.uuid),
    "build_succeeded": lambda c, m: c[1].build_succeeded(m.ctxt, m.uuid, m.at, m.at),
    "reschedule": lambda c, m: c[1].reschedule(
        m.ctxt,
        m.uuid,
        m.spec,
        m.at,
        PREP_FAILED_REASON if m.mig else BUILD_FAILED,
        m.alternates(),
        migration_uuid=m.mig or None,
    ),
    "schedule_failed": lambda c, m: c[1].schedule_failed(
        m.ctxt, [m.uuid], "No valid host was found.", "forged"
    ),
    "resize_result": lambda c, m: c[1].resize_result(m.ctxt, m.uuid, m.mig, m.at, True),
    "resize_confirmed": lambda c, m: c[1].resize_confirmed(m.ctxt, m.uuid, m.mig),
    "resize_reverted": lambda c, m: c[1].resize_reverted(m.ctxt, m.uuid, m.mig),
    "live_migration_precheck_failed": lambda c, m: c[1].live_migration_precheck_failed(
        m.ctxt, m.uuid, m.mig, m.spec, m.at, PRECHECK_FAILED_REASON, m.alternates()
    ),
    "live_migrated": lambda c, m: c[1].live_migrated(m.ctxt, m.uuid, m.mig, m.at, m.at),
    "rebuild_result": lambda c, m: c[1].rebuild_result(
        m.ctxt, m.uuid, m.mig, m.at, True, node=m.at
    ),
    "instance_terminated": lambda c, m: c[1].instance_terminated(m.ctxt, m.uuid, m.at),
    "instance_shelved": lambda c, m: c[1].instance_shelved(m.ctxt, m.uuid, m.at),
}


@dataclass
class Forged:
    """What one row sent: to which process under which request id, and the
    ids it named that no instance owns (its new migrations)."""

    case: Case
    uuids: list[str]
    sent: list[tuple[str, str]] = field(default_factory=list)
    named: set[str] = field(default_factory=set)


def forge(case: Case, v: Victim, w: Victim | None, hosts: list[str], clients: Clients) -> Forged:
    """Resolve the row's ids for ``v`` (and ``w``) and send its message(s)."""
    rid = {
        ROW: f"req-forged-{case.method}-{case.kind}{case.variant}",
        BOOT: v.boot_rid,
        EARLIER: v.op_rid if v.op else "",
        OTHER_BOOT: w.boot_rid if w else "",
    }[case.rid]

    def elsewhere(*avoid: str) -> str:
        return next(h for h in hosts if process_of(h) != process_of(v.host) and h not in avoid)

    def host(token: str, at: str = "") -> str:
        return {
            OWN: v.host,
            ELSEWHERE: elsewhere(),
            THIRD: elsewhere(at),
            SRC: v.src,
            DST: v.dst,
            OTHER: w.host if w else "",
            FAILING: FAILING,
        }[token]

    at = host(case.at)
    mig = {
        None: "",
        FRESH: migration_uuid_for(v.uuid, rid),
        OWN_UUID: v.uuid,
        OWN_REQUEST: migration_uuid_for(v.uuid, v.boot_rid),
        EARLIER: v.mig if v.op else "",
        OTHER_UUID: w.uuid if w else "",
        OTHER_MIGRATION: w.mig if w and w.op else "",
    }[case.mig]
    assert rid and at and (mig or case.mig is None), (case.name, rid, at, mig)
    done = Forged(case, [v.uuid, *([w.uuid] if w else [])])
    if case.mig in (FRESH, OWN_REQUEST):
        done.named.add(mig)
    spec = v.op_spec if case.rid == EARLIER else v.spec
    for _ in range(case.times):
        ctxt = rpc.RequestContext(request_id=rid, project_id=spec.project_id, user_id=spec.user_id)
        msg = Msg(v, mig, at, host(case.to, at) if case.to else None, ctxt, spec)
        SENDERS[case.method](clients, msg)
        done.sent.append((process_of(at) if case.topic == "compute" else CONDUCTOR, rid))
    return done


# --- reading the daemons' logs ------------------------------------------------------------


class LogTail:
    """A process's JSON log lines, read on from where the last read stopped:
    once :meth:`start` is called, the events logged under each request id."""

    def __init__(self, proc: Process) -> None:
        self.path = Path(proc.log_path)
        self.offset = 0
        self.recording = False
        self.events: dict[str, list[str]] = defaultdict(list)

    def start(self) -> None:
        """Record from the end of the log as it is now."""
        self.read()
        self.recording = True

    def read(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        if not self.recording:
            return
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("request_id"):
                self.events[str(event["request_id"])].append(str(event.get("event")))


# --- the world, before and after ----------------------------------------------------------


@dataclass
class World:
    """Every record, every consumer's allocations, every VM's hosts."""

    records: dict[str, InstanceRecord]
    consumers: dict[str, dict[str, dict[str, int]]]
    running: dict[str, set[str]]

    @classmethod
    def read(cls, cluster: FaultCluster) -> World:
        return cls(
            {r.uuid: r for r in cluster.store.scan_instances()},
            {
                c.uuid: {rp: dict(a) for rp, a in c.allocations.items()}
                for c in cluster.store.list_consumers()
            },
            cluster.running_vms(),
        )


def record_fields(r: InstanceRecord | None) -> tuple[Any, ...] | None:
    """What a step may change of a record: state, task, host, migration, source."""
    return None if r is None else (r.state, r.task_state, r.host, r.migration_uuid, r.source_host)


def on_hosts(cluster: FaultCluster, allocations: dict[str, dict[str, int]] | None) -> str:
    if allocations is None:
        return "nothing"
    return ", ".join(
        f"{cluster.store.get_provider(rp).name} {dict(sorted(a.items()))}"
        for rp, a in sorted(allocations.items())
    )


# --- the test -------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_replayed_and_forged_steps_change_no_instance(
    cluster: FaultCluster, transport: Any
) -> None:
    started = time.monotonic()
    marks: dict[str, float] = {}

    def mark(what: str) -> None:
        marks[what] = round(time.monotonic() - started, 1)

    # Nothing repairs behind the forged messages' back while the test runs.
    cluster.write_config(conductor={"reconcile_interval": 600, "orphan_grace": 600})
    cast = ("--build-results", "cast")  # a build's success is a message to replay
    failing = (
        *("--memory-mb", "131072"),  # the biggest host: the first builds try it
        *("--fail-hosts", FAILING, "--fail-resize-hosts", FAILING),
        *("--live-migration-fail-hosts", FAILING),
    )
    with ThreadPoolExecutor(6) as pool:  # each waits for its process to be ready
        starting = [
            pool.submit(cluster.start_compute, 3, *cast, name="ca"),
            pool.submit(cluster.start_compute, 3, *cast, name="cb"),
            pool.submit(cluster.start_compute, 1, *cast, name="cd"),
            pool.submit(cluster.start_compute, 1, *cast, *failing, name="cf"),
            pool.submit(cluster.start_conductor),
            pool.submit(cluster.start_worker),
        ]
        doomed, failer = starting[2].result(), starting[3].result()
        for started_ in starting:
            started_.result()
    mark("cluster")

    active = [c for c in CASES if not c.na]
    store = cluster.store
    scheduler = rpc.SchedulerClient(transport)
    compute = rpc.ComputeClient(transport, ServiceResolver(store))
    conductor = rpc.ConductorClient(transport)
    booter = Booter(store, scheduler, compute)
    tiny = load_catalog()["m1.tiny"]
    every = [f"{name}-{i:04d}" for name, n in (("ca", 3), ("cb", 3), ("cd", 1)) for i in range(n)]

    def boot(count: int, on: list[str]) -> list[InstanceRecord]:
        """Boot ``count`` instances (a request each) with only the hosts ``on``
        enabled (a worker's view catches up with the store before each request)."""
        for h in (*every, FAILING):
            store.set_service_disabled(h, h not in on, "the test boots elsewhere")
        uuids = booter.boot(rpc.RequestContext(), tiny, count)
        report = booter.wait(uuids, 60, time.monotonic())
        assert report.by_state == {ACTIVE: count}, report.to_primitive()["summary"]
        return report.instances

    # The evacuation's victims on the host whose compute will stop; the rest
    # elsewhere: the failing host first (the biggest), so a build fails there and
    # is rescheduled (onto a host that stays up).
    evacuees = [r.uuid for r in boot(sum(c.history == EVACUATED for c in active), [DOOMED])]
    assert {r.host for r in store.list_instances(evacuees)} == {DOOMED}
    boot(170, [h for h in every if h != DOOMED] + [FAILING])
    mark("boot")

    booted = {r.uuid: r for r in store.scan_instances()}
    hosts = sorted({r.host for r in booted.values() if r.host and process_of(r.host) in SIMS})
    assert len(hosts) == 6, hosts
    failed_first = {
        e["instance_uuid"]
        for e in failer.log_events()
        if e.get("event") == "build_failed" and "instance_uuid" in e
    }

    # --- the victims, each for one row --------------------------------------------------
    free: dict[str, list[str]] = defaultdict(list)
    for r in sorted(booted.values(), key=lambda r: r.uuid):
        if r.host in hosts and r.uuid not in failed_first:
            free[r.host].append(r.uuid)
    shelve_host = max(hosts, key=lambda h: len(free[h]))
    taken: set[str] = set()

    def take(history: str, not_on: str = "") -> str:
        if history == EVACUATED:
            pool_ = evacuees
        elif history == RESCHEDULED:
            pool_ = [u for u in sorted(failed_first) if booted[u].host in hosts]
        elif history == SHELVED_BACK:
            pool_ = free[shelve_host]
        else:  # from the fullest host (of another process than ``not_on``)
            on = sorted(
                (h for h in hosts if not not_on or process_of(h) != process_of(not_on)),
                key=lambda h: -len([u for u in free[h] if u not in taken]),
            )
            pool_ = [u for h in on for u in free[h]]
        left = [u for u in pool_ if u not in taken]
        assert left, f"no instance left for a {history} victim"
        taken.add(left[0])
        return left[0]

    rows: list[tuple[Case, str, str | None]] = []
    for case in sorted(active, key=lambda c: c.history == BOOTED):  # the few first
        v = take(case.history)
        rows.append((case, v, take(case.other, booted[v].host or "") if case.other else None))
    histories = {v: c.history for c, v, _ in rows}
    histories |= {w: c.other for c, _, w in rows if w and c.other}

    def of(*which: str) -> list[str]:
        return sorted(u for u, h in histories.items() if h in which)

    def third(*avoid: str) -> str:
        return next(h for h in hosts if h not in avoid)

    def across(host: str) -> str:
        """A host of the other simulator process."""
        return next(h for h in hosts if process_of(h) != process_of(host))

    # --- what the victims went through before ---------------------------------------------
    settings = ConductorSettings()
    resizer = Resizer(store, scheduler, compute, settings)
    migrator = LiveMigrator(store, scheduler, compute, settings)
    shelver = Shelver(store, scheduler, compute, settings)
    evacuator = Evacuator(store, scheduler, compute, settings)
    ops: dict[str, InstanceRecord] = {}
    src: dict[str, str] = {}
    dst: dict[str, str] = {}

    def settle(uuids: list[str], until: Callable[[InstanceRecord], bool], what: str) -> None:
        wait_until(lambda: all(until(r) for r in store.list_instances(uuids)), 30, what)

    def done(r: InstanceRecord) -> bool:
        return r.state == ACTIVE and r.task_state is None

    # Shelved, then unshelved back onto the same host (the only one enabled).
    for u in of(SHELVED_BACK):
        ops[u] = shelver.shelve(u)
        src[u] = dst[u] = shelve_host
    doomed.stop()  # its host marked down at once: its instances may be evacuated
    settle(of(SHELVED_BACK), lambda r: r.state == SHELVED_OFFLOADED, "the shelves")
    others = [h for h in (*every, FAILING) if h != shelve_host]
    for h in others:
        store.set_service_disabled(h, True, f"the test unshelves onto {shelve_host}")
    try:
        for u in of(SHELVED_BACK):
            shelver.unshelve(u)
        settle(of(SHELVED_BACK), done, "the unshelves")
    finally:
        for h in others:
            store.set_service_disabled(h, h == DOOMED)
    assert {r.host for r in store.list_instances(of(SHELVED_BACK))} == {shelve_host}
    mark("shelved back")

    # Every move's first leg at once, each to a host named (an admin's).
    for u in of(*COLD, LIVE_TWICE, PRECHECK_FAILED):
        src[u] = booted[u].host or ""
        dst[u] = FAILING if histories[u] in (PREP_FAILED, PRECHECK_FAILED) else across(src[u])
        if histories[u] in COLD:
            ops[u] = resizer.migrate(u, host=dst[u], admin=True)
        else:
            ops[u] = migrator.start(u, host=dst[u], admin=True)
    for i, u in enumerate(of(EVACUATED)):
        src[u], dst[u] = DOOMED, hosts[i]
        ops[u] = evacuator.start(u, dst[u], admin=True)
    for u in of(*COLD, *MOVED):
        op = ops[u]
        assert op.request_id, (u, op)
        # The move as it started (the record may have moved on already).
        ops[u] = replace(
            op,
            migration_uuid=migration_uuid_for(u, op.request_id),
            source_host=src[u],
            requested_destination=Destination(host=dst[u]).to_primitive(),
            tried_hosts=(),
        )
    moving = of(*COLD, *MOVED)
    settle(moving, lambda r: r.state not in (RESIZING, MIGRATING, REBUILDING), "the moves")
    for u in of(CONFIRMED):
        resizer.confirm(u)
    for u in of(REVERTED, REVERTED_THEN_MOVED):
        resizer.revert(u)
    for u in of(LIVE_TWICE):
        migrator.start(u, host=third(src[u], dst[u]), admin=True)
    settle(
        moving,
        lambda r: done(r) or (r.state == RESIZED and histories[r.uuid] == WAITING),
        "the confirms, reverts and second live migrations",
    )
    for u in of(REVERTED_THEN_MOVED):
        resizer.migrate(u, host=third(src[u], dst[u]), admin=True)
    settle(of(REVERTED_THEN_MOVED), lambda r: r.state != RESIZING, "the second migrations")
    for u in of(REVERTED_THEN_MOVED):
        resizer.confirm(u)
    settle(of(REVERTED_THEN_MOVED), done, "their confirms")
    mark("histories")

    # --- the world before -------------------------------------------------------------------
    time.sleep(1.0)  # the last steps' log lines
    before = World.read(cluster)
    victims: dict[str, Victim] = {}
    for u, history in histories.items():
        record = before.records[u]
        boot_rid = booted[u].request_id or ""
        victims[u] = Victim(
            u, history, boot_rid, record, ops.get(u), src.get(u, ""), dst.get(u, "")
        )
        where = (u, history, record.state, record.host, record.fault_details)
        assert record.state == (RESIZED if history == WAITING else ACTIVE), where
        assert record.task_state is None and before.running.get(u) == {record.host}, where
        if history in (CONFIRMED, LIVE_TWICE, REVERTED_THEN_MOVED, EVACUATED, WAITING):
            assert record.host not in (src[u], None), where
        if history in (REVERTED, PREP_FAILED, PRECHECK_FAILED, SHELVED_BACK):
            assert record.host == src[u], where
    cluster.check_accounting()

    # --- the forging ----------------------------------------------------------------------
    tails = {p.name: LogTail(p) for p in cluster.processes if p.popen.poll() is None}
    for tail in tails.values():
        tail.start()
    mark("before")
    forged = [
        forge(case, victims[v], victims[w] if w else None, hosts, (compute, conductor))
        for case, v, w in rows
    ]
    mark("sent")
    expected: Counter[tuple[str, str]] = Counter(s for f in forged for s in f.sent)

    def logged() -> int:
        for tail in tails.values():
            tail.read()
        return sum(len(events) for t in tails.values() for events in t.events.values())

    def unhandled() -> set[tuple[str, str]]:
        """(process, request id) of the messages not yet seen handled there: a
        message is, once its process logged a line under its request id (one
        more per message)."""
        logged()
        return {k for k, n in expected.items() if len(tails[k[0]].events[k[1]]) < n}

    deadline = time.monotonic() + 10
    while unhandled() and time.monotonic() < deadline:
        time.sleep(0.2)
    unseen = unhandled()
    # What the handled messages cast on (a finish, a result) lands too: on, until
    # no process has logged a line under their request ids for a second.
    deadline, count, quiet_since = time.monotonic() + 6, logged(), time.monotonic()
    while time.monotonic() - quiet_since < 1.0 and time.monotonic() < deadline:
        time.sleep(0.2)
        if (total := logged()) != count:
            count, quiet_since = total, time.monotonic()
    mark("settled")

    # --- the world after: every difference, charged to the row whose ids it is --------------
    after = World.read(cluster)
    owner: dict[str, str] = {}
    for f in forged:
        for u in f.uuids:
            owner[u] = f.case.name
            owner[before.records[u].migration_uuid or u] = f.case.name
        for named in f.named:
            owner.setdefault(named, f.case.name)
    broken: dict[str, list[str]] = defaultdict(list)

    def who(u: str) -> str:
        return f"{histories.get(u, 'bystander')} {u[:8]}"

    for u in sorted(set(before.records) | set(after.records)):
        b, a = record_fields(before.records.get(u)), record_fields(after.records.get(u))
        if b != a:
            broken[owner.get(u, "(unattributed)")].append(f"{who(u)} record {b} -> {a}")
    for u in sorted(set(before.consumers) | set(after.consumers)):
        held, holds = before.consumers.get(u), after.consumers.get(u)
        if held != holds:
            broken[owner.get(u, "(unattributed)")].append(
                f"{who(u)} allocation {on_hosts(cluster, held)} -> {on_hosts(cluster, holds)}"
            )
    for u in sorted(set(before.running) | set(after.running)):
        if before.running.get(u) != after.running.get(u):
            broken[owner.get(u, "(unattributed)")].append(
                f"{who(u)} VM on {sorted(before.running.get(u, ()))} -> "
                f"{sorted(after.running.get(u, ()))}"
            )
    for f in forged:
        for u in f.uuids:
            now = after.records.get(u)
            if now is None or after.running.get(u) != {now.host}:
                runs = sorted(after.running.get(u, ()))
                broken[f.case.name].append(
                    f"{who(u)} runs on {runs}, its record on {now and now.host}"
                )
    try:
        cluster.check_accounting()
    except AssertionError as exc:
        broken["(cluster) check_accounting"].append(" ".join(str(exc).split())[:800])

    # --- the table ------------------------------------------------------------------------
    width = max(len(c.name) for c in CASES) + 1
    lines = []
    for case in CASES:
        if case.na:
            lines.append(f"{case.name:<{width}} n/a   {case.na}")
            continue
        f = next(f for f in forged if f.case is case)
        verdict = "; ".join(broken[case.name])
        seen = " (not seen handled)" if set(f.sent) & unseen else ""
        rids = dict.fromkeys(rid for _, rid in f.sent)
        handled = "; ".join(
            f"{name}: {', '.join(dict.fromkeys(e for rid in rids for e in tail.events[rid]))}"
            for name, tail in tails.items()
            if any(tail.events[rid] for rid in rids)
        )
        indent = " " * (width + 7)
        lines.append(
            f"{case.name:<{width}} {'FAIL' if verdict else 'ok':<5} {case.describe()}{seen}"
            + f"\n{indent}victims {', '.join(u[:8] for u in f.uuids)} logged: {handled or '-'}"
            + (f"\n{indent}BROKEN: {verdict}" if verdict else "")
        )
    for name in ("(unattributed)", "(cluster) check_accounting"):
        if broken.get(name):
            lines.append(f"{name:<{width}} FAIL  {'; '.join(broken[name])}")
    failed = sorted(n for n, notes in broken.items() if notes)
    figures = {
        "rows": len(active),
        "not_applicable": len(CASES) - len(active),
        "messages": sum(len(f.sent) for f in forged),
        "rows_failed": len([n for n in failed if not n.startswith("(")]),
        "step_refused_logged": sum(
            events.count("step_refused") for t in tails.values() for events in t.events.values()
        ),
        "not_seen_handled": sorted(unseen),
        "seconds": marks,
    }
    report = "\n".join(lines) + "\n" + json.dumps(figures)
    print(f"\nreplayed and forged steps:\n{report}")
    assert not failed, f"{len(failed)} row(s) broke something:\n{report}"
