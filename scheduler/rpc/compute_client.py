"""The client of the compute nodes: one method per remote call (each step of
an operation on a host), its version history in the class's docstring."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import oslo_messaging

from scheduler import amqp_publish
from scheduler.objects import Flavor, RequestSpec, Selection
from scheduler.rpc.context import RequestContext
from scheduler.rpc.transport import COMPUTE_TOPIC, SEND_FAILURES, make_client, names_a_zone

#: One cast to send: the server, the version, the method, its arguments.
_Cast = tuple[str, str, str, dict[str, Any]]


def one_build(
    instance_uuid: str, spec: RequestSpec, selections: Sequence[Selection]
) -> tuple[str, dict[str, Any]]:
    """The method and arguments of the build of one instance on the first of
    ``selections``, the rest its alternates."""
    return "build_and_run_instance", {
        "instance_uuid": instance_uuid,
        "request_spec": spec.to_primitive(),
        "selection": selections[0].to_primitive(),
        "host_list": [a.to_primitive() for a in selections[1:]],
    }


def send_builds(
    client: Any, channel: amqp_publish.SharedChannel | None, ctxt: Any, casts: Sequence[_Cast]
) -> None:
    """``casts`` of ``client`` (an oslo.messaging RPC client) on the build
    ``channel`` (:func:`scheduler.amqp_publish.cast_channel_for`: over
    RabbitMQ, a connection of the client's own), as one batch with what
    other threads send meanwhile, under one wait for the broker's confirms;
    through oslo.messaging's cast without a channel. Returns once the broker
    holds them; a cast may reach its compute twice (a batch published again
    after a lost connection), which the compute's guard serves once.

    :raises oslo_messaging.RPCVersionCapError: a cast above the version cap.
    :raises oslo_messaging.MessageDeliveryFailure: the broker did not hold them.
    """
    if channel is None:
        for server, version, method, kwargs in casts:
            client.prepare(server=server, version=version).cast(ctxt, method, **kwargs)
        return
    messages = [
        amqp_publish.cast(client.prepare(server=server, version=version), ctxt, method, **kwargs)
        for server, version, method, kwargs in casts
    ]
    try:
        channel.publish(messages)
    except SEND_FAILURES:
        raise
    except Exception as exc:
        raise oslo_messaging.MessageDeliveryFailure(
            f"the broker did not confirm {len(messages)} build cast(s): {exc!r}"
        ) from exc


class ComputeClient:
    """Client of compute nodes (topic ``compute``, one server per service).

    A host is reached through its service record's ``rpc_server``: one
    simulator process serves many hosts under one server name. ``resolve``
    maps a host name to that server name.

    The build casts go over RabbitMQ on a channel of the client's own, those
    of one call in one batch under one wait for the broker's confirms
    (:func:`send_builds`); the other casts through oslo.messaging.

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
      1.9 - build_and_run_instances: the builds of one request that one
            compute process serves, in one message (the request spec once,
            then each instance's uuid, Selection and alternates). Sent at
            1.9 alone, so an older compute refuses it by version;
            build_and_run_instance is still served (a reschedule's single
            build sends it).
    """

    VERSION = "1.9"
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
    #: The version build_and_run_instances sends.
    BATCH_BUILD_VERSION = "1.9"

    def __init__(
        self,
        transport: oslo_messaging.Transport,
        resolve: Callable[[str], str],
        topic: str = COMPUTE_TOPIC,
        retry: int | None = None,
        version_cap: str | None = None,
    ) -> None:
        """``retry`` as :class:`SchedulerClient`'s; ``version_cap`` the highest
        version sent (``[upgrade_levels] compute``; None: :attr:`VERSION`)."""
        self._client = make_client(
            transport, topic, self.VERSION, None, retry=retry, version_cap=version_cap
        )
        self._resolve = resolve
        self._builds = amqp_publish.cast_channel_for(transport, retry)

    def _build_one(self, uuid: str, spec: RequestSpec, selections: Sequence[Selection]) -> _Cast:
        on = self._resolve(selections[0].host)
        return (on, self._version_of(selections), *one_build(uuid, spec, selections))

    def _version_of(self, selections: Sequence[Selection]) -> str:
        """The version a cast carrying ``selections`` is sent at: the zone's
        when one names a zone, else the base version."""
        return self.ZONE_VERSION if names_a_zone(selections) else self.BASE_VERSION

    def _at(
        self, host: str, selections: Sequence[Selection] = (), version: str | None = None
    ) -> Any:
        """A context for ``host`` at ``version``, else at the zone's version when a
        Selection names one, else at the base version."""
        if version is None:
            version = self._version_of(selections)
        return self._client.prepare(server=self._resolve(host), version=version)

    def build_and_run_instance(
        self,
        ctxt: RequestContext,
        instance_uuid: str,
        spec: RequestSpec,
        selection: Selection,
        alternates: Sequence[Selection],
    ) -> None:
        cast = self._build_one(instance_uuid, spec, (selection, *alternates))
        send_builds(self._client, self._builds, ctxt, [cast])

    def build_and_run_instances(
        self,
        ctxt: RequestContext,
        spec: RequestSpec,
        placed: Iterable[tuple[str, Sequence[Selection]]],
    ) -> int:
        """The builds of one request: each instance (its uuid, then its
        Selection and alternates) on its Selection's host, in one cast per
        compute process those hosts are served by (``spec`` once per cast,
        for one instance); how many casts were sent. An instance with no
        Selection (deleted meanwhile) gets none. Under a version cap below 1.9
        (a compute not yet upgraded), one :meth:`build_and_run_instance` cast
        per instance. All of them published as one batch (:func:`send_builds`)."""
        one = spec.replace(num_instances=1)
        if not self._client.can_send_version(self.BATCH_BUILD_VERSION):
            casts = [
                self._build_one(instance_uuid, one, selections)
                for instance_uuid, selections in placed
                if selections
            ]
            send_builds(self._client, self._builds, ctxt, casts)
            return len(casts)
        by_server: dict[str, list[dict[str, Any]]] = {}
        for instance_uuid, selections in placed:
            if not selections:
                continue
            primary, alternates = selections[0], selections[1:]
            by_server.setdefault(self._resolve(primary.host), []).append(
                {
                    "instance_uuid": instance_uuid,
                    "selection": primary.to_primitive(),
                    "host_list": [a.to_primitive() for a in alternates],
                }
            )
        single = one.to_primitive()
        casts = [
            (
                server,
                self.BATCH_BUILD_VERSION,
                "build_and_run_instances",
                {"request_spec": single, "builds": builds},
            )
            for server, builds in by_server.items()
        ]
        send_builds(self._client, self._builds, ctxt, casts)
        return len(by_server)

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
