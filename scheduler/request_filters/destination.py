"""Destination: narrows a request that forces a host or node, or requests a
destination, to the hosts it names, and keeps it off the hosts it ignores.

``force_hosts`` keeps the hosts named there (any of them, names compared
ignoring case, as Nova compares forced hosts); ``force_nodes`` the nodes
named there (exactly); ``requested_destination`` its one host (and node, when
given). A name the cloud does not know matches nothing, and the request finds
no host, every host counted under the field's reason. Only an admin may set
these fields (:mod:`scheduler.policy` refuses them to anyone else before the
engine runs).

``ignore_hosts`` are the hosts already tried for this request (a failed
build's or resize's earlier attempts, which the conductor adds, and a
resize's source host unless ``allow_resize_to_same_host``, which the
scheduler's resize adds); the request may go to none of them, names compared
ignoring case, as Nova compares ignored hosts. Like Nova, which strips them
whatever host filters are enabled, they are removed here, before the
``max_placement_results`` cut, so they never use up the cut.

**We differ from Nova**: Nova asks placement about the first forced host only
and then skips every host filter for the forced hosts and nodes; its atomic
claim still keeps placement's resources from being overcommitted, but a
forced build can break a server group's policy or land where the NUMA, PCI or
image rules say it cannot run. Here every forced name counts, and a forced
request still passes through the capacity step, every host filter and the
atomic claim: it goes where it was sent, or it finds no valid host; a forced
host that is also ignored is not chosen. Always on: there is no option, since
these fields are the request's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduler.engine import reasons
from scheduler.request_filters.base import RequestFilter

if TYPE_CHECKING:
    from scheduler.objects import RequestSpec
    from scheduler.resource_request import ResourceRequest
    from scheduler.store.base import Aggregate


class DestinationRequestFilter(RequestFilter):
    """Requires the forced hosts and nodes and the requested destination, and
    forbids the hosts already tried."""

    OPTION = ""  # always on

    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        if spec.force_hosts:
            request = request.with_constraint(
                self.constraint(
                    reasons.NOT_FORCED_HOST, hosts=frozenset(spec.force_hosts), ignore_case=True
                )
            )
        if spec.force_nodes:
            request = request.with_constraint(
                self.constraint(reasons.NOT_FORCED_NODE, hosts=frozenset(spec.force_nodes))
            )
        destination = spec.requested_destination
        if destination is not None:
            # A node is named after its host here: a node that is not the
            # host's own matches nothing.
            names = {destination.host} if destination.node in (None, destination.host) else set()
            request = request.with_constraint(
                self.constraint(reasons.NOT_REQUESTED_DESTINATION, hosts=frozenset(names))
            )
        if spec.ignore_hosts:
            request = request.with_constraint(
                self.constraint(
                    reasons.ALREADY_TRIED,
                    forbidden_hosts=frozenset(spec.ignore_hosts),
                    ignore_case=True,
                )
            )
        return request
