"""Weighed candidates, best first: the order a decision picks its host and
alternates from, ties broken by the decision's own random draws (so that a
replayed request ties as it did). Made by the pipeline's weigh step and by the
shape cache, which ranks from its cached values as the pipeline would."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np


class Ranking:
    """Weighed candidates, best first.

    Ties are broken at random where a decision looks: equal totals within the
    first ``head`` positions come in random order, and so does the pick of
    which members of a tie straddling position ``head`` get in. Further down,
    equal totals keep their given order (reached only when the best hosts
    were refused, or by explain).

    Only the head is ordered when the ranking is made (a partition of the
    few totals near the top, bounded from a sample, then a sort of the hosts
    at the top); the rest is sorted the first time a
    position past the head is asked for, so a decision among 100,000
    candidates does not sort them all.
    """

    def __init__(
        self, candidates: np.ndarray, total: np.ndarray, rng: np.random.Generator, head: int
    ) -> None:
        self.candidates = candidates
        self.total = total
        # the positions after the head, unsorted, found when first asked for
        self._rest: Callable[[], np.ndarray] | None = None
        self._order = self._head(rng, head)

    def __len__(self) -> int:
        return len(self.candidates)

    def _head(self, rng: np.random.Generator, head: int) -> np.ndarray:
        key = -self.total  # ascending: best first
        n = len(key)
        if n < 2:
            return np.arange(n)
        head = min(head, n)
        near = _near_head(key, head)
        edge = np.partition(key[near], head - 1)[head - 1]
        if np.isnan(edge):  # fewer numbers than the head: sort them all, NaN last
            order = np.argsort(key, kind="stable")
            numbers = int(np.count_nonzero(~np.isnan(key)))
            better, tied = order[:numbers], order[:0]
            self._rest = lambda: order[numbers:]
        else:
            # The stable order of the whole (by total, then position), in three
            # parts: above the head's last total, equal to it (both among the
            # positions near the head), below it.
            better = near[key[near] < edge]
            better = better[np.argsort(key[better], kind="stable")]
            tied = near[key[near] == edge]
            self._rest = lambda: np.flatnonzero(~(key <= edge))  # NaN too, as argsort
        start = len(better)
        if start > 1:  # runs of equal totals wholly inside the head
            ranked = key[better]
            cuts = [0, *(np.flatnonzero(np.diff(ranked)) + 1).tolist(), start]
            for lo, hi in itertools.pairwise(cuts):
                if hi - lo > 1:
                    better[lo:hi] = better[lo:hi][rng.permutation(hi - lo)]
        if len(tied) > 1:  # the run at the edge: which of it get in, and in which order
            chosen = rng.choice(len(tied), size=head - start, replace=False)
            rest = np.ones(len(tied), dtype=bool)
            rest[chosen] = False
            tied = np.concatenate([tied[chosen], tied[rest]])
        return np.concatenate([better, tied])

    def order(self, upto: int | None = None) -> np.ndarray:
        """Positions of the candidates, best first: the first ``upto`` (None: all)."""
        if self._rest is not None and (upto is None or upto > len(self._order)):
            positions = self._rest()
            rest = positions[np.argsort(-self.total[positions], kind="stable")]
            self._order = np.concatenate([self._order, rest])
            self._rest = None
        return self._order if upto is None else self._order[:upto]

    def host(self, position: int) -> int:
        """The view index of the host at ``position``."""
        return int(self.candidates[self.order(position + 1)[position]])

    def weight(self, position: int) -> float:
        return float(self.total[self.order(position + 1)[position]])

    def hosts(self, upto: int | None = None) -> np.ndarray:
        """View indices, best first: the first ``upto`` (None: all)."""
        return self.candidates[self.order(upto)]

    def weight_of(self, index: int) -> float | None:
        """The weight of the host at view index ``index``, if it is a candidate."""
        at = np.flatnonzero(self.candidates == index)
        return float(self.total[at[0]]) if len(at) else None


#: How many keys, at least, the ranking samples to bound the head (see _near_head).
HEAD_SAMPLE = 1024


def _near_head(key: np.ndarray, head: int) -> np.ndarray:
    """Positions (ascending) of the keys no larger than a bound taken from a
    sample, every ``stride``-th key: the ``head``-th smallest of the sample.
    At least ``head`` keys are no larger than it, so the ``head``-th smallest key
    and every key up to it are among them, and a partition of those few finds
    what a partition of all of them would. Every position when the sample has
    fewer numbers than the head (its bound is NaN), or fewer keys than two
    samples (a sample would save little)."""
    stride = len(key) // max(HEAD_SAMPLE, head)
    if stride < 2:
        return np.arange(len(key))
    sample = key[::stride]  # at least max(HEAD_SAMPLE, head) keys
    bound = np.partition(sample, head - 1)[head - 1]
    if np.isnan(bound):
        return np.arange(len(key))
    return np.flatnonzero(key <= bound)


def _rank(total: np.ndarray, rng: np.random.Generator, head: int) -> np.ndarray:
    """Positions of ``total``, best first (see :class:`Ranking`)."""
    return Ranking(np.arange(len(total)), total, rng, head).order()
