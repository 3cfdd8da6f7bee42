"""The scheduling engine: the host view, the pipeline and their settings.

``Engine(store, settings).select(request_id, spec, instance_uuids)`` is the
whole decision; see :mod:`scheduler.engine.pipeline` for its stages.
"""

from scheduler.engine.context import PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.pipeline import Engine, InstanceTrace, ScheduleResult
from scheduler.engine.plugins import UnknownPlugin
from scheduler.engine.settings import EngineSettings

__all__ = [
    "Engine",
    "EngineSettings",
    "HostView",
    "InstanceTrace",
    "PlacementContext",
    "ScheduleResult",
    "UnknownPlugin",
]
