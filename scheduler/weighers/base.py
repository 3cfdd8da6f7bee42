"""The weigher interface and the framework's scaling.

A weigher returns one raw number per candidate host (vectorised, no loop over
hosts); higher means preferred. The framework, not the weigher, scales the
raw numbers to [0, 1] across the candidates and multiplies them by the
weigher's multiplier option; the engine sums the weighers' products and the
highest total wins. As in Nova:

* ``BY_MAX`` (RAM, CPU, disk): value / maximum across the candidates, a
  negative value counting as 0;
* ``BY_RANGE`` (the others): (value - minimum) / (maximum - minimum);
* ``AS_IS`` (the fraction-based weighers, whose raw values are shares of a
  host's capacity, already in [0, 1]): clipped to [0, 1], not rescaled, so a
  difference between two hosts weighs the same whatever the other candidates.

When every candidate has the same value they all score the same: 0 under
``BY_RANGE``; 1 under ``BY_MAX`` (0 if that value is 0 or less), as in Nova,
whose RAM, CPU, disk and I/O weighers scale from a minimum of 0. With one
candidate left nothing is weighed.

Per-aggregate multipliers, as in Nova: an aggregate whose metadata sets a
weigher's option (``ram_weight_multiplier = -1.0``) overrides the configured
multiplier on its hosts; a host in several such aggregates takes the lowest
value; a host whose aggregates give a value that is not a number keeps
the configured multiplier (logged). The override multiplies the already normalised score, host
by host. **We differ from Nova**: a weigher whose *configured* multiplier is
0 does not run at all, so aggregate metadata rescales weighers that are on
but cannot turn one on for some hosts.

A weigher that reads the request parses it once per request in
:meth:`BaseWeigher.prepare` (as a filter does, see
:mod:`scheduler.filters.base`) and reads that state in ``raw``; None means
the request gives it nothing to weigh, and it weighs 0 for every host.

Weighers are plugins: registered as entry points in group
``scheduler.weighers`` and built once, with the engine's settings and their
own ``Args``, in which the multiplier is declared with
:func:`~scheduler.engine.plugins.multiplier` (named as its option,
``ram_weight_multiplier``; see :mod:`scheduler.engine.plugins`).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

import numpy as np

from scheduler.engine.plugins import PluginArgs, declared

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.engine.settings import EngineSettings

#: A weigher's per-request state, as its :meth:`BaseWeigher.prepare` returns it.
S = TypeVar("S")

Scaling = Literal["max", "range", "as_is"]
BY_MAX: Scaling = "max"
BY_RANGE: Scaling = "range"
AS_IS: Scaling = "as_is"


def normalise(values: np.ndarray, scaling: Scaling) -> np.ndarray:
    """Scale raw weights to [0, 1] across the candidates (see module doc)."""
    return scale(values, scaling, scale_bounds(values, scaling))


#: What scaling reads of all the candidates: (low, high) for BY_RANGE, (0, top)
#: for BY_MAX, nothing for AS_IS.
Bounds = tuple[float, float] | None


def scale_bounds(values: np.ndarray, scaling: Scaling) -> Bounds:
    """The bounds ``values`` (every candidate's) are scaled by, as floats.

    Integers are read as they are, not converted first: the float of their
    lowest or highest is the lowest or highest of their floats."""
    if scaling == AS_IS:
        return None
    if scaling == BY_MAX:
        # A top of 0 or less (its sign included) scales nothing: all 0.
        return 0.0, float(values.max(initial=0))
    if not len(values):
        return np.inf, -np.inf
    return float(values.min()), float(values.max())


def scale(values: np.ndarray, scaling: Scaling, bounds: Bounds) -> np.ndarray:
    """``values`` (some or all candidates') scaled with the candidates'
    ``bounds`` (:func:`scale_bounds`), as float64: each value's result depends on
    the value and the bounds alone, so a few candidates can be scaled apart.
    Integers are converted by the arithmetic itself (no converted copy)."""
    if bounds is None:  # AS_IS: np.clip's values, without its per call overhead
        values = values.astype(np.float64, copy=False)
        if values.min(initial=0.0) >= 0.0 and values.max(initial=1.0) <= 1.0:
            # Nothing to clip (no NaN either: it fails both tests): the values
            # as clipping leaves them, -0.0 made 0.0 as np.maximum does.
            return values + 0.0
        return np.minimum(np.maximum(values, 0.0), 1.0)
    low, high = bounds
    if scaling == BY_MAX:
        return np.maximum(values, 0.0) / high if high > 0 else np.zeros(len(values))
    if not high > low:
        return np.zeros(len(values))
    return (values - low) / (high - low)


class BaseWeigher(abc.ABC, Generic[S]):
    """One preference, as a raw number per host."""

    #: The weigher's arguments: its multiplier, and any other option it has.
    Args: ClassVar[type[PluginArgs]]
    #: Name of the multiplier (its option, and the aggregate metadata key that
    #: overrides it), found in ``Args``.
    MULTIPLIER_OPTION: ClassVar[str]
    #: How the framework scales the raw numbers to [0, 1].
    SCALING: ClassVar[Scaling] = BY_RANGE
    #: -1 for a weigher whose configured multiplier (and its aggregate overrides)
    #: is applied negated, as Nova does for build failures: the option reads as
    #: "how strongly to avoid", and its value stays what operators write.
    SIGN: ClassVar[float] = 1.0
    #: True for a weigher whose ``prepare`` depends on more than the request and
    #: the settings (it learns from the requests it has seen): the shape cache
    #: (:mod:`scheduler.engine.shapecache`) prepares it for every request, as
    #: the engine does, instead of keeping its state per request shape. Every
    #: other weigher's ``prepare`` must read only the request and the settings,
    #: and its ``raw`` value of a host only that host's rows, the request and
    #: the state.
    LEARNS: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Args" in cls.__dict__:
            found = [d.name for d in declared(cls.Args) if d.multiplier]
            if len(found) != 1:
                raise TypeError(
                    f"{cls.__qualname__}.Args must declare one multiplier(), not {len(found)}"
                )
            cls.MULTIPLIER_OPTION = found[0]

    def __init__(self, settings: EngineSettings, args: PluginArgs | None = None) -> None:
        self.settings = settings
        self.args: Any = self.Args() if args is None else args
        self.multiplier: float = getattr(self.args, self.MULTIPLIER_OPTION)

    def prepare(self, ctx: PlacementContext) -> S | None:
        """What this weigher reads of the request, once per request; None when the
        request gives it nothing to weigh. By default it weighs every request,
        with nothing parsed (True)."""
        return True  # type: ignore[return-value]

    @abc.abstractmethod
    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: S
    ) -> np.ndarray:
        """One number per candidate, aligned with ``candidates``; higher is preferred."""

    def weigh(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: S | None
    ) -> np.ndarray:
        """This weigher's contribution per candidate: scaled raw times multiplier
        (0 everywhere when ``state`` is None)."""
        return (
            self.SIGN
            * self.multipliers(view, candidates)
            * self.scaled(view, candidates, ctx, state)
        )

    def scaled(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: S | None
    ) -> np.ndarray:
        """The raw values normalised across the candidates (0 everywhere when
        ``state`` is None): what the multiplier multiplies."""
        if state is None:
            return np.zeros(len(candidates))
        return normalise(self.raw(view, candidates, ctx, state), self.SCALING)

    def multipliers(self, view: HostView, candidates: np.ndarray) -> float | np.ndarray:
        """The multiplier per candidate: the configured one, or its aggregates' lowest
        override (see the module docstring); one float when no aggregate overrides."""
        return view.aggregate_lowest(self.MULTIPLIER_OPTION, self.multiplier, candidates)
