"""The scheduler worker's RPC endpoint: validate, select, claim, cast, notify.

Each method is cut by stage; the decision itself lives in
:class:`scheduler.engine.pipeline.Engine`. Bad input is refused with
:class:`InvalidRequest` on a call, and on a cast becomes an ERROR
notification plus a ``schedule_failed`` to the conductor (which puts the
instances in ERROR). Nothing is claimed for a request that fails, and the
worker keeps serving: every failure of a cast goes through one policy,
:meth:`SchedulerEndpoint._cast_failed`, as every failure of a call goes
through :func:`call_errors`. A request spec is validated whole as soon as it is
read (:meth:`SchedulerEndpoint._read_spec`): its fields and resource extra
specs by :meth:`RequestSpec.from_primitive`, then what the host filters will
read (operator extra specs, image properties, NUMA, PCI aliases) by
:func:`~scheduler.filters.validation.validate_request`.

What a user may read about a failure is decided in one place,
:func:`scheduler.policy.user_reason`: for no valid host it is always the generic
``NoValidHost.USER_MESSAGE``, never a host, filter, aggregate or trait name;
the count of hosts per reason goes to the admin-only fault details and the
logs. Invalid input and refusals say what is wrong with the request itself
(built from its field names and values only, never from the cloud's state).

``explain`` (admin only) runs the pipeline as a dry run and returns the
:class:`~scheduler.explain.ExplainReport` (with every host by name when asked);
``run_filter`` (admin only) runs one host filter alone on every host and
returns its :class:`~scheduler.explain.StageHosts`; forcing a host or
requesting a destination is admin-only too (:mod:`scheduler.policy`).

The modules: :mod:`~scheduler.manager.endpoint` (the endpoint, one method per
remote call), :mod:`~scheduler.manager.stages` (the stages its methods share
and the error policies) and :mod:`~scheduler.manager.stats` (what it counts).
The names below are imported when first used (:mod:`scheduler.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler import lazy

if TYPE_CHECKING:
    from scheduler.manager.endpoint import MAX_REQUEST_ID, SchedulerEndpoint, park
    from scheduler.manager.stages import (
        REPEATS,
        RESIZE,
        RUN_INSTANCE,
        CastEvents,
        Stages,
        call_errors,
    )
    from scheduler.manager.stats import DecisionStats, count_rejections

__all__ = [
    "CastEvents",
    "DecisionStats",
    "MAX_REQUEST_ID",
    "REPEATS",
    "RESIZE",
    "RUN_INSTANCE",
    "SchedulerEndpoint",
    "Stages",
    "call_errors",
    "count_rejections",
    "park",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and knows no other name
    __getattr__, __dir__ = lazy.exports(
        __name__,
        {
            "CastEvents": "scheduler.manager.stages",
            "DecisionStats": "scheduler.manager.stats",
            "MAX_REQUEST_ID": "scheduler.manager.endpoint",
            "REPEATS": "scheduler.manager.stages",
            "RESIZE": "scheduler.manager.stages",
            "RUN_INSTANCE": "scheduler.manager.stages",
            "SchedulerEndpoint": "scheduler.manager.endpoint",
            "Stages": "scheduler.manager.stages",
            "call_errors": "scheduler.manager.stages",
            "count_rejections": "scheduler.manager.stats",
            "park": "scheduler.manager.endpoint",
        },
    )
