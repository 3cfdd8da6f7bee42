"""Nova's scheduler RPC API, served beside the scheduler's own (``[nova_compat]``).

Nova's unmodified conductor calls ``select_destinations`` (RPC 4.5, exchange
``nova``, topic ``scheduler``) with its ``RequestSpec`` as oslo.versionedobjects
primitives, and reads Nova ``Selection`` objects or ``nova.exception.NoValidHost``
back. The modules: :mod:`~scheduler.nova_compat.objects` (Nova's classes, each
registered at Nova 34's version with only the fields read or written, and the
serializer), :mod:`~scheduler.nova_compat.decode` (Nova's RequestSpec into the
project's request: what is honoured, what is refused and why),
:mod:`~scheduler.nova_compat.encode` (Selections),
:mod:`~scheduler.nova_compat.notifications` (Nova's own select_destinations
notifications, ``[nova_compat] notifications``) and
:mod:`~scheduler.nova_compat.endpoint` (the endpoint and its server). The
decision is the native endpoint's own
(:meth:`scheduler.manager.SchedulerEndpoint.destinations`).
"""
