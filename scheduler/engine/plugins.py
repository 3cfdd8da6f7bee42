"""Filters and weighers as plugins: found by entry point, built with their own arguments.

Plugins are classes registered in ``setup.cfg`` under ``scheduler.filters`` /
``scheduler.weighers``; the configured names are looked up there, and an
unknown name fails at construction, loudly, listing the names that exist.

A plugin declares its arguments once, in its own module: a frozen dataclass
``Args`` (a :class:`PluginArgs`) whose fields are made with :func:`option`
(a weigher's scale with :func:`multiplier`), each carrying its type (the
annotation), default, bounds and help::

    class IoOpsFilter(BaseFilter[bool]):
        @dataclass(frozen=True)
        class Args(PluginArgs):
            max_io_ops_per_host: int = option(8, min=0, help="IoOpsFilter rejects ...")

        args: Args

Each field is also the ``[filter_scheduler]`` option of the same name:
:mod:`scheduler.conf` generates the options of every registered plugin,
other packages' included, from :func:`registered_options`, so ``--help``
and the sample config list them all; the worker reads their values once
(:func:`read_options`, into ``EngineSettings.plugin_options``); and the
engine builds each plugin with its own ``Args`` (:func:`build`), whose
bounds are checked there, once, at start. The options are typed by the
annotations: ``bool``, ``int``, ``float``, ``str`` (or ``str | None``),
``tuple[str, ...]`` (a list option) and mappings (a list option that a
``parse`` function turns into the mapping).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from scheduler.exceptions import SchedulerError

if TYPE_CHECKING:
    from scheduler.engine.settings import EngineSettings

FILTERS_GROUP = "scheduler.filters"
WEIGHERS_GROUP = "scheduler.weighers"
#: The config group of the plugins' options.
OPTIONS_GROUP = "filter_scheduler"

T = TypeVar("T")

#: What an option is in the config: the oslo.config type it is generated as.
Kind = Literal["bool", "int", "float", "str", "list"]

_METADATA_KEY = "scheduler.plugin_option"


class UnknownPlugin(SchedulerError):
    """A configured filter or weigher name is not a registered plugin of its kind."""

    msg = "%(group)s plugin %(name)r: %(problem)s"


class Plugin(Protocol):
    """A filter or weigher class as :func:`build` makes one: its ``Args``, and
    built with the engine's settings and those arguments (the bases,
    :class:`~scheduler.filters.base.BaseFilter` and
    :class:`~scheduler.weighers.base.BaseWeigher`, import this module: it
    never imports them)."""

    Args: ClassVar[type[PluginArgs]]

    def __init__(self, settings: EngineSettings, args: PluginArgs | None = None) -> None: ...


P = TypeVar("P", bound=Plugin)


# --- declaring arguments ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Meta:
    help: str
    min: float | None
    max: float | None
    parse: Callable[[Any], Any] | None
    multiplier: bool


def option(
    default: Any,
    *,
    help: str,
    min: float | None = None,
    max: float | None = None,
    parse: Callable[[Any], Any] | None = None,
) -> Any:
    """A plugin argument, and the ``[filter_scheduler]`` option of its name.

    ``min`` / ``max`` bound a number (oslo.config refuses a value outside
    them, and so does the Args); ``parse`` turns the config's value (a list
    of strings for a mapping) into the argument, raising ValueError with a
    one-line reason. A list default is kept as a tuple, a mapping as a
    read-only mapping.
    """
    metadata = {_METADATA_KEY: _Meta(help, min, max, parse, multiplier=False)}
    if isinstance(default, Mapping):
        frozen = types.MappingProxyType(dict(default))
        return dataclasses.field(default_factory=lambda: frozen, metadata=metadata)
    if isinstance(default, list):
        default = tuple(default)
    return dataclasses.field(default=default, metadata=metadata)


N = TypeVar("N", int, float)


def number_pairs(
    pairs: Sequence[str], number: Callable[[str], N], accept: Callable[[N], bool], what: str
) -> dict[str, N]:
    """``["NAME=number", ...]`` as a mapping: what a plugin option of such
    pairs parses to (a list option's ``parse``).

    :raises ValueError: ``'<pair>' is not <what>``, for a pair with no ``=``,
        no name, or a value ``number`` cannot read or ``accept`` refuses.
    """
    out: dict[str, N] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            n = number(value)
            if not sep or not name.strip() or not accept(n):
                raise ValueError
        except ValueError:
            raise ValueError(f"{pair!r} is not {what}") from None
        out[name.strip()] = n
    return out


def multiplier(default: float, *, help: str, min: float | None = None) -> Any:
    """A weigher's multiplier: a float :func:`option` that the framework scales the
    weigher's normalised score by (also the key of per-aggregate overrides)."""
    return dataclasses.field(
        default=float(default),
        metadata={_METADATA_KEY: _Meta(help, min, None, None, multiplier=True)},
    )


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declared plugin option, as the config generator and the reader see it."""

    name: str
    kind: Kind
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    parse: Callable[[Any], Any] | None = None
    multiplier: bool = False


@dataclasses.dataclass(frozen=True)
class PluginArgs:
    """A plugin's arguments; each plugin subclasses it as a frozen dataclass ``Args``.

    Construction checks every bound and freezes lists and mappings, so a bad
    value stops start-up with one line naming its option.
    """

    def __post_init__(self) -> None:
        for d in declared(type(self)):
            value = getattr(self, d.name)
            if isinstance(value, list):
                object.__setattr__(self, d.name, tuple(value))
            elif isinstance(value, dict):
                object.__setattr__(self, d.name, types.MappingProxyType(dict(value)))
            if d.min is not None and value < d.min:
                raise ValueError(
                    f"[{OPTIONS_GROUP}] {d.name} must be at least {d.min}, got {value!r}"
                )
            if d.max is not None and value > d.max:
                raise ValueError(
                    f"[{OPTIONS_GROUP}] {d.name} must be at most {d.max}, got {value!r}"
                )


@dataclasses.dataclass(frozen=True)
class NoArgs(PluginArgs):
    """The arguments of a plugin that has no option."""


#: declared()'s answers, by Args class (a class declares its options once).
_DECLARED: dict[type, tuple[Declared, ...]] = {}


def declared(args_cls: type[PluginArgs]) -> tuple[Declared, ...]:
    """The options ``args_cls`` declares, in field order.

    :raises TypeError: a field not made with :func:`option`, or of a type no
        option has.
    """
    found = _DECLARED.get(args_cls)
    if found is None:
        found = _DECLARED[args_cls] = _read_declared(args_cls)
    return found


def _read_declared(args_cls: type[PluginArgs]) -> tuple[Declared, ...]:
    hints = typing.get_type_hints(args_cls)
    out = []
    for f in dataclasses.fields(args_cls):
        meta = f.metadata.get(_METADATA_KEY)
        if not isinstance(meta, _Meta):
            raise TypeError(f"{args_cls.__qualname__}.{f.name}: declare it with option()")
        kind = _kind(hints[f.name])
        if kind is None or kind == "list" and _is_mapping(hints[f.name]) and meta.parse is None:
            raise TypeError(
                f"{args_cls.__qualname__}.{f.name}: no option has type "
                f"{hints[f.name]} (a mapping needs parse=)"
            )
        default = (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        )
        out.append(
            Declared(
                f.name, kind, default, meta.help, meta.min, meta.max, meta.parse, meta.multiplier
            )
        )
    return tuple(out)


def _is_mapping(hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    return isinstance(origin, type) and issubclass(origin, Mapping)


def _kind(hint: Any) -> Kind | None:
    if hint in (bool, int, float, str):
        return typing.cast(Kind, hint.__name__)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # str | None
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return "str" if rest == [str] else None
    if origin is tuple or _is_mapping(hint):
        return "list"
    return None


# --- finding, reading and building ------------------------------------------------------


def _registered(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    # Looked up on the module at each call, so a test can register a plugin
    # by replacing importlib.metadata.entry_points.
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}


def load_plugins(group: str, names: Sequence[str], base: type[T]) -> list[tuple[str, type[T]]]:
    """The classes registered under ``names`` in ``group``, in the order given.

    :raises UnknownPlugin: a name is not registered, or names a class that is
        not a ``base``.
    """
    registered = _registered(group)
    loaded: list[tuple[str, type[T]]] = []
    for name in names:
        ep = registered.get(name)
        if ep is None:
            known = ", ".join(sorted(registered)) or "none"
            raise UnknownPlugin(
                group=group, name=name, problem=f"no such entry point (known: {known})"
            )
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise UnknownPlugin(
                group=group, name=name, problem=f"{ep.value} is not a {base.__name__}"
            )
        loaded.append((name, cls))
    return loaded


def registered_options() -> list[Declared]:
    """The options of every registered weigher, then every registered filter, by
    plugin name, each plugin's in its order; an option two plugins share is
    listed once.

    :raises TypeError: two plugins declare one option name differently.
    """
    seen: dict[str, tuple[Declared, str]] = {}
    for group in (WEIGHERS_GROUP, FILTERS_GROUP):
        for _, ep in sorted(_registered(group).items()):
            args_cls = getattr(ep.load(), "Args", None)
            if not (isinstance(args_cls, type) and issubclass(args_cls, PluginArgs)):
                continue  # not a plugin: the engine refuses it if it is configured
            for d in declared(args_cls):
                first, owner = seen.setdefault(d.name, (d, ep.value))
                if first != d:
                    raise TypeError(f"{ep.value} declares option {d.name} unlike {owner}")
    return [d for d, _ in seen.values()]


def read_options(value_of: Callable[[str], Any]) -> dict[str, Any]:
    """Every registered plugin's option, by name: ``value_of(name)`` (the config's
    value) made what the plugin's ``Args`` take.

    :raises ValueError: ``[filter_scheduler] <name>: <why>``, for a value that
        does not parse.
    """
    values: dict[str, Any] = {}
    for d in registered_options():
        value = value_of(d.name)
        if d.parse is not None:
            try:
                value = d.parse(value)
            except ValueError as exc:
                raise ValueError(f"[{OPTIONS_GROUP}] {d.name}: {exc}") from None
        elif d.kind == "list":
            value = tuple(value)
        values[d.name] = value
    return values


def args_for(args_cls: type[PluginArgs], options: Mapping[str, Any]) -> PluginArgs:
    """``args_cls`` from the option values by name; a field absent there keeps its default.

    :raises ValueError: a value outside its option's bounds.
    """
    names = [f.name for f in dataclasses.fields(args_cls)]
    return args_cls(**{name: options[name] for name in names if name in options})


def build(cls: type[P], settings: EngineSettings) -> P:
    """The plugin ``cls`` with the engine's settings and its own arguments, taken
    from ``settings.plugin_options``."""
    return cls(settings, args_for(cls.Args, settings.plugin_options))
