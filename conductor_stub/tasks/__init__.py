"""The conductor's operations, one module each (as Nova's ``conductor/tasks/``).

Each module holds an operation whole: the API side that starts it and
(re-)sends its requests (the sweeper, :mod:`conductor_stub.redrive`, re-sends
them with the same methods), the handlers of the results its steps send back
to the conductor (:class:`conductor_stub.manager.ConductorEndpoint` checks
each step and hands it on), and its wait. :mod:`~conductor_stub.tasks.base`
holds what they share: the one way a failed host is rescheduled, the one
account of attempts and hosts tried, and the one wait.
"""
