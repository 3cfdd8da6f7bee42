"""The client of the conductor, owner of the instance records: the results the
scheduler and the computes send it, its version history in the class's docstring."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import oslo_messaging

from scheduler.objects import RequestSpec, Selection
from scheduler.rpc.context import RequestContext
from scheduler.rpc.transport import CONDUCTOR_TOPIC, make_client, names_a_zone


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
        self._client = make_client(transport, topic, self.VERSION, None)

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
            names_a_zone(alternates),
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
