"""The scheduler worker's RPC endpoint: validate, select, claim, cast, notify.

Each method is cut by stage; the decision itself lives in
:class:`scheduler.engine.pipeline.Engine`. Bad input is refused with
:class:`InvalidRequest` on a call, and on a cast becomes an ERROR
notification plus a ``schedule_failed`` to the conductor (which puts the
instances in ERROR). Nothing is claimed for a request that fails, and the
worker keeps serving.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import oslo_messaging

from scheduler.engine.pipeline import Engine
from scheduler.exceptions import ConsumerConflict, Forbidden, InvalidRequest, NoValidHost
from scheduler.log import bind_request, get_logger
from scheduler.notifier import Notifier
from scheduler.objects import (
    Flavor,
    RequestSpec,
    Selection,
    migration_uuid_for,
    validate_instance_uuids,
    validate_uuid,
)
from scheduler.rpc import ComputeClient, ConductorClient

LOG = get_logger(__name__)


def _request_id(ctxt: Any) -> str:
    return getattr(ctxt, "request_id", None) or f"req-{uuidlib.uuid4()}"


def _safe_uuids(raw: Any) -> list[str]:
    """The instance uuids of a request that failed validation, as far as they are
    readable, so the conductor can still put those instances in ERROR."""
    if not isinstance(raw, list | tuple):
        return []
    out = []
    for value in raw:
        try:
            out.append(validate_uuid(value, "instance_uuids[]"))
        except InvalidRequest:
            continue
    return out


def _spec_summary(spec: RequestSpec) -> dict[str, Any]:
    return {"flavor": spec.flavor.name, "num_instances": spec.num_instances,
            "project_id": spec.project_id, "availability_zone": spec.availability_zone,
            "group": spec.group.uuid if spec.group else None}


class DecisionStats:
    """Counts of decisions and the time spent making them (for demo and metrics)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions = 0
        self.no_valid_host = 0
        self.seconds = 0.0  # summed per decision, waits for the engine included
        self.first_start: float | None = None
        self.last_end = 0.0

    @property
    def per_second(self) -> float:
        """Decisions per second of wall time, from the first one's start to the last one's end."""
        if self.first_start is None or self.last_end <= self.first_start:
            return 0.0
        return self.decisions / (self.last_end - self.first_start)

    @contextmanager
    def timed(self) -> Iterator[None]:
        start = time.perf_counter()
        failed = False
        try:
            yield
        except NoValidHost:
            failed = True
            raise
        finally:
            end = time.perf_counter()
            with self._lock:
                if self.first_start is None:
                    self.first_start = start
                self.last_end = max(self.last_end, end)
                self.decisions += 1
                self.no_valid_host += failed
                self.seconds += end - start


class SchedulerEndpoint:
    """topic ``scheduler``: select_destinations (call), run_instance and resize (casts)."""

    target = oslo_messaging.Target(version="1.0")

    def __init__(self, engine: Engine, compute: ComputeClient, conductor: ConductorClient,
                 notifier: Notifier, allow_resize_to_same_host: bool = False) -> None:
        self.engine = engine
        self.compute = compute
        self.conductor = conductor
        self.notifier = notifier
        self.stats = DecisionStats()
        self.allow_resize_to_same_host = allow_resize_to_same_host

    def _select(self, request_id: str, spec: RequestSpec, uuids: Sequence[str],
                return_alternates: bool = True) -> list[list[Selection]]:
        with self.stats.timed():
            return self.engine.select(request_id, spec, uuids, return_alternates=return_alternates)

    # --- call -----------------------------------------------------------------------

    @oslo_messaging.expected_exceptions(InvalidRequest, NoValidHost, Forbidden)
    def select_destinations(self, ctxt: Any, request_spec: Any, instance_uuids: Any,
                            return_alternates: bool = True) -> list[list[dict[str, Any]]]:
        """Selections per instance, primary first; the primaries are claimed."""
        request_id = _request_id(ctxt)
        with bind_request(request_id=request_id):
            spec = RequestSpec.from_primitive(request_spec)
            uuids = validate_instance_uuids(instance_uuids, spec.num_instances)
            if not isinstance(return_alternates, bool):
                raise InvalidRequest(reason="return_alternates must be a boolean")
            payload = {"request_spec": _spec_summary(spec), "instance_uuids": list(uuids)}
            with self.notifier.action(ctxt, "select_destinations", payload) as end:
                try:
                    selections = self._select(request_id, spec, uuids,
                                              return_alternates=return_alternates)
                except NoValidHost as exc:
                    end["state"] = "error"
                    self._notify_failure(ctxt, "select_destinations", uuids, exc)
                    raise
                end["hosts"] = [s[0].host for s in selections]
            return [[s.to_primitive() for s in per] for per in selections]

    # --- casts ----------------------------------------------------------------------

    def run_instance(self, ctxt: Any, request_spec: Any, instance_uuids: Any) -> None:
        """Select, claim and cast a build per instance; failures go to the conductor."""
        request_id = _request_id(ctxt)
        with bind_request(request_id=request_id):
            payload = {"request_spec": request_spec if isinstance(request_spec, dict) else None,
                       "instance_uuids": _safe_uuids(instance_uuids)}
            with self.notifier.action(ctxt, "run_instance", payload) as end:
                try:
                    spec = RequestSpec.from_primitive(request_spec)
                    uuids = validate_instance_uuids(instance_uuids, spec.num_instances)
                    selections = self._select(request_id, spec, uuids)
                except InvalidRequest as exc:
                    end["state"] = "error"
                    LOG.warning("run_instance_invalid", reason=exc.message)
                    self._fail(ctxt, "run_instance", payload["instance_uuids"],
                               exc.message, exc.message)
                    return
                except NoValidHost as exc:
                    end["state"] = "error"
                    LOG.info("no_valid_host", details=exc.details,
                             instance_uuids=list(uuids))
                    self._fail(ctxt, "run_instance", uuids, exc.message, exc.details)
                    return
                for uuid, per_instance in zip(uuids, selections, strict=True):
                    self._cast_build(ctxt, uuid, spec, per_instance)
                end["hosts"] = [s[0].host for s in selections]

    def _cast_build(self, ctxt: Any, instance_uuid: str, spec: RequestSpec,
                    per_instance: Sequence[Selection]) -> None:
        primary, alternates = per_instance[0], per_instance[1:]
        with bind_request(instance_uuid=instance_uuid, host=primary.host):
            self.notifier.info(ctxt, "scheduler.run_instance.scheduled", {
                "instance_uuid": instance_uuid, "host": primary.host, "node": primary.node,
                "weight": primary.weight, "alternates": [a.host for a in alternates]})
            LOG.info("instance_scheduled", weight=round(primary.weight, 4),
                     alternates=[a.host for a in alternates])
            self.compute.build_and_run_instance(ctxt, instance_uuid, spec.replace(num_instances=1),
                                                primary, alternates)

    def resize(self, ctxt: Any, instance_uuid: Any, source_host: Any, new_flavor: Any,
               request_spec: Any) -> None:
        """Park the instance's allocation on a migration consumer, claim the new
        flavor for the instance on a destination (plus alternates), and cast
        prep_resize there.

        The source is excluded unless ``allow_resize_to_same_host``. A resize
        that cannot be placed hands the allocation back to the instance, which
        stays ACTIVE on its source; the conductor records the fault. A
        re-driven resize (same request id, so the same migration) finds the
        move done and the destination claimed, and casts prep_resize again.
        """
        request_id = _request_id(ctxt)
        with bind_request(request_id=request_id, instance_uuid=str(instance_uuid)[:64]):
            payload = {"instance_uuid": str(instance_uuid)[:64], "source_host": source_host,
                       "new_flavor": new_flavor.get("name") if isinstance(new_flavor, dict)
                       else None}
            with self.notifier.action(ctxt, "resize", payload) as end:
                try:
                    uuid, flavor, spec = self._resize_request(instance_uuid, source_host,
                                                              new_flavor, request_spec)
                    migration_uuid = migration_uuid_for(uuid, request_id)
                    self._park(uuid, migration_uuid)
                except InvalidRequest as exc:
                    end["state"] = "error"
                    LOG.warning("resize_invalid", reason=exc.message)
                    self._notify_failure(ctxt, "resize", _safe_uuids([instance_uuid]), exc)
                    self.conductor.resize_result(ctxt, str(instance_uuid), "", None, False,
                                                 exc.message, exc.message)
                    return
                end["migration_uuid"] = migration_uuid
                try:
                    selections = self._select(request_id, spec, [uuid])
                except NoValidHost as exc:
                    end["state"] = "error"
                    LOG.info("resize_no_valid_host", details=exc.details)
                    self._unpark(uuid, migration_uuid)
                    self._notify_failure(ctxt, "resize", [uuid], exc)
                    self.conductor.resize_result(ctxt, uuid, migration_uuid, None, False,
                                                 exc.message, exc.details)
                    return
                primary, alternates = selections[0][0], selections[0][1:]
                end["host"] = primary.host
                LOG.info("resize_scheduled", host=primary.host, migration_uuid=migration_uuid,
                         alternates=[a.host for a in alternates])
                self.compute.prep_resize(ctxt, uuid, migration_uuid, flavor, spec, primary,
                                         alternates)

    def _resize_request(self, instance_uuid: Any, source_host: Any, new_flavor: Any,
                        request_spec: Any) -> tuple[str, Flavor, RequestSpec]:
        uuid = validate_uuid(instance_uuid, "instance_uuid")
        if not isinstance(source_host, str) or not source_host:
            raise InvalidRequest(reason="source_host must be a host name")
        flavor = Flavor.from_primitive(new_flavor)
        spec = RequestSpec.from_primitive(request_spec).replace(flavor=flavor, num_instances=1)
        if not self.allow_resize_to_same_host:
            spec = spec.replace(ignore_hosts=(*spec.ignore_hosts, source_host))
        return uuid, flavor, spec

    def _park(self, instance_uuid: str, migration_uuid: str) -> None:
        """Move the instance's allocation to the migration consumer (once)."""
        store = self.engine.store
        try:
            if store.move_allocations(instance_uuid, migration_uuid):
                return
        except ConsumerConflict:
            return  # the migration holds the source already: this is a re-drive
        if store.get_consumer(migration_uuid) is None:
            raise InvalidRequest(reason=f"instance {instance_uuid} holds no allocation to resize")

    def _unpark(self, instance_uuid: str, migration_uuid: str) -> None:
        """Hand the source's allocation back to the instance (nothing was placed)."""
        try:
            self.engine.store.move_allocations(migration_uuid, instance_uuid)
        except ConsumerConflict:
            # The instance holds a claim again: a racing copy of this request
            # placed it, and that copy owns the migration now.
            LOG.warning("resize_unpark_superseded", migration_uuid=migration_uuid)

    # --- failures -------------------------------------------------------------------

    def _notify_failure(self, ctxt: Any, action: str, uuids: Sequence[str],
                        exc: InvalidRequest | NoValidHost) -> None:
        # The notification carries the user-safe reason only; admin details
        # stay in the logs and the instance's admin-only fault details.
        self.notifier.error(ctxt, f"scheduler.{action}", {
            "instance_uuids": list(uuids), "state": "error", "reason": exc.message})

    def _fail(self, ctxt: Any, action: str, uuids: Sequence[str], reason: str,
              details: str) -> None:
        self.notifier.error(ctxt, f"scheduler.{action}", {
            "instance_uuids": list(uuids), "state": "error", "reason": reason})
        if uuids:
            self.conductor.schedule_failed(ctxt, list(uuids), reason, details)
