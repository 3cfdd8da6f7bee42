"""The scheduling engine: the host view, the pipeline and their settings.

``Engine(store, settings).select(request_id, spec, instance_uuids)`` is the
whole decision; see :mod:`scheduler.engine.pipeline` for its stages.

The names below are imported when first used (:mod:`scheduler.lazy`): every
filter, weigher and request filter imports a module of this package, which
runs this file, and must not load the pipeline (which imports them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler import lazy

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.engine.pipeline import Engine, ScheduleResult
    from scheduler.engine.plugins import UnknownPlugin
    from scheduler.engine.settings import EngineSettings
    from scheduler.explain import InstanceTrace

__all__ = [
    "Engine",
    "EngineSettings",
    "HostView",
    "InstanceTrace",
    "PlacementContext",
    "ScheduleResult",
    "UnknownPlugin",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and knows no other name
    __getattr__, __dir__ = lazy.exports(
        __name__,
        {
            "Engine": "scheduler.engine.pipeline",
            "EngineSettings": "scheduler.engine.settings",
            "HostView": "scheduler.engine.hostview",
            "InstanceTrace": "scheduler.explain",
            "PlacementContext": "scheduler.engine.context",
            "ScheduleResult": "scheduler.engine.pipeline",
            "UnknownPlugin": "scheduler.engine.plugins",
        },
    )
