"""Priority classes: the operator's names for how much a request matters.

A class has a name, an integer priority (higher matters more), whether its
instances may be preempted (evicted to make room for a request of a strictly
higher priority) and its preemption policy: ``preempt`` (the default: its
requests may evict lower-priority preemptible instances) or ``never`` (its
requests never evict anyone). Operators define the classes in ``[priority]
classes``; a flavor chooses one with the extra spec ``sched:priority_class =
NAME``, and a flavor that names none gets ``[priority] default_class`` (or no
class at all when that is unset: priority 0, not preemptible, as every
instance was before classes existed).

A class may also say that its requests **wait** for capacity when they find
no host (the ``wait`` flag), instead of failing: such a request goes
PENDING and is retried when capacity may have come back (see
:mod:`conductor_stub.pending`). A boot may ask for it, or refuse it,
whatever its class says (:func:`max_wait`).

The class is resolved once, when the request is validated, and recorded on
each instance's record with its priority and preemptibility as they were
then: changing a class's value later changes new requests only (an instance
keeps what it was scheduled with), so what the record says is what a later
eviction reads.

This module is the one home of the rule: the configuration's parsing
(:meth:`PriorityClasses.parse`), the request's class (:meth:`PriorityClasses.of`,
refusing an unknown name) and the record's fields (:func:`record_fields`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduler.exceptions import InvalidRequest

#: The flavor extra spec that chooses a request's class.
CLASS_SPEC = "sched:priority_class"
#: The preemption policies: a class's requests may evict others, or never.
PREEMPT, NEVER = "preempt", "never"
#: The flag of an entry of ``[priority] classes`` that makes a class preemptible.
PREEMPTIBLE = "preemptible"
#: The flag of an entry of ``[priority] classes`` whose requests wait for capacity.
WAIT = "wait"
#: The bound of a priority, either way.
MAX_PRIORITY = 1_000_000_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class PriorityClass:
    """One class: its name, priority, preemptibility and preemption policy."""

    name: str
    priority: int
    preemptible: bool = False
    preemption_policy: str = PREEMPT
    #: Its requests wait for capacity (PENDING) rather than fail when no host fits.
    wait: bool = False

    @classmethod
    def parse(cls, entry: str) -> PriorityClass:
        """One entry of ``[priority] classes``:
        ``name:priority[:preemptible][:never][:wait]``.

        :raises ValueError: naming the entry and what is wrong with it.
        """
        name, _, rest = entry.strip().partition(":")
        value, more, flags_text = rest.partition(":")
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"{entry!r}: the name must be letters, digits, '.', '_' or '-' "
                "(at most 63, starting with a letter or digit)"
            )
        try:
            priority = int(value)
        except ValueError:
            raise ValueError(f"{entry!r}: the priority {value!r} is not an integer") from None
        if abs(priority) > MAX_PRIORITY:
            raise ValueError(
                f"{entry!r}: the priority must be from -{MAX_PRIORITY} to {MAX_PRIORITY}"
            )
        flags = [f.strip() for f in flags_text.split(":")] if more else []
        unknown = [f for f in flags if f not in (PREEMPTIBLE, NEVER, WAIT)]
        if unknown or len(set(flags)) != len(flags):
            raise ValueError(
                f"{entry!r}: after the priority only {PREEMPTIBLE!r}, {NEVER!r} and "
                f"{WAIT!r} may follow, each once"
            )
        return cls(
            name,
            priority,
            PREEMPTIBLE in flags,
            NEVER if NEVER in flags else PREEMPT,
            WAIT in flags,
        )

    def to_primitive(self) -> dict[str, Any]:
        """What explain and the notifications carry: the class as the
        scheduler decides with it (``wait`` is the conductor's, not here)."""
        return {
            "name": self.name,
            "priority": self.priority,
            "preemptible": self.preemptible,
            "preemption_policy": self.preemption_policy,
        }

    def __str__(self) -> str:
        """``spot (priority 10, preemptible)``, as the commands print it."""
        traits = [f"priority {self.priority}"]
        if self.preemptible:
            traits.append(PREEMPTIBLE)
        if self.preemption_policy == NEVER:
            traits.append("never preempts")
        if self.wait:
            traits.append("waits for capacity")
        return f"{self.name} ({', '.join(traits)})"


@dataclass(frozen=True)
class PriorityClasses:
    """The classes a deployment defines, and the one a flavor without
    :data:`CLASS_SPEC` gets (None: no class)."""

    classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    default: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))
        if self.default is not None and self.default not in self.classes:
            raise ValueError(f"the default class {self.default!r} is not one of the classes")

    @classmethod
    def parse(cls, entries: Iterable[str], default: str | None = None) -> PriorityClasses:
        """The classes of ``[priority] classes`` entries, and their default.

        :raises ValueError: naming every bad entry (joined by ``; ``), a name
            given twice, or a default that is not a class.
        """
        classes: dict[str, PriorityClass] = {}
        problems: list[str] = []
        for entry in entries:
            try:
                one = PriorityClass.parse(entry)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            if one.name in classes:
                problems.append(f"{entry!r}: class {one.name!r} is defined twice")
            classes[one.name] = one
        if problems:
            raise ValueError("; ".join(problems))
        return cls(classes, default or None)

    def of(self, extra_specs: Mapping[str, str]) -> PriorityClass | None:
        """The class a request's flavor extra specs choose (the default when
        they name none; None when there is no default either).

        :raises InvalidRequest: the spec names a class that is not defined.
        """
        name = extra_specs.get(CLASS_SPEC)
        if name is None:
            return self.classes[self.default] if self.default is not None else None
        found = self.classes.get(name.strip())
        if found is None:
            # The message names the request's own class only: the defined
            # ones are the cloud's, and a user reads this message.
            raise InvalidRequest(
                reason=f"flavor.extra_specs {CLASS_SPEC!r} = {name!r}: "
                "no such priority class is defined"
            )
        return found


#: What a record without a class says: priority 0, never preempted.
UNCLASSED: Mapping[str, Any] = MappingProxyType(
    {"priority_class": None, "priority": 0, "preemptible": False}
)


def record_fields(chosen: PriorityClass | None) -> dict[str, Any]:
    """The instance record's fields for the class a request was scheduled
    with: ``priority_class``, ``priority``, ``preemptible``."""
    if chosen is None:
        return dict(UNCLASSED)
    return {
        "priority_class": chosen.name,
        "priority": chosen.priority,
        "preemptible": chosen.preemptible,
    }


def max_wait(chosen: PriorityClass | None, asked: bool | None, limit: float) -> float | None:
    """How long a request may wait for capacity (the record's ``max_wait``):
    ``limit`` seconds when the request asks to wait (``asked`` True), or asks
    nothing (None) and its class waits; None when it fails at once instead
    (``asked`` False, or no class that waits, or a ``limit`` of 0)."""
    wanted = asked if asked is not None else (chosen is not None and chosen.wait)
    return float(limit) if wanted and limit > 0 else None
