"""The scheduler worker's RPC endpoint: one method per remote call (see
:mod:`scheduler.manager`)."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from functools import partial
from typing import Any

import oslo_messaging

from scheduler import policy
from scheduler.engine.plugins import UnknownPlugin
from scheduler.engine.preemption import Preemption
from scheduler.exceptions import (
    ConsumerConflict,
    Forbidden,
    InternalError,
    InvalidRequest,
    NoValidHost,
    SchedulerUnavailable,
    StoreUnavailable,
)
from scheduler.log import bind_request
from scheduler.manager.stages import LOG, RESIZE, RUN_INSTANCE, Stages, call_errors
from scheduler.notifications import (
    InstanceScheduledPayload,
    ResizePayload,
    SchedulingPayload,
    SelectionPayload,
    legacy_uuids,
    listed,
)
from scheduler.objects import (
    Flavor,
    RequestSpec,
    Selection,
    migration_uuid_for,
    validate_host_name,
    validate_instance_uuids,
    validate_uuid,
)
from scheduler.rpc import expected_exceptions
from scheduler.store import PlacementStore

#: Namespace of the instance uuids ``explain`` makes up for its dry run.
_EXPLAIN_NAMESPACE = uuidlib.UUID("0c2f6d7e-95a4-4e47-8a61-3b5c1e0f7d20")


def park(store: PlacementStore, instance_uuid: str, migration_uuid: str, move: str) -> None:
    """Move the instance's allocation (its source's) to the migration consumer
    of a move, once: a repeat (a re-drive) finds it there and moves nothing.

    :raises InvalidRequest: neither holds any allocation (nothing to ``move``).
    """
    try:
        if store.move_allocations(instance_uuid, migration_uuid):
            return
    except ConsumerConflict:
        return  # the migration holds the source already: this is a re-drive
    if store.get_consumer(migration_uuid) is None:
        raise InvalidRequest(reason=f"instance {instance_uuid} holds no allocation to {move}")


#: The longest request id taken from a caller (it is bound to every log line).
MAX_REQUEST_ID = 128


def request_id_of(ctxt: Any) -> str:
    """The caller's request id, or a new one when it sent none or nonsense."""
    value = getattr(ctxt, "request_id", None)
    if isinstance(value, str) and 0 < len(value) <= MAX_REQUEST_ID:
        return value
    return f"req-{uuidlib.uuid4()}"


def _safe_uuids(raw: Any) -> list[str]:
    """The instance uuids of a request that failed validation, as far as they are
    readable (each once, in order), so the conductor can still put every one of
    those instances in ERROR: a request may hold any number of them, over the
    limit too, and none may be left behind for the conductor to re-drive."""
    if not isinstance(raw, list | tuple):
        return []
    out = []
    for value in raw:
        try:
            out.append(validate_uuid(value, "instance_uuids[]"))
        except InvalidRequest:
            continue
    return list(dict.fromkeys(out))


def _listed(uuids: Sequence[str]) -> dict[str, Any]:
    """The instance uuids as a log line carries them (as the notifications do)."""
    return legacy_uuids(*listed(uuids))


def _selected(selections: dict[str, list[Selection]]) -> tuple[SelectionPayload, ...]:
    """The placed instances as the notifications carry them, in request order."""
    return tuple(SelectionPayload.of(uuid, per) for uuid, per in selections.items())


class SchedulerEndpoint(Stages):
    """topic ``scheduler``: select_destinations, explain and run_filter (calls),
    run_instance and resize (casts). Serves every version up to 1.4 (see
    SchedulerClient)."""

    target = oslo_messaging.Target(version="1.4")

    # --- calls ----------------------------------------------------------------------

    @expected_exceptions(
        InvalidRequest, NoValidHost, Forbidden, SchedulerUnavailable, InternalError
    )
    def select_destinations(
        self,
        ctxt: Any,
        request_spec: Any,
        instance_uuids: Any,
        return_alternates: bool = True,
        return_zones: bool = False,
    ) -> list[list[dict[str, Any]]]:
        """Selections per instance, primary first; the primaries are claimed.

        One instance that finds no host may be placed by evicting
        (:meth:`Stages._preempt`, for a boot the conductor recorded): its one
        Selection, no alternate. The build its caller casts is refused by
        the compute until the victims are gone; the conductor casts it then
        (:mod:`conductor_stub.tasks.preempt`).

        Each carries its host's availability zone only if the client asked for
        it (``return_zones``, RPC 1.3): an older client's Selection refuses
        the field.
        """
        request_id = request_id_of(ctxt)
        with bind_request(request_id=request_id), call_errors("select_destinations"):
            per_instance = self.destinations(
                ctxt, request_id, request_spec, instance_uuids, return_alternates, return_zones
            )
            return [
                [(s if return_zones else s.without_zone()).to_primitive() for s in per]
                for per in per_instance
            ]

    def destinations(
        self,
        ctxt: Any,
        request_id: str,
        request_spec: Any,
        instance_uuids: Any,
        return_alternates: Any,
        return_zones: Any = False,
    ) -> list[list[Selection]]:
        """What ``select_destinations`` decides, before it is put on the wire:
        Selections per instance of ``instance_uuids``, in their order, primary
        first, the primaries claimed. The one decision path of every
        ``select_destinations`` endpoint (this one, and Nova's in
        :mod:`scheduler.nova_compat`); the caller binds ``request_id`` and
        wraps it in :func:`call_errors`. ``return_zones`` is only checked here
        (the caller drops the zones it was not asked for)."""
        spec = self._read_spec(request_spec)
        policy.check_request(ctxt, spec)
        uuids = validate_instance_uuids(instance_uuids, spec.num_instances)
        for name, flag in (
            ("return_alternates", return_alternates),
            ("return_zones", return_zones),
        ):
            if not isinstance(flag, bool):
                raise InvalidRequest(reason=f"{name} must be a boolean")
        with self._selecting(ctxt, spec, uuids) as end:
            try:
                selections = self._select(
                    "select_destinations",
                    request_id,
                    spec,
                    uuids,
                    return_alternates=return_alternates,
                )
            except NoValidHost as exc:
                found = self._preempting(ctxt, request_id, spec, uuids, exc)
                if found is None:
                    raise
                # Claimed by evicting; the caller's build waits on the victims.
                selections = {uuids[0]: [found.selection]}
            end["selections"] = _selected(selections)
        # An instance deleted meanwhile gets an empty list (no host, nothing claimed).
        return [selections.get(u, []) for u in uuids]

    @expected_exceptions(InvalidRequest, Forbidden, SchedulerUnavailable, InternalError)
    def explain(
        self,
        ctxt: Any,
        request_spec: Any,
        instance_uuids: Any = None,
        all_hosts: Any = False,
    ) -> dict[str, Any]:
        """Admin only: the pipeline as a dry run, and why it decided as it did.

        Nothing is claimed and the worker's view is left as it was (the
        engine consumes for later instances of the request, then gives it
        back). The context's request id and ``instance_uuids`` (1.4; made up
        when not given) seed the random draws, so with those of a real
        request every tie falls as it would for ``select_destinations``.
        With ``all_hosts`` (1.4) every stage's hosts are listed by name.
        Returns :meth:`ExplainReport.to_primitive`.
        """
        request_id = request_id_of(ctxt)
        with bind_request(request_id=request_id), call_errors("explain"):
            self._require_admin(ctxt, "explain", refused="explain_refused")
            spec = self._read_spec(request_spec)
            if instance_uuids is None:
                uuids: Sequence[str] = [
                    str(uuidlib.uuid5(_EXPLAIN_NAMESPACE, f"{request_id}/{n}"))
                    for n in range(spec.num_instances)
                ]
            else:
                uuids = validate_instance_uuids(instance_uuids, spec.num_instances)
            if not isinstance(all_hosts, bool):
                raise InvalidRequest(reason="all_hosts must be a boolean")
            report = self.engine.explain(request_id, spec, uuids, all_hosts=all_hosts)
            LOG.info(
                "explained",
                user_id=getattr(ctxt, "user_id", None),
                placeable=report.placeable,
                details=report.summary,
            )
            return report.to_primitive()

    @expected_exceptions(InvalidRequest, Forbidden, SchedulerUnavailable, InternalError)
    def run_filter(self, ctxt: Any, request_spec: Any, filter_name: Any) -> dict[str, Any]:
        """Admin only (1.4): host filter ``filter_name`` alone on every host, for
        the request; returns :meth:`StageHosts.to_primitive`. An unregistered
        name is refused as InvalidRequest, naming the registered ones."""
        request_id = request_id_of(ctxt)
        with bind_request(request_id=request_id), call_errors("run_filter"):
            self._require_admin(ctxt, "run_filter", refused="run_filter_refused")
            spec = self._read_spec(request_spec)
            if not isinstance(filter_name, str):
                raise InvalidRequest(reason="filter_name must be a string")
            try:
                run = self.engine.run_filter(filter_name, spec)
            except UnknownPlugin as exc:
                raise InvalidRequest(reason=exc.message) from None
            LOG.info(
                "filter_run",
                user_id=getattr(ctxt, "user_id", None),
                filter=filter_name,
                removed=len(run.removed),
                hosts=run.hosts,
            )
            return run.to_primitive()

    def _require_admin(self, ctxt: Any, method: str, refused: str) -> None:
        """:class:`Forbidden` unless an admin context, logged as event ``refused``."""
        try:
            policy.require_admin(ctxt, method)
        except Forbidden:
            LOG.warning(
                refused,
                user_id=getattr(ctxt, "user_id", None),
                project_id=getattr(ctxt, "project_id", None),
            )
            raise

    # --- casts ----------------------------------------------------------------------

    def run_instance(self, ctxt: Any, request_spec: Any, instance_uuids: Any) -> None:
        """Select, claim and cast the builds (one cast per compute process);
        failures go to the conductor.

        A request is read whole first, so the notifications carry the spec as
        understood (a refused one: only its readable instance uuids, never a
        bulky or malformed payload). Bad input, no valid host and internal
        errors put the instances in ERROR (through the conductor) with the
        user-safe reason. A store that cannot be reached fails nothing: the
        request is dropped, logged, and the conductor re-drives it once its
        deadline passes (scheduling is idempotent per instance uuid).
        """
        request_id = request_id_of(ctxt)
        with bind_request(request_id=request_id):
            spec: RequestSpec | None = None
            refused: InvalidRequest | Forbidden | None = None
            try:
                spec = self._read_spec(request_spec)
                policy.check_request(ctxt, spec)
                uuids = validate_instance_uuids(instance_uuids, spec.num_instances)
            except (InvalidRequest, Forbidden) as exc:
                refused = exc
                uuids = tuple(_safe_uuids(instance_uuids))
            read = spec if refused is None else None
            payload = SchedulingPayload.starting(
                read, uuids, priority_class=self._priority_of(read)
            )
            with self.notifier.action(ctxt, "run_instance", payload) as end:
                try:
                    if refused is not None:
                        raise refused
                    assert spec is not None
                    selections = self._select("run_instance", request_id, spec, uuids)
                except Exception as exc:
                    failure: Exception = exc
                    try:
                        found = self._preempting(ctxt, request_id, spec, uuids, exc)
                    except StoreUnavailable as down:  # dropped: the re-drive carries on
                        found, failure = None, down
                    if found is not None:  # placed; the conductor builds it
                        end["selections"] = (SelectionPayload.of(uuids[0], [found.selection]),)
                        return
                    self._cast_failed(
                        ctxt,
                        RUN_INSTANCE,
                        end,
                        uuids,
                        failure,
                        partial(self._schedule_failed, ctxt, uuids),
                        **_listed(uuids),
                    )
                    return
                end["selections"] = tuple(
                    self._scheduled(ctxt, uuid, per_instance)
                    for uuid, per_instance in selections.items()
                )
                placed = [(uuid, chosen) for uuid, chosen in selections.items() if chosen]
                if placed:
                    self.compute.build_and_run_instances(ctxt, spec, placed)

    def _preempting(
        self,
        ctxt: Any,
        request_id: str,
        spec: RequestSpec | None,
        uuids: Sequence[str],
        exc: Exception,
    ) -> Preemption | None:
        """A boot of one instance that found no host, placed by evicting
        (:meth:`Stages._preempt`); None for anything else. A request of
        several instances does not preempt (each would wait on its own
        victims); nor does a move (its record is not BUILDING, so the store's
        step refuses it), nor a request with no record of the conductor's
        (Nova's own ``select_destinations``)."""
        if not isinstance(exc, NoValidHost) or spec is None or len(uuids) != 1:
            return None
        try:
            return self._preempt(ctxt, request_id, spec, uuids[0])
        except StoreUnavailable:
            raise
        except Exception:  # noqa: BLE001 - the boot fails as it would have
            LOG.exception("preemption_failed", instance_uuid=uuids[0])
            return None

    def _scheduled(
        self, ctxt: Any, instance_uuid: str, per_instance: Sequence[Selection]
    ) -> SelectionPayload:
        """``scheduler.run_instance.scheduled`` for one instance; returns the
        selection as the notifications carry it. The builds are cast after
        every instance's, one cast per compute process."""
        primary, alternates = per_instance[0], per_instance[1:]
        selection = SelectionPayload.of(instance_uuid, per_instance)
        with bind_request(instance_uuid=instance_uuid, host=primary.host):
            self.notifier.info(
                ctxt, "scheduler.run_instance.scheduled", InstanceScheduledPayload(selection)
            )
            LOG.info(
                "instance_scheduled",
                weight=round(primary.weight, 4),
                alternates=[a.host for a in alternates],
            )
        return selection

    def resize(
        self, ctxt: Any, instance_uuid: Any, source_host: Any, new_flavor: Any, request_spec: Any
    ) -> None:
        """Park the instance's allocation on a migration consumer, claim the new
        flavor for the instance on a destination (plus alternates), and cast
        prep_resize there.

        The source is excluded unless ``allow_resize_to_same_host``. A resize
        that cannot be placed hands the allocation back to the instance, which
        stays ACTIVE on its source; the conductor records the fault. A
        re-driven resize (same request id, so the same migration) finds the
        move done and the destination claimed, and casts prep_resize again.
        A store that cannot be reached fails nothing (the re-drive carries
        on); an internal error hands the source back and fails the resize.
        """
        request_id = request_id_of(ctxt)
        with bind_request(request_id=request_id, instance_uuid=str(instance_uuid)[:64]):
            asked = {
                "instance_uuid": str(instance_uuid)[:64],
                "source_host": source_host,
                "new_flavor": new_flavor.get("name") if isinstance(new_flavor, dict) else None,
            }
            # Read whole first, so the notifications carry the request as understood.
            request: tuple[str, Flavor, RequestSpec] | None = None
            refused: Exception | None = None
            try:
                request = self._resize_request(
                    ctxt, instance_uuid, source_host, new_flavor, request_spec
                )
            except Exception as exc:  # the cast's error policy takes it, below
                refused = exc
            readable = _safe_uuids([instance_uuid])
            payload = ResizePayload.starting(
                asked,
                readable[0] if readable else None,
                (source_host, request[1], request[2]) if request is not None else None,
                priority_class=self._priority_of(request[2] if request is not None else None),
            )
            with self.notifier.action(ctxt, "resize", payload) as end:
                try:
                    if refused is not None:
                        raise refused
                    assert request is not None
                    uuid, flavor, spec = request
                    migration_uuid = migration_uuid_for(uuid, request_id)
                    self._park(uuid, migration_uuid)
                except Exception as exc:  # nothing moved: nothing to give back
                    self._cast_failed(
                        ctxt,
                        RESIZE,
                        end,
                        _safe_uuids([instance_uuid]),
                        exc,
                        partial(self._resize_failed, ctxt, instance_uuid, ""),
                    )
                    return
                end["migration_uuid"] = migration_uuid
                try:
                    with self._selecting(ctxt, spec, [uuid], migration_uuid) as chosen:
                        selections = list(
                            self._select(
                                "resize", request_id, spec, [uuid], migration_uuid=migration_uuid
                            ).values()
                        )
                        chosen["selections"] = tuple(
                            SelectionPayload.of(uuid, per) for per in selections
                        )
                    if not selections:  # deleted meanwhile: the delete releases it all
                        self._unpark(uuid, migration_uuid)
                        end["state"] = "deleted"
                        return
                except Exception as exc:  # the source goes back to the instance
                    self._cast_failed(
                        ctxt,
                        RESIZE,
                        end,
                        [uuid],
                        exc,
                        partial(self._resize_failed, ctxt, uuid, migration_uuid),
                        give_back=partial(self._unpark, uuid, migration_uuid),
                    )
                    return
                primary, alternates = selections[0][0], selections[0][1:]
                end["selection"] = SelectionPayload.of(uuid, selections[0])
                LOG.info(
                    "resize_scheduled",
                    host=primary.host,
                    migration_uuid=migration_uuid,
                    alternates=[a.host for a in alternates],
                )
                self.compute.prep_resize(
                    ctxt, uuid, migration_uuid, flavor, spec, primary, alternates
                )

    def _resize_request(
        self, ctxt: Any, instance_uuid: Any, source_host: Any, new_flavor: Any, request_spec: Any
    ) -> tuple[str, Flavor, RequestSpec]:
        """The resize's instance, new flavor and request spec (with the new
        flavor), validated whole and checked against the policy like any
        request, before anything is moved or claimed."""
        uuid = validate_uuid(instance_uuid, "instance_uuid")
        validate_host_name(source_host, "source_host")
        flavor = Flavor.from_primitive(new_flavor)
        spec = self._read_spec(request_spec, new_flavor=flavor)
        policy.check_request(ctxt, spec)
        if not self.allow_resize_to_same_host:
            spec = spec.replace(ignore_hosts=(*spec.ignore_hosts, source_host))
        return uuid, flavor, spec

    def _park(self, instance_uuid: str, migration_uuid: str) -> None:
        """Move the instance's allocation to the migration consumer (once)."""
        park(self.engine.store, instance_uuid, migration_uuid, "resize")

    def _unpark(self, instance_uuid: str, migration_uuid: str) -> None:
        """Hand the source's allocation back to the instance (nothing was placed)."""
        try:
            self.engine.store.move_allocations(migration_uuid, instance_uuid)
        except ConsumerConflict:
            # The instance holds a claim again: a racing copy of this request
            # placed it, and that copy owns the migration now.
            LOG.warning("resize_unpark_superseded", migration_uuid=migration_uuid)
