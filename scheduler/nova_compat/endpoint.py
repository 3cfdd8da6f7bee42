"""The endpoint Nova's conductor calls: Nova's scheduler manager at RPC 4.5.

``select_destinations`` decodes Nova's RequestSpec
(:mod:`~scheduler.nova_compat.decode`), decides and claims through the native
endpoint's own path (:meth:`scheduler.manager.SchedulerEndpoint.destinations`:
the same validation, policy, notifications and claims) and answers, per
instance, with Nova's Selection objects (:mod:`~scheduler.nova_compat.encode`).
No host, and a field the project cannot honour, reach Nova's conductor as
``nova.exception.NoValidHost`` (:class:`NoValidHost`), with the reason.
With ``[nova_compat] notifications``, Nova's own
``scheduler.select_destinations`` notifications are published too
(:mod:`~scheduler.nova_compat.notifications`).

The fanout casts Nova's computes send to the scheduler topic carry what
Nova's host manager caches (aggregates, the instances per host); the store
already holds both, so each is accepted and logged once, with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import oslo_messaging

from scheduler.exceptions import (
    Forbidden,
    InternalError,
    InvalidRequest,
    SchedulerUnavailable,
)
from scheduler.exceptions import NoValidHost as OwnNoValidHost
from scheduler.log import bind_request, get_logger
from scheduler.manager import SchedulerEndpoint, call_errors
from scheduler.manager.endpoint import request_id_of
from scheduler.nova_compat import encode
from scheduler.nova_compat.decode import decode, refuse
from scheduler.nova_compat.notifications import NovaNotifications
from scheduler.nova_compat.objects import NovaSerializer, Unreadable, value
from scheduler.objects import Selection as OwnSelection
from scheduler.rpc import expected_exceptions

LOG = get_logger("scheduler.nova_compat")

#: The version of Nova's scheduler RPC API this endpoint serves.
RPC_VERSION = "4.5"
#: The reason Nova's scheduler gives when no host fits (the details stay in the logs).
NOT_ENOUGH_HOSTS = "There are not enough hosts available."


class NoValidHost(Exception):
    """``nova.exception.NoValidHost`` as oslo.messaging sends it: the module and
    class names it puts on the wire are this class's (so Nova's caller, which
    allows ``nova.exception``, rebuilds its own NoValidHost from the message
    and the ``reason`` keyword). Declared here: Nova is not installed."""

    __module__ = "nova.exception"

    def __init__(self, reason: str) -> None:
        self.message = f"No valid host was found. {reason}"
        super().__init__(self.message)
        #: What the caller rebuilds the exception with (Nova's ``msg_fmt`` keyword).
        self.kwargs = {"reason": reason}


#: The fanout casts accepted and ignored, and why.
IGNORED_CASTS = {
    "update_aggregates": "aggregates are read from the store",
    "delete_aggregate": "aggregates are read from the store",
    "update_instance_info": "the instances on each host are read from the store",
    "delete_instance_info": "the instances on each host are read from the store",
    "sync_instance_info": "the instances on each host are read from the store",
}


class NovaSchedulerEndpoint:
    """Nova's scheduler manager (topic ``scheduler`` on exchange ``nova``, RPC
    4.5, no namespace) over the native endpoint ``native``; every Selection
    names ``cell_uuid``. With ``notifications``, each select_destinations
    also publishes Nova's own notifications of it."""

    target = oslo_messaging.Target(version=RPC_VERSION, namespace=None)

    def __init__(
        self,
        native: SchedulerEndpoint,
        cell_uuid: str,
        notifications: NovaNotifications | None = None,
    ) -> None:
        self.native = native
        self.cell_uuid = cell_uuid
        self.notifications = notifications
        self._casts_seen: set[str] = set()

    @expected_exceptions(NoValidHost, SchedulerUnavailable, InternalError)
    def select_destinations(
        self,
        ctxt: Any,
        request_spec: Any = None,
        filter_properties: Any = None,
        spec_obj: Any = None,
        instance_uuids: Any = None,
        return_objects: Any = False,
        return_alternates: Any = False,
    ) -> list[list[dict[str, Any]]] | list[dict[str, Any]]:
        """Per instance, its Selections (primary first; alternates only with
        ``return_alternates``); the primaries are claimed. Without
        ``return_objects`` (a client older than 4.4), the primaries as Nova's
        legacy host dicts."""
        request_id = request_id_of(ctxt)
        with bind_request(request_id=request_id):
            try:
                with call_errors("select_destinations"):
                    per_instance = self._decide(
                        ctxt, request_id, spec_obj, instance_uuids, return_alternates
                    )
            except OwnNoValidHost:
                raise NoValidHost(NOT_ENOUGH_HOSTS) from None
            except (InvalidRequest, Forbidden) as exc:
                reason = str(exc.kwargs.get("reason") or exc.message)
                LOG.warning("nova_request_refused", reason=reason)
                raise NoValidHost(reason) from None
            if return_objects is True:
                return encode.selections(per_instance, self.cell_uuid)
            return [
                {"host": per[0].host, "nodename": per[0].node, "limits": {}}
                for per in per_instance
                if per
            ]

    def _decide(
        self,
        ctxt: Any,
        request_id: str,
        spec_obj: Any,
        instance_uuids: Any,
        return_alternates: Any,
    ) -> list[list[OwnSelection]]:
        if isinstance(spec_obj, Unreadable):
            raise refuse(f"spec_obj cannot be read: {spec_obj.reason}")
        if spec_obj is None:
            raise refuse("spec_obj is required (a client of RPC 4.0 or later sends it)")
        request = decode(spec_obj, self.cell_uuid)
        uuids: Sequence[Any] | None = instance_uuids
        if uuids is None:  # a client older than 4.3 names the one instance in the spec
            uuids = [value(spec_obj, "instance_uuid")] * request["num_instances"]
        elif isinstance(uuids, list | tuple):
            # As Nova's scheduler: the uuids say how many (a move of one of three
            # instances booted together carries the boot's num_instances, 3).
            request["num_instances"] = len(uuids)
        # Nova's .start before the decision, its .end once hosts are selected
        # (none after a NoValidHost); the scheduler's own ones come from the
        # decision itself.
        notify = self.notifications if spec_obj.wire is not None else None
        if notify is not None:
            notify.start(ctxt, spec_obj.wire)
        selected = self.native.destinations(
            ctxt, request_id, request, list(uuids), return_alternates
        )
        if notify is not None:
            notify.end(ctxt, spec_obj.wire)
        return selected

    # --- fanout casts from Nova's computes --------------------------------------------

    def update_aggregates(self, ctxt: Any, aggregates: Any = None) -> None:
        self._ignored("update_aggregates")

    def delete_aggregate(self, ctxt: Any, aggregate: Any = None) -> None:
        self._ignored("delete_aggregate")

    def update_instance_info(
        self, ctxt: Any, host_name: Any = None, instance_info: Any = None
    ) -> None:
        self._ignored("update_instance_info")

    def delete_instance_info(
        self, ctxt: Any, host_name: Any = None, instance_uuid: Any = None
    ) -> None:
        self._ignored("delete_instance_info")

    def sync_instance_info(
        self, ctxt: Any, host_name: Any = None, instance_uuids: Any = None
    ) -> None:
        self._ignored("sync_instance_info")

    def _ignored(self, method: str) -> None:
        """Log the first cast of ``method``, with why it changes nothing."""
        if method in self._casts_seen:
            return
        self._casts_seen.add(method)
        LOG.info("nova_cast_ignored", method=method, reason=IGNORED_CASTS[method])


def get_server(
    transport: oslo_messaging.Transport,
    exchange: str,
    topic: str,
    server: str,
    endpoint: NovaSchedulerEndpoint,
) -> oslo_messaging.RPCServer:
    """The second RPC server of a worker: Nova's exchange and topic, Nova's
    serializer."""
    target = oslo_messaging.Target(
        exchange=exchange, topic=topic, server=server, version=RPC_VERSION
    )
    return oslo_messaging.get_rpc_server(
        transport, target, [endpoint], serializer=NovaSerializer()
    )
