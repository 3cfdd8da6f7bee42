"""The client of the scheduler worker: one method per remote call, its version
history in the class's docstring."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import oslo_messaging

from scheduler.explain import ExplainReport, StageHosts
from scheduler.objects import Flavor, RequestSpec, Selection
from scheduler.rpc.context import RequestContext
from scheduler.rpc.transport import SCHEDULER_TOPIC, make_client


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
        self._client = make_client(transport, topic, self.VERSION, timeout, server, retry)

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
