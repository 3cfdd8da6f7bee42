"""The step guard: the one check every lifecycle message that changes state passes.

An operation on an instance (a build, resize, live migration, evacuation,
shelve, delete) is a sequence of steps, each a message between the
conductor and the computes. The bus delivers at least once, late and
reordered, and anyone who can publish on it can forge a message, so no step
acts on its arguments alone: each names the operation it belongs to (the
instance, the migration, the host) and is acted on only while the
instance's record says that operation is at that step there
(:class:`Step`, :meth:`StepGuard.refused`). A repeated, late, replayed or
forged step is refused and logged once (``step_refused``: the step and what
did not match), whatever the transport's de-duplication remembered.

A step's expectation is declared beside its RPC method with :func:`guarded`,
which also exposes the method to oslo.messaging's explicit access policy
(:data:`ACCESS_POLICY`): an endpoint served with it answers no method that
was not declared, so a helper that happens to be public is not an RPC
method. A test enumerates the compute's and the conductor's endpoints and
fails on an exposed method that is not guarded.

Where a step writes, the store checks the record again inside that write:
a record write is a compare-and-set on the states (and the migration) its
step expects (:meth:`~scheduler.store.InstanceStore.update_instance` with
``expected_states`` and ``expect``), and a compute's allocation write
(release, hand back) carries the step's :meth:`Step.record_check`, so a
record that moved on between the guard's read and the write is not written
to (``step_refused``, "at its write").
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import oslo_messaging
from oslo_messaging.rpc.dispatcher import ExplicitRPCAccessPolicy

from scheduler import arguments
from scheduler.exceptions import ProviderNotFound, RecordChanged, StoreError
from scheduler.log import get_logger
from scheduler.objects import InstanceRecord, migration_uuid_for
from scheduler.store import InstanceStore, PlacementStore, RecordCheck

LOG = get_logger(__name__)

#: The access policy of the compute's and the conductor's RPC servers: only
#: the methods declared with :func:`guarded` (or ``oslo_messaging.expose``).
ACCESS_POLICY = ExplicitRPCAccessPolicy

#: The attribute :func:`guarded` marks a method with (its step's name).
GUARDED_ATTR = "_guarded_step"


def holds_on(store: PlacementStore, consumer_uuid: str, host: str) -> bool:
    """True if the consumer's allocation is on ``host``'s provider.

    A result from a host that does not hold the instance's claim comes from a
    stale attempt (a duplicate of a re-driven request): the live attempt is
    elsewhere and will report for itself.
    """
    held = store.get_consumer(consumer_uuid)
    if held is None:
        return False
    try:
        provider = store.get_provider_by_name(host)
    except ProviderNotFound:
        return False
    return provider.uuid in held.allocations


def owns_migration(instance_uuid: str, migration_uuid: str, request_id: str | None) -> bool:
    """Whether ``migration_uuid`` is a migration of this instance: the one its
    move under ``request_id`` named (:func:`~scheduler.objects.migration_uuid_for`).
    A message naming another consumer (another instance, another instance's
    migration) as its migration cannot pass: the uuid is derived, not chosen."""
    if not request_id:
        return False
    try:
        return migration_uuid_for(instance_uuid, request_id) == migration_uuid
    except ValueError:  # not a uuid
        return False


@dataclass(frozen=True)
class Step:
    """What a message says it is: step ``name`` of the operation the record
    of ``instance_uuid`` is under.

    It is due when the record is in one of ``states`` (None: any; with
    ``absent_ok``, also when there is no record); with ``task_states``,
    its task is one of them; with ``migration_uuid``, the record's current
    migration is that one; with ``on_host``, the record's field of that name
    (``host``, ``source_host``) names a host of the guard's (and, with
    ``host``, that very host); with ``pending``, the record waits on ``host``
    (a delete's ``pending_hosts``); with ``claim_on``, the instance holds its
    claim on that host. ``check``, if given, is one more rule of the step's
    own, read from the record: the reason it is not due, or None.
    """

    name: str
    instance_uuid: str
    states: Collection[str] | None
    task_states: Collection[str | None] | None = None
    migration_uuid: str | None = None
    on_host: str | None = None
    host: str | None = None
    pending: bool = False
    claim_on: str | None = None
    check: Callable[[InstanceRecord], str | None] | None = None
    absent_ok: bool = False

    def record_check(self) -> RecordCheck:
        """What of this step's rule the store checks again inside the step's
        own write (:class:`~scheduler.store.RecordCheck`): the state, the
        migration and, when the step names one, the task. A record that moved
        on between the guard's read and the write is not written to."""
        assert self.states is not None, "a step that writes names its states"
        expect: dict[str, str | None] = {}
        if self.migration_uuid is not None:
            expect["migration_uuid"] = self.migration_uuid
        if self.task_states is not None and len(self.task_states) == 1:
            [expect["task_state"]] = self.task_states
        return RecordCheck(self.instance_uuid, tuple(self.states), expect)


class StepGuard:
    """Checks steps against the store. ``hosts``: the hosts a compute serves
    (None: any host, as the conductor's guard)."""

    def __init__(
        self,
        store: Any,
        hosts: Collection[str] | None = None,
    ) -> None:
        self.store = store
        self.hosts = hosts

    def unmatched(self, step: Step) -> list[str]:
        """What of the store does not match ``step`` (empty: it is due)."""
        return self.unmatched_each([step])[0]

    def unmatched_each(self, steps: Sequence[Step]) -> list[list[str]]:
        """What of the store does not match each of ``steps``, read in one
        store round trip (:meth:`~scheduler.store.InstanceStore.step_reads`)."""
        store: InstanceStore = self.store
        served = [
            step.host is None or self.hosts is None or step.host in self.hosts for step in steps
        ]
        asked = [
            (step.instance_uuid, step.claim_on)
            for step, ok in zip(steps, served, strict=True)
            if ok
        ]
        reads = iter(store.step_reads(asked) if asked else [])
        return [
            self._compare(step, *next(reads)) if ok else [f"host {step.host} is not served here"]
            for step, ok in zip(steps, served, strict=True)
        ]

    def _compare(self, step: Step, record: InstanceRecord | None, holds: bool) -> list[str]:
        """What of ``record`` (and whether its claim is on ``step.claim_on``)
        does not match ``step``."""
        if record is None:
            return [] if step.absent_ok else ["no instance record"]
        unmatched = []
        if step.states is not None and record.state not in step.states:
            unmatched.append(f"instance is {record.state}")
        if step.task_states is not None and record.task_state not in step.task_states:
            unmatched.append(f"task is {record.task_state}")
        if step.migration_uuid is not None and record.migration_uuid != step.migration_uuid:
            unmatched.append(f"the record's migration is {record.migration_uuid}")
        if step.on_host is not None:
            named = getattr(record, step.on_host)
            if step.host is not None and named != step.host:
                unmatched.append(f"the record's {step.on_host} is {named}")
            elif self.hosts is not None and named not in self.hosts:
                unmatched.append(f"the record's {step.on_host} {named} is not served here")
        if step.pending and step.host not in record.pending_hosts:
            unmatched.append(f"the record waits on {', '.join(record.pending_hosts) or 'no host'}")
        if step.check is not None:
            why = step.check(record)
            if why is not None:
                unmatched.append(why)
        if not unmatched and step.claim_on is not None and not holds:
            unmatched.append(f"no claim on {step.claim_on}")
        return unmatched

    def refused(self, step: Step, request_id: str | None = None) -> bool:
        """Whether ``step`` must be refused (logged once, ``step_refused``, with
        the instance, the migration, the host and the request named). A store
        that cannot be read refuses it too: the conductor's re-drive sends the
        step again."""
        return self.refused_each([step], request_id)[0]

    def refused_each(self, steps: Sequence[Step], request_id: str | None = None) -> list[bool]:
        """Whether each of ``steps`` must be refused, as :meth:`refused` says,
        all read in one store round trip."""
        try:
            found = self.unmatched_each(steps)
        except StoreError as exc:
            if len(steps) > 1:  # one record it cannot give refuses no other step
                return [self.refused(step, request_id) for step in steps]
            found = [[f"the store cannot be read: {exc.message}"]]
        for step, unmatched in zip(steps, found, strict=True):
            if unmatched:
                _log_refused(step, "; ".join(unmatched), request_id)
        return [bool(unmatched) for unmatched in found]

    def refused_at_write(self, step: Step, exc: RecordChanged) -> None:
        """Log a step the store refused inside its write (the record moved on
        after the guard read it), as :meth:`refused` logs one."""
        _log_refused(step, f"at its write: {exc.why}")


def _log_refused(step: Step, why: str, request_id: str | None = None) -> None:
    LOG.warning(
        "step_refused",
        step=step.name,
        instance_uuid=step.instance_uuid,
        migration_uuid=step.migration_uuid,
        host=step.host,
        request_id=request_id,
        why=why,
    )


_Method = TypeVar("_Method", bound=Callable[..., Any])

#: What a guarded method's step is, from the endpoint and the method's
#: arguments by name (defaults applied); None: the method checks each of its
#: steps itself (one message naming many instances).
Expect = Callable[[Any, Mapping[str, Any]], Step] | None


def guarded(expect: Expect) -> Callable[[_Method], _Method]:
    """Declare an RPC method a step whose expectation ``expect`` gives: its
    arguments are checked against their kinds first (:mod:`scheduler.arguments`:
    every argument is typed with one, and a message that fails is refused,
    ``rpc_refused``), then the endpoint's guard (its ``guard`` attribute, a
    :class:`StepGuard`, whose hosts are the ones a local host must be)
    checks the step, and the method does not run when either refuses it.
    The method is exposed to :data:`ACCESS_POLICY` and marked so that the
    endpoint test finds it guarded."""

    def mark(method: _Method) -> _Method:
        signature = inspect.signature(method)
        kinds = arguments.kinds_of(method)
        name = method.__name__

        @functools.wraps(method)
        def inner(endpoint: Any, *args: Any, **kwargs: Any) -> Any:
            request_id = getattr(args[0] if args else kwargs.get("ctxt"), "request_id", None)
            try:
                try:
                    bound = signature.bind(endpoint, *args, **kwargs)
                except TypeError as exc:  # arguments missing, or unknown ones
                    raise arguments.ArgumentRefused(name, None, str(exc)[:300]) from None
                bound.apply_defaults()
                taken = arguments.checked(name, kinds, bound.arguments, endpoint.guard.hosts)
            except arguments.ArgumentRefused as refused:
                refused.log(request_id)
                return None
            if expect is not None:
                step = expect(endpoint, taken)
                if endpoint.guard.refused(step, request_id):
                    return None
            return method(**taken)

        setattr(inner, GUARDED_ATTR, expect is not None or "each")
        return oslo_messaging.expose(inner)

    return mark


def exposed_methods(endpoint: type) -> dict[str, Callable[..., Any]]:
    """The methods of an endpoint class its RPC server answers under
    :data:`ACCESS_POLICY`."""
    return {
        name: member
        for name in dir(endpoint)
        if not name.startswith("_")
        and callable(member := getattr(endpoint, name))
        and getattr(member, "exposed", False)
    }
