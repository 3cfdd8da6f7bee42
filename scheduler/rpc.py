"""The RPC surface: transports, the context serializer, one client per service.

Each client has one method per remote call and pins the version it sends;
each server endpoint declares its Target version and accepts every 1.x it
knows. Typed objects are converted to primitives here, at the boundary, and
nowhere else.

Delivery is at most once for casts (oslo.messaging acknowledges before the
endpoint runs), so callers that must not lose work keep deadlines and
re-drive; every endpoint is idempotent per instance uuid.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import kombu.exceptions
import oslo_messaging
from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_messaging.rpc.dispatcher import ExpectedException

from scheduler.explain import ExplainReport, StageHosts
from scheduler.log import masked
from scheduler.objects import Flavor, RequestSpec, Selection

#: Modules whose exceptions are rebuilt on the caller's side (oslo.messaging's
#: dispatcher: so that an older server's ``UnsupportedVersion`` arrives typed).
ALLOWED_EXMODS = ["scheduler.exceptions", "oslo_messaging.rpc.dispatcher"]

#: The default topics (``[scheduler] topic``, ``[compute] topic``, ``[conductor]
#: topic``): every daemon and client of one deployment reads them from its
#: config, so two deployments on one vhost keep apart by topic.
SCHEDULER_TOPIC = "scheduler"
COMPUTE_TOPIC = "compute"
CONDUCTOR_TOPIC = "conductor"


class RequestContext(oslo_context.RequestContext):
    """oslo.context's request context; the fields every message carries."""

    @classmethod
    def admin(cls, **kwargs: Any) -> RequestContext:
        kwargs.setdefault("roles", ["admin"])
        return cls(is_admin=True, **kwargs)


class ContextSerializer(oslo_messaging.NoOpSerializer):
    """Carries the request context with every message; entities pass as they are
    (the clients and endpoints convert typed objects themselves)."""

    def serialize_context(self, ctxt: Any) -> dict[str, Any]:
        if isinstance(ctxt, oslo_context.RequestContext):
            return ctxt.to_dict()
        return dict(ctxt or {})

    def deserialize_context(self, ctxt: dict[str, Any]) -> RequestContext:
        return RequestContext.from_dict(ctxt)


def get_transport(conf: cfg.ConfigOpts, url: str | None = None) -> oslo_messaging.Transport:
    return oslo_messaging.get_rpc_transport(conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)


def get_notification_transport(
    conf: cfg.ConfigOpts, url: str | None = None
) -> oslo_messaging.Transport:
    return oslo_messaging.get_notification_transport(conf, url=url)


def get_server(
    transport: oslo_messaging.Transport,
    topic: str,
    server: str,
    endpoints: Sequence[object],
    access_policy: type | None = None,
) -> oslo_messaging.RPCServer:
    """An RPC server of ``endpoints``; ``access_policy``: oslo.messaging's (the
    compute's and the conductor's serve only their declared steps:
    :data:`scheduler.steps.ACCESS_POLICY`)."""
    target = oslo_messaging.Target(topic=topic, server=server)
    return oslo_messaging.get_rpc_server(
        transport,
        target,
        list(endpoints),
        serializer=ContextSerializer(),
        access_policy=access_policy,
    )


_Method = TypeVar("_Method", bound=Callable[..., Any])


def expected_exceptions(*exceptions: type[Exception]) -> Callable[[_Method], _Method]:
    """oslo.messaging's ``expected_exceptions`` for an endpoint method, without
    the traceback: an expected error reaches the caller as its type, message
    and arguments only.

    oslo.messaging replies with the ``exc_info`` that its ``ExpectedException``
    captured, formatted whole (``serialize_remote_exception``: every frame's
    file, line and source, and every chained exception's). Here that
    ``exc_info`` carries no traceback and the error no chained cause, so the
    reply's ``tb`` is the one line ``module.Class: message``; the caller still gets
    the error rebuilt as its own type (:data:`ALLOWED_EXMODS`). Anything else
    the method raises propagates as it is: the RPC server logs it with its
    traceback (and the endpoint's own error policy decides what it says).
    """

    def outer(method: _Method) -> _Method:
        @functools.wraps(method)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except exceptions as exc:
                raise _expected(exc) from None

        return inner  # type: ignore[return-value]

    return outer


def _expected(exc: Exception) -> ExpectedException:
    """``exc`` wrapped for the RPC server, stripped of its traceback and causes,
    and masked (:func:`scheduler.log.masked`: its arguments, message and the
    keyword arguments the caller rebuilds it from), so no secret a request or
    an error's text held goes back to the caller."""
    exc.args = masked(exc.args)
    for name in ("message", "kwargs"):
        if name in vars(exc):
            setattr(exc, name, masked(vars(exc)[name]))
    exc.__cause__ = exc.__context__ = None
    exc.__suppress_context__ = True
    wrapped = ExpectedException()
    wrapped.exc_info = (type(exc), exc.with_traceback(None), None)
    return wrapped


#: What a send raises when the client was given ``retry`` and the broker did not
#: come back in that many attempts (the rabbit driver lets kombu's error through).
SEND_FAILURES: tuple[type[Exception], ...] = (
    oslo_messaging.MessageDeliveryFailure,
    kombu.exceptions.OperationalError,
)


def _client(
    transport: oslo_messaging.Transport,
    topic: str,
    version: str,
    timeout: float | None,
    server: str | None = None,
    retry: int | None = None,
) -> oslo_messaging.RPCClient:
    target = oslo_messaging.Target(topic=topic, version=version, server=server)
    return oslo_messaging.get_rpc_client(
        transport, target, serializer=ContextSerializer(), timeout=timeout, retry=retry
    )


class SchedulerClient:
    """Client of the scheduler worker (topic ``scheduler``).

    Each method pins the version that introduced it, so a newer client still
    talks to an older worker for everything that worker knows (a rolling
    upgrade); a worker serves every 1.x up to its own.

    Versions:
      1.0 - select_destinations, run_instance, resize.
      1.1 - explain(request_spec): admin only; the pipeline as a dry run,
            returning an ExplainReport.
      1.2 - a request_spec may carry force_hosts, force_nodes and
            requested_destination (admin only). A spec that sets none of
            them is sent at its method's own version, so an older worker
            still serves it; one that sets any is sent at 1.2, so an older
            worker refuses it (UnsupportedVersion) rather than ignoring it.
      1.3 - select_destinations(return_zones=True): each Selection, primary
            and alternates, carries its host's availability_zone. Without
            the argument (an older client) a worker leaves the field out, as
            that client's Selection refuses it. The client asks at 1.3 and,
            refused by an older worker (UnsupportedVersion: refused before
            anything ran, nothing claimed), asks again as before 1.3 and
            takes Selections without a zone.
      1.4 - explain(request_spec, instance_uuids, all_hosts): the uuids
            whose random draws the dry run takes (so its ties fall as
            select_destinations' for the same request id and uuids) and
            every host by name; sent at 1.1 when neither is asked for.
            run_filter(request_spec, filter_name): admin only; one host
            filter alone on every host, returning its StageHosts.
    """

    VERSION = "1.4"
    #: The version each method sends.
    SENDS = {
        "select_destinations": "1.0",
        "run_instance": "1.0",
        "resize": "1.0",
        "explain": "1.1",
        "run_filter": "1.4",
    }
    #: The version explain needs for instance uuids or all hosts.
    EXPLAIN_HOSTS_VERSION = "1.4"
    #: The version a request spec with a forced host or destination needs.
    DESTINATION_VERSION = "1.2"
    #: The version whose Selections carry availability_zone.
    ZONE_VERSION = "1.3"

    def __init__(
        self,
        transport: oslo_messaging.Transport,
        topic: str = SCHEDULER_TOPIC,
        timeout: float | None = None,
        server: str | None = None,
        retry: int | None = None,
    ) -> None:
        """``server`` sends every request to that one worker process (its
        server name, ``<host>.<slot>``) instead of any worker on the topic.
        ``retry``: connection attempts a send makes before it raises one of
        :data:`SEND_FAILURES` (None: for ever, as a daemon wants; a command
        that must return gives a number)."""
        self._client = _client(transport, topic, self.VERSION, timeout, server, retry)

    def _prepare(
        self,
        method: str,
        spec: RequestSpec | None = None,
        *,
        needs: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """The call context at the newest of the method's version, ``needs``
        (what an argument sent needs) and the destination version if ``spec``
        forces a host."""
        versions = [self.SENDS[method]]
        if needs is not None:
            versions.append(needs)
        if spec is not None and spec.has_destination:
            versions.append(self.DESTINATION_VERSION)
        version = max(versions, key=lambda v: tuple(int(n) for n in v.split(".")))
        return self._client.prepare(version=version, **kwargs)

    def select_destinations(
        self,
        ctxt: RequestContext,
        spec: RequestSpec,
        instance_uuids: Sequence[str],
        return_alternates: bool = True,
        timeout: float | None = None,
    ) -> list[list[Selection]]:
        """Selections per instance, primary first, each with its zone (none
        from a worker older than 1.3: see the class's versions)."""
        kwargs: dict[str, Any] = {
            "request_spec": spec.to_primitive(),
            "instance_uuids": list(instance_uuids),
            "return_alternates": return_alternates,
        }
        try:
            cctxt = self._prepare(
                "select_destinations", spec, needs=self.ZONE_VERSION, timeout=timeout
            )
            raw = cctxt.call(ctxt, "select_destinations", return_zones=True, **kwargs)
        except oslo_messaging.UnsupportedVersion:
            cctxt = self._prepare("select_destinations", spec, timeout=timeout)
            raw = cctxt.call(ctxt, "select_destinations", **kwargs)
        return [[Selection.from_primitive(s) for s in per_instance] for per_instance in raw]

    def run_instance(
        self, ctxt: RequestContext, spec: RequestSpec, instance_uuids: Sequence[str]
    ) -> None:
        cctxt = self._prepare("run_instance", spec)
        cctxt.cast(
            ctxt,
            "run_instance",
            request_spec=spec.to_primitive(),
            instance_uuids=list(instance_uuids),
        )

    def resize(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        source_host: str,
        new_flavor: Flavor,
        spec: RequestSpec,
    ) -> None:
        cctxt = self._prepare("resize", spec)
        cctxt.cast(
            ctxt,
            "resize",
            instance_uuid=instance_uuid,
            source_host=source_host,
            new_flavor=new_flavor.to_primitive(),
            request_spec=spec.to_primitive(),
        )

    def explain(
        self,
        ctxt: RequestContext,
        spec: RequestSpec,
        timeout: float | None = None,
        instance_uuids: Sequence[str] | None = None,
        all_hosts: bool = False,
    ) -> ExplainReport:
        """Admin only (:class:`~scheduler.exceptions.Forbidden` otherwise).

        The dry run draws its ties from ``ctxt.request_id`` and
        ``instance_uuids`` (the worker makes some up when None); ``all_hosts``
        lists every stage's hosts by name. Either needs a 1.3 worker.
        """
        kwargs: dict[str, Any] = {"request_spec": spec.to_primitive()}
        if instance_uuids is not None:
            kwargs["instance_uuids"] = list(instance_uuids)
        if all_hosts:
            kwargs["all_hosts"] = True
        needs = self.EXPLAIN_HOSTS_VERSION if len(kwargs) > 1 else None
        cctxt = self._prepare("explain", spec, needs=needs, timeout=timeout)
        return ExplainReport.from_primitive(cctxt.call(ctxt, "explain", **kwargs))

    def run_filter(
        self,
        ctxt: RequestContext,
        spec: RequestSpec,
        filter_name: str,
        timeout: float | None = None,
    ) -> StageHosts:
        """Admin only: host filter ``filter_name`` alone on every host, for ``spec``."""
        cctxt = self._prepare("run_filter", spec, timeout=timeout)
        raw = cctxt.call(
            ctxt, "run_filter", request_spec=spec.to_primitive(), filter_name=filter_name
        )
        return StageHosts.from_primitive(raw)

    def cast_raw(self, ctxt: RequestContext, method: str, **kwargs: Any) -> None:
        """Send arbitrary arguments: for tests that check what bad input does."""
        self._client.prepare(version=self.VERSION).cast(ctxt, method, **kwargs)

    def call_raw(self, ctxt: RequestContext, method: str, **kwargs: Any) -> Any:
        return self._client.prepare(version=self.VERSION).call(ctxt, method, **kwargs)


class ComputeClient:
    """Client of compute nodes (topic ``compute``, one server per service).

    A host is reached through its service record's ``rpc_server``: one
    simulator process serves many hosts under one server name. ``resolve``
    maps a host name to that server name.

    Versions:
      1.0 - build_and_run_instance, prep_resize.
      1.1 - resize_instance, finish_resize, confirm_resize, revert_resize.
      1.2 - the selection and host_list of build_and_run_instance and
            prep_resize may carry availability_zone; sent at 1.2 only when
            one does (else at 1.1, as before), so an older compute refuses
            it by version.
      1.3 - terminate_instance. Sent at 1.3 alone (the rest as above, so an
            older compute serves them), so an older compute refuses it
            (UnsupportedVersion) rather than ignoring it.
      1.4 - shelve_offload_instance. Sent at 1.4 alone, likewise.
      1.5 - check_can_live_migrate_destination, check_can_live_migrate_source,
            post_live_migration_at_destination (a live migration). Sent at
            1.5 alone, as terminate_instance is at 1.3.
      1.6 - rebuild_instance (an evacuation's rebuild on its destination).
            Sent at 1.6 alone, so an older compute refuses it by version.
      1.7 - finish_revert_resize (a revert's last step, on the source: the
            destination no longer restarts the source's VM itself). Sent at
            1.7 alone.
      1.8 - reap_instance (the reconciler found a VM there that no live
            record places there). Sent at 1.8 alone.
    """

    VERSION = "1.8"
    #: What every method sends when no Selection it carries names a zone.
    BASE_VERSION = "1.1"
    #: The version a Selection naming a zone needs.
    ZONE_VERSION = "1.2"
    #: The version terminate_instance sends.
    TERMINATE_VERSION = "1.3"
    #: The version shelve_offload_instance sends.
    SHELVE_VERSION = "1.4"
    #: The version the live migration's steps send.
    LIVE_MIGRATION_VERSION = "1.5"
    #: The version rebuild_instance sends.
    REBUILD_VERSION = "1.6"
    #: The version finish_revert_resize sends.
    FINISH_REVERT_VERSION = "1.7"
    #: The version reap_instance sends.
    REAP_VERSION = "1.8"

    def __init__(
        self,
        transport: oslo_messaging.Transport,
        resolve: Callable[[str], str],
        topic: str = COMPUTE_TOPIC,
        retry: int | None = None,
    ) -> None:
        """``retry`` as :class:`SchedulerClient`'s."""
        self._client = _client(transport, topic, self.VERSION, None, retry=retry)
        self._resolve = resolve

    def _at(
        self, host: str, selections: Sequence[Selection] = (), version: str | None = None
    ) -> Any:
        """A context for ``host`` at ``version``, else at the zone's version when a
        Selection names one, else at the base version."""
        if version is None:
            version = self.ZONE_VERSION if _zoned(selections) else self.BASE_VERSION
        return self._client.prepare(server=self._resolve(host), version=version)

    def build_and_run_instance(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        spec: RequestSpec,
        selection: Selection,
        alternates: Sequence[Selection],
    ) -> None:
        cctxt = self._at(selection.host, (selection, *alternates))
        cctxt.cast(
            ctxt,
            "build_and_run_instance",
            instance_uuid=instance_uuid,
            request_spec=spec.to_primitive(),
            selection=selection.to_primitive(),
            host_list=[a.to_primitive() for a in alternates],
        )

    def prep_resize(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        new_flavor: Flavor,
        spec: RequestSpec,
        selection: Selection,
        alternates: Sequence[Selection],
    ) -> None:
        cctxt = self._at(selection.host, (selection, *alternates))
        cctxt.cast(
            ctxt,
            "prep_resize",
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            new_flavor=new_flavor.to_primitive(),
            request_spec=spec.to_primitive(),
            selection=selection.to_primitive(),
            host_list=[a.to_primitive() for a in alternates],
        )

    def _cast(
        self,
        ctxt: RequestContext,
        to_host: str,
        method: str,
        version: str | None = None,
        **kwargs: Any,
    ) -> None:
        cctxt = self._at(to_host) if version is None else self._at(to_host, version=version)
        cctxt.cast(ctxt, method, **kwargs)

    def terminate_instance(self, ctxt: RequestContext, host: str, instance_uuid: str) -> None:
        """To a host that may run (or be building) the instance: destroy it there,
        cancel what is in flight for it, and say so (``instance_terminated``)."""
        self._cast(
            ctxt,
            host,
            "terminate_instance",
            version=self.TERMINATE_VERSION,
            instance_uuid=instance_uuid,
            host=host,
        )

    def shelve_offload_instance(self, ctxt: RequestContext, host: str, instance_uuid: str) -> None:
        """To the host the instance runs on: destroy its VM (the instance is
        being shelved) and say so (``instance_shelved``)."""
        self._cast(
            ctxt,
            host,
            "shelve_offload_instance",
            version=self.SHELVE_VERSION,
            instance_uuid=instance_uuid,
            host=host,
        )

    def rebuild_instance(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        selection: Selection,
        alternates: Sequence[Selection],
    ) -> None:
        """To an evacuation's destination: rebuild the instance there (its source
        is down), then say how it went (``rebuild_result``)."""
        cctxt = self._at(selection.host, version=self.REBUILD_VERSION)
        cctxt.cast(
            ctxt,
            "rebuild_instance",
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            request_spec=spec.to_primitive(),
            selection=selection.to_primitive(),
            host_list=[a.to_primitive() for a in alternates],
        )

    def check_can_live_migrate_destination(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        selection: Selection,
        alternates: Sequence[Selection],
        source_host: str,
        block_migration: bool,
    ) -> None:
        """To the destination (claimed for the instance): check it can take the
        instance, have the source checked too, then migrate; or hand the
        migration back to the conductor for the next of ``alternates``."""
        self._cast(
            ctxt,
            selection.host,
            "check_can_live_migrate_destination",
            version=self.LIVE_MIGRATION_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            request_spec=spec.to_primitive(),
            selection=selection.to_primitive(),
            host_list=[a.to_primitive() for a in alternates],
            source_host=source_host,
            block_migration=block_migration,
        )

    def check_can_live_migrate_source(
        self,
        ctxt: RequestContext,
        source_host: str,
        instance_uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        selection: Selection,
        alternates: Sequence[Selection],
        block_migration: bool,
    ) -> None:
        """To the source, from a destination that passed its check: check the
        source, then run the migration to ``selection``'s host."""
        self._cast(
            ctxt,
            source_host,
            "check_can_live_migrate_source",
            version=self.LIVE_MIGRATION_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            request_spec=spec.to_primitive(),
            selection=selection.to_primitive(),
            host_list=[a.to_primitive() for a in alternates],
            source_host=source_host,
            block_migration=block_migration,
        )

    def post_live_migration_at_destination(
        self, ctxt: RequestContext, selection: Selection, instance_uuid: str, migration_uuid: str
    ) -> None:
        """To the destination, once migrated: the instance runs there; say so."""
        self._cast(
            ctxt,
            selection.host,
            "post_live_migration_at_destination",
            version=self.LIVE_MIGRATION_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            selection=selection.to_primitive(),
        )

    def resize_instance(
        self,
        ctxt: RequestContext,
        source_host: str,
        instance_uuid: str,
        migration_uuid: str,
        dest_host: str,
        dest_node: str,
    ) -> None:
        """To the source: hand the instance over to the destination."""
        self._cast(
            ctxt,
            source_host,
            "resize_instance",
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            dest_host=dest_host,
            dest_node=dest_node,
        )

    def finish_resize(
        self,
        ctxt: RequestContext,
        dest_host: str,
        dest_node: str,
        instance_uuid: str,
        migration_uuid: str,
    ) -> None:
        """To the destination: bring the instance up there and report it resized."""
        self._cast(
            ctxt,
            dest_host,
            "finish_resize",
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            dest_host=dest_host,
            dest_node=dest_node,
        )

    def confirm_resize(
        self, ctxt: RequestContext, source_host: str, instance_uuid: str, migration_uuid: str
    ) -> None:
        """To the source: drop the source's allocation (held by the migration)."""
        self._cast(
            ctxt,
            source_host,
            "confirm_resize",
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        )

    def revert_resize(
        self, ctxt: RequestContext, dest_host: str, instance_uuid: str, migration_uuid: str
    ) -> None:
        """To the destination: drop its allocation and restore the source's."""
        self._cast(
            ctxt,
            dest_host,
            "revert_resize",
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        )

    def finish_revert_resize(
        self, ctxt: RequestContext, source_host: str, instance_uuid: str, migration_uuid: str
    ) -> None:
        """From the destination to the source, once the revert moved the
        allocation back: run the instance there again, then tell the conductor."""
        self._cast(
            ctxt,
            source_host,
            "finish_revert_resize",
            version=self.FINISH_REVERT_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            source_host=source_host,
        )

    def reap_instance(
        self, ctxt: RequestContext, host: str, instance_uuid: str, reason: str
    ) -> None:
        """To a host whose report shows a VM that no live record places there
        (deleted, in ERROR, evacuated or moved elsewhere): destroy it, or only
        log it, as the compute's ``running_deleted_instance_action`` says."""
        self._cast(
            ctxt,
            host,
            "reap_instance",
            version=self.REAP_VERSION,
            instance_uuid=instance_uuid,
            host=host,
            reason=reason,
        )


class ConductorClient:
    """Client of the conductor (topic ``conductor``), owner of instance records.

    Versions:
      1.0 - build_succeeded, reschedule, schedule_failed, resize_result.
      1.1 - reschedule takes migration_uuid (a failed resize destination),
            resize_result takes details; resize_confirmed, resize_reverted.
      1.2 - build_succeeded and resize_result take availability_zone (the
            built or resized-to Selection's); reschedule's host_list entries
            may carry availability_zone.
            Sent at 1.2 only with a zone (else at 1.1, as before).
      1.3 - instance_terminated. Sent at 1.3 alone (the rest as above).
      1.4 - instance_shelved. Sent at 1.4 alone, likewise.
      1.5 - live_migration_precheck_failed, live_migrated (a live
            migration's results). Sent at 1.5 alone.
      1.6 - rebuild_result (an evacuation's rebuild succeeded, or failed with
            the alternates left). Sent at 1.6 alone.
    """

    VERSION = "1.6"
    #: What every method sends when it carries no zone.
    BASE_VERSION = "1.1"
    #: The version a zone needs.
    ZONE_VERSION = "1.2"
    #: The version instance_terminated sends.
    TERMINATED_VERSION = "1.3"
    #: The version instance_shelved sends.
    SHELVED_VERSION = "1.4"
    #: The version a live migration's results send.
    LIVE_MIGRATION_VERSION = "1.5"
    #: The version rebuild_result sends.
    REBUILT_VERSION = "1.6"

    def __init__(self, transport: oslo_messaging.Transport, topic: str = CONDUCTOR_TOPIC) -> None:
        self._client = _client(transport, topic, self.VERSION, None)

    def _cast(
        self,
        ctxt: RequestContext,
        method: str,
        zoned: bool = False,
        version: str | None = None,
        **kwargs: Any,
    ) -> None:
        if version is None:
            version = self.ZONE_VERSION if zoned else self.BASE_VERSION
        self._client.prepare(version=version).cast(ctxt, method, **kwargs)

    def instance_terminated(self, ctxt: RequestContext, instance_uuid: str, host: str) -> None:
        """The instance's VM is gone from ``host`` (and nothing is in flight for it there)."""
        self._cast(
            ctxt,
            "instance_terminated",
            version=self.TERMINATED_VERSION,
            instance_uuid=instance_uuid,
            host=host,
        )

    def instance_shelved(self, ctxt: RequestContext, instance_uuid: str, host: str) -> None:
        """The VM of the instance being shelved is gone from ``host``."""
        self._cast(
            ctxt,
            "instance_shelved",
            version=self.SHELVED_VERSION,
            instance_uuid=instance_uuid,
            host=host,
        )

    def live_migration_precheck_failed(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: Sequence[Selection],
    ) -> None:
        """A pre-check failed for destination ``failed_host`` (its claim is
        released): try the next of ``alternates``, or give the migration up."""
        self._cast(
            ctxt,
            "live_migration_precheck_failed",
            version=self.LIVE_MIGRATION_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            request_spec=spec.to_primitive(),
            failed_host=failed_host,
            reason=reason,
            host_list=[a.to_primitive() for a in alternates],
        )

    def live_migrated(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        host: str,
        node: str,
        availability_zone: str | None = None,
    ) -> None:
        """The instance runs on ``host`` (in ``availability_zone``, its
        Selection's) and no longer on its source."""
        self._cast(
            ctxt,
            "live_migrated",
            version=self.LIVE_MIGRATION_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
            node=node,
            availability_zone=availability_zone,
        )

    def build_succeeded(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        host: str,
        node: str,
        availability_zone: str | None = None,
    ) -> None:
        """The instance is built on ``host``, in ``availability_zone`` (the zone
        of the Selection it was built from; None: it named none)."""
        zone = {} if availability_zone is None else {"availability_zone": availability_zone}
        self._cast(
            ctxt,
            "build_succeeded",
            bool(zone),
            instance_uuid=instance_uuid,
            host=host,
            node=node,
            **zone,
        )

    def reschedule(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: Sequence[Selection],
        migration_uuid: str | None = None,
    ) -> None:
        """A build (or, with ``migration_uuid``, a resize) failed on ``failed_host``."""
        self._cast(
            ctxt,
            "reschedule",
            _zoned(alternates),
            instance_uuid=instance_uuid,
            request_spec=spec.to_primitive(),
            failed_host=failed_host,
            reason=reason,
            host_list=[a.to_primitive() for a in alternates],
            migration_uuid=migration_uuid,
        )

    def schedule_failed(
        self, ctxt: RequestContext, instance_uuids: Sequence[str], reason: str, details: str
    ) -> None:
        self._cast(
            ctxt,
            "schedule_failed",
            instance_uuids=list(instance_uuids),
            reason=reason,
            details=details,
        )

    def resize_result(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        host: str | None,
        success: bool,
        reason: str | None = None,
        details: str | None = None,
        availability_zone: str | None = None,
    ) -> None:
        """The resize finished on ``host`` (in ``availability_zone``, its
        Selection's), or (not ``success``) could not be placed: ``reason`` is
        user-safe, ``details`` admin-only."""
        zone = {} if availability_zone is None else {"availability_zone": availability_zone}
        self._cast(
            ctxt,
            "resize_result",
            bool(zone),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
            success=success,
            reason=reason,
            details=details,
            **zone,
        )

    def rebuild_result(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        migration_uuid: str,
        host: str,
        success: bool,
        *,
        node: str | None = None,
        availability_zone: str | None = None,
        reason: str | None = None,
        spec: RequestSpec | None = None,
        alternates: Sequence[Selection] = (),
    ) -> None:
        """The evacuation's rebuild on ``host`` succeeded (on ``node``, in
        ``availability_zone``: its Selection's), or failed for ``reason`` with
        ``alternates`` left to try for ``spec``."""
        self._cast(
            ctxt,
            "rebuild_result",
            version=self.REBUILT_VERSION,
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
            success=success,
            node=node,
            availability_zone=availability_zone,
            reason=reason,
            request_spec=spec.to_primitive() if spec is not None else None,
            host_list=[a.to_primitive() for a in alternates],
        )

    def resize_confirmed(
        self, ctxt: RequestContext, instance_uuid: str, migration_uuid: str
    ) -> None:
        self._cast(
            ctxt, "resize_confirmed", instance_uuid=instance_uuid, migration_uuid=migration_uuid
        )

    def resize_reverted(
        self, ctxt: RequestContext, instance_uuid: str, migration_uuid: str
    ) -> None:
        self._cast(
            ctxt, "resize_reverted", instance_uuid=instance_uuid, migration_uuid=migration_uuid
        )


def _zoned(selections: Sequence[Selection]) -> bool:
    """True if any of ``selections`` names an availability zone: a field that
    a compute or conductor older than its 1.2 refuses."""
    return any(s.availability_zone is not None for s in selections)
