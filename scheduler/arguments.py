"""The RPC arguments of the compute's and the conductor's endpoints, typed and
checked at the boundary: the one home of what each kind of argument must be.

Every argument of an exposed method (:func:`scheduler.steps.guarded`) is
annotated with one of the kinds below (``instance_uuid: Uuid``,
``host: LocalHost``, ``success: Flag``, ``reason: Text | None``, ...), and the
method refuses to be declared if one is not. Before the step guard reads the
record, :func:`checked` reads the message's arguments against the method's
kinds: a uuid is a uuid (given back in its canonical form), a host is a host
name and, where the method acts on it, one of the hosts this process serves,
a node or zone a name, a flag a boolean, a text a bounded string, and a
request spec, a flavor or a Selection (and its alternates) what their own
``from_primitive`` reads (their numbers finite and in range). An argument
typed ``X | None`` may also be None. The rules themselves are the scheduler's
validators (:mod:`scheduler.objects`), which its own endpoint applies too.

A message that fails is refused as a whole and nothing of it is acted on:
:class:`ArgumentRefused` names the method, the argument and why, and the
guard logs it once (``rpc_refused``, masked like every log line, at most a
few identical lines a minute: :data:`REPEATS`). So the step guard, and every
step after it, sees only well-typed arguments.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from scheduler.exceptions import InvalidRequest
from scheduler.log import RepeatLimiter, get_logger
from scheduler.objects import (
    MAX_INSTANCES_PER_REQUEST,
    Flavor,
    RequestSpec,
    Selection,
    validate_host_name,
    validate_uuid,
)

LOG = get_logger(__name__)
#: A stream of bad messages logs a few lines a minute per method and argument.
REPEATS = RepeatLimiter()

#: The longest free text (a fault's reason, its admin details) taken from a message.
MAX_TEXT = 65536
#: The most Selections one message may carry as alternates.
MAX_ALTERNATES = 100

#: What a kind's check is given: the value, the argument's name, and the hosts
#: the endpoint serves (None: any host, as the conductor's).
Check = Callable[[Any, str, Collection[str] | None], Any]


@dataclass(frozen=True)
class Kind:
    """One kind of RPC argument: ``check`` gives the value as the method takes
    it, or raises :class:`InvalidRequest`."""

    name: str
    check: Check


def _uuid(value: Any, what: str, _: Collection[str] | None) -> str:
    return validate_uuid(value, what)


def _migration(value: Any, what: str, hosts: Collection[str] | None) -> str:
    # "": no migration named (a resize the scheduler refused before naming one).
    return value if value == "" else _uuid(value, what, hosts)


def _uuids(value: Any, what: str, hosts: Collection[str] | None) -> list[str]:
    if not isinstance(value, list | tuple) or not value:
        raise InvalidRequest(reason=f"{what} must be a non-empty list of UUIDs")
    if len(value) > MAX_INSTANCES_PER_REQUEST:
        raise InvalidRequest(reason=f"{what} holds more than {MAX_INSTANCES_PER_REQUEST} UUIDs")
    uuids = [_uuid(v, f"{what}[]", hosts) for v in value]
    if len(set(uuids)) != len(uuids):
        raise InvalidRequest(reason=f"{what} holds duplicates")
    return uuids


def _host(value: Any, what: str, _: Collection[str] | None) -> str:
    return validate_host_name(value, what)


def _local_host(value: Any, what: str, hosts: Collection[str] | None) -> str:
    host = validate_host_name(value, what)
    if hosts is not None and host not in hosts:
        raise InvalidRequest(reason=f"{what} {host[:64]!r} is not a host of this process")
    return host


def _flag(value: Any, what: str, _: Collection[str] | None) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(reason=f"{what} must be a boolean, got {type(value).__name__}")
    return value


def _text(value: Any, what: str, _: Collection[str] | None) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(reason=f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT:
        raise InvalidRequest(reason=f"{what} is longer than {MAX_TEXT} characters")
    return value


def _primitive(parse: Callable[[Any], Any]) -> Check:
    """A primitive the method reads itself, checked whole by ``parse`` first
    (and passed on as it came)."""

    def check(value: Any, what: str, _: Collection[str] | None) -> Any:
        parse(value)
        return value

    return check


def _selections(value: Any, what: str, hosts: Collection[str] | None) -> Any:
    if not isinstance(value, list | tuple) or len(value) > MAX_ALTERNATES:
        raise InvalidRequest(
            reason=f"{what} must be a list of at most {MAX_ALTERNATES} Selections"
        )
    for item in value:
        Selection.from_primitive(item)
    return value


def _builds(value: Any, what: str, hosts: Collection[str] | None) -> list[dict[str, Any]]:
    """A batched build's builds: each an instance's uuid, its Selection and
    its alternates, every instance once (the uuids given back canonical)."""
    if not isinstance(value, list | tuple) or not value:
        raise InvalidRequest(reason=f"{what} must be a non-empty list of builds")
    if len(value) > MAX_INSTANCES_PER_REQUEST:
        raise InvalidRequest(reason=f"{what} holds more than {MAX_INSTANCES_PER_REQUEST} builds")
    out = []
    for item in value:
        if not isinstance(item, Mapping) or set(item) != set(BUILD_FIELDS):
            raise InvalidRequest(
                reason=f"{what}[] must be a mapping of exactly {', '.join(BUILD_FIELDS)}"
            )
        Selection.from_primitive(item["selection"])
        out.append(
            {
                "instance_uuid": _uuid(item["instance_uuid"], f"{what}[].instance_uuid", hosts),
                "selection": item["selection"],
                "host_list": _selections(item["host_list"], f"{what}[].host_list", hosts),
            }
        )
    if len({b["instance_uuid"] for b in out}) != len(out):
        raise InvalidRequest(reason=f"{what} names an instance twice")
    return out


#: The fields of one build in a batched build (``build_and_run_instances``).
BUILD_FIELDS = ("instance_uuid", "selection", "host_list")

UUID = Kind("uuid", _uuid)
MIGRATION = Kind("migration", _migration)
UUIDS = Kind("uuids", _uuids)
HOST = Kind("host", _host)
LOCAL_HOST = Kind("local host", _local_host)
NAME = Kind("name", _host)
FLAG = Kind("flag", _flag)
TEXT = Kind("text", _text)
REQUEST_SPEC = Kind("request spec", _primitive(RequestSpec.from_primitive))
FLAVOR = Kind("flavor", _primitive(Flavor.from_primitive))
SELECTION = Kind("selection", _primitive(Selection.from_primitive))
SELECTIONS = Kind("selections", _selections)
BUILDS = Kind("builds", _builds)

#: An instance's uuid (or another consumer's: the types are the boundary's).
Uuid = Annotated[str, UUID]
#: A move's migration uuid, or "" where the sender names none yet.
MigrationUuid = Annotated[str, MIGRATION]
Uuids = Annotated[list[str], UUIDS]
#: A host name (of any process: a move's other side, a result's host).
Host = Annotated[str, HOST]
#: A host this process serves (what the step acts on here).
LocalHost = Annotated[str, LOCAL_HOST]
#: A node's or an availability zone's name.
Name = Annotated[str, NAME]
Flag = Annotated[bool, FLAG]
Text = Annotated[str, TEXT]
SpecPrimitive = Annotated[dict[str, Any], REQUEST_SPEC]
FlavorPrimitive = Annotated[dict[str, Any], FLAVOR]
SelectionPrimitive = Annotated[dict[str, Any], SELECTION]
Selections = Annotated[list[dict[str, Any]], SELECTIONS]
#: The builds of one batched build cast (:data:`BUILD_FIELDS` each).
Builds = Annotated[list[dict[str, Any]], BUILDS]


class ArgumentRefused(Exception):
    """A message whose arguments a method does not take: ``argument`` (None:
    the arguments as a whole) and ``why``."""

    def __init__(self, method: str, argument: str | None, why: str) -> None:
        super().__init__(f"{method}: {why}")
        self.method = method
        self.argument = argument
        self.why = why

    def log(self, request_id: Any) -> None:
        """The one line a refused message gets (rate-limited per method and argument)."""
        REPEATS.log(
            LOG,
            "warning",
            "rpc_refused",
            key=(self.method, self.argument),
            method=self.method,
            argument=self.argument,
            why=self.why,
            request_id=request_id if isinstance(request_id, str) else None,
        )


#: A method's arguments, by name: its kind and whether None is taken.
Signature = Mapping[str, tuple[Kind, bool]]


def kinds_of(method: Callable[..., Any]) -> Signature:
    """Each argument's kind from ``method``'s annotations (but ``self`` and
    ``ctxt``). A method with an argument of no kind cannot be declared.

    :raises TypeError: an argument is not annotated with a kind.
    """
    hints = typing.get_type_hints(method, include_extras=True)
    out: dict[str, tuple[Kind, bool]] = {}
    for name in inspect.signature(method).parameters:
        if name in ("self", "ctxt"):
            continue
        hint = hints.get(name)
        optional = False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            hint = args[0] if len(args) == 1 else None
        kinds = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Kind)]
        if len(kinds) != 1:
            raise TypeError(f"{method.__qualname__}({name}) is not typed with an argument kind")
        out[name] = (kinds[0], optional)
    return out


def checked(
    method: str,
    kinds: Signature,
    arguments: Mapping[str, Any],
    hosts: Collection[str] | None,
) -> dict[str, Any]:
    """``arguments`` (bound by name, defaults applied) as the method takes
    them, each checked against its kind.

    :raises ArgumentRefused: the first argument that does not pass.
    """
    out = dict(arguments)
    for name, (kind, optional) in kinds.items():
        value = arguments[name]
        if value is None and optional:
            continue
        try:
            out[name] = kind.check(value, name, hosts)
        except InvalidRequest as exc:
            why = exc.message.removeprefix("invalid request: ")
            raise ArgumentRefused(method, name, why) from None
        except (TypeError, ValueError, AttributeError) as exc:  # a parser's own slip
            why = f"{name} is not a {kind.name}: {exc!r}"[:300]
            raise ArgumentRefused(method, name, why) from None
    return out
