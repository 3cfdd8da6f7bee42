"""The extra-spec operator language, shared by every filter that reads it.

A flavor extra spec such as ``capabilities:cpu_info:vendor = s== Intel`` or
``aggregate_instance_extra_specs:ssd = true`` is a *requirement* matched
against a host's value (a reported capability or aggregate metadata). The
language is Nova's, so operators' flavors keep their meaning:

=============  ===================================================================
requirement    a host value matches when
=============  ===================================================================
``x``          it equals ``x`` (the whole text, case-sensitive; no operator)
``= n``        it is a number ``>= n`` (not equality, for historical reasons)
``== n``       it is a number equal to ``n``; ``!= n``, ``>= n``, ``<= n`` likewise
``s== x``      it equals ``x`` as a string; ``s!=``, ``s>=``, ``s>``, ``s<=``,
               ``s<`` compare strings (so ``'10' s> '9'`` is false)
``<in> x``     ``x`` is a substring of it
``<all-in> x y``  every word is a substring of it
``<or> a <or> b``  it equals one of the alternatives
=============  ===================================================================

Only the first word after an operator counts (``s== a b`` compares with
``a``), except for ``<all-in>`` and ``<or>``.

Where **we differ** from Nova:

* Nova raises inside the filter on a numeric operator with a non-number
  (``>= many``) or on a bare ``<or>``, failing the whole request with an
  obscure error. Here :func:`validate_extra_specs` refuses such a spec when
  the request is validated, with a message naming it; an operator with no
  operand at all (``s==``), which Nova silently never matches, is refused
  the same way. A host *value* that is not a number never matches a numeric
  operator (Nova raises there too).
* Nova compares a list-valued capability by its Python text form
  (``"['avx', 'sse']"``). Here a list matches if one of its elements
  matches; ``<all-in>`` on a list needs every word to be an element.

Filters evaluate a requirement once per *distinct* host value (the host
columns are categorical), so :meth:`Requirement.matches` is called a handful
of times per request, never once per host.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.exceptions import InvalidRequest
from scheduler.resource_request import is_placement_key

#: Scope of the specs the ComputeCapabilitiesFilter reads.
CAPABILITIES_SCOPE = "capabilities"
#: Scope of the specs the AggregateInstanceExtraSpecsFilter reads.
AGGREGATE_SCOPE = "aggregate_instance_extra_specs"

_NUMERIC: dict[str, Callable[[float, float], bool]] = {
    "=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
}
_STRING: dict[str, Callable[[str, str], bool]] = {
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
}
IN, ALL_IN, OR = "<in>", "<all-in>", "<or>"
OPERATORS = frozenset({*_NUMERIC, *_STRING, IN, ALL_IN, OR})


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class Requirement:
    """One parsed requirement: an operator (None for plain equality) and its words."""

    text: str
    op: str | None
    words: tuple[str, ...]

    @property
    def problem(self) -> str | None:
        """Why this requirement can never be evaluated, or None if it can."""
        if self.op is None:
            return None
        if not self.words:
            return f"operator {self.op!r} needs a value"
        if self.op in _NUMERIC and _number(self.words[0]) is None:
            return f"operator {self.op!r} compares numbers and {self.words[0]!r} is not one"
        return None

    @property
    def comparison(self) -> tuple[Callable[[Any, float], Any], float] | None:
        """For a numeric operator with a numeric operand, the comparison and
        the operand: ``compare(have, wanted)`` is :meth:`matches` of a number
        ``have``, and compares a numpy array elementwise. Else None."""
        if self.op not in _NUMERIC or not self.words:
            return None
        wanted = _number(self.words[0])
        return None if wanted is None else (_NUMERIC[self.op], wanted)

    def matches(self, value: Any) -> bool:
        """Whether a host value (a string, number, bool or list of them) matches."""
        if value is None:
            return False
        if isinstance(value, list | tuple | frozenset | set):
            if self.op == ALL_IN:
                return all(word in value for word in self.words)
            return any(self.matches(item) for item in value)
        text = _text(value)
        if self.op is None:
            return text == self.text
        if not self.words:
            return False
        first = self.words[0]
        if self.op == OR:
            return text in self.words[::2]  # "<or> a <or> b": a, b at even positions
        if self.op == IN:
            return first in text
        if self.op == ALL_IN:
            return all(word in text for word in self.words)
        if self.op in _STRING:
            return _STRING[self.op](text, first)
        wanted, have = _number(first), _number(text)
        if wanted is None or have is None:
            return False
        return _NUMERIC[self.op](have, wanted)


def _text(value: Any) -> str:
    """A host value as the string Nova would compare (``str(value)``)."""
    return value if isinstance(value, str) else str(value)


def parse(text: str) -> Requirement:
    """Parse a requirement; never fails (see :attr:`Requirement.problem`)."""
    words = text.split()
    if words and words[0] in OPERATORS:
        return Requirement(text, words[0], tuple(words[1:]))
    return Requirement(text, None, ())


def scoped_key(key: str, scope: str) -> str | None:
    """The attribute ``key`` names for a filter reading ``scope``, or None.

    ``<scope>:rest`` gives ``rest``; a key without a namespace is read by
    every scope (as in Nova), except those the candidate step reads
    (``group_policy``, ``required[N]``, ``member_of[N]``:
    :func:`scheduler.resource_request.is_placement_key`); a key in another
    namespace (``hw:``, ``trait:``, ``resources:``) is not this filter's.
    """
    head, sep, rest = key.partition(":")
    if not sep:
        return None if is_placement_key(key) else key
    return rest if head == scope and rest else None


def operator_specs(extra_specs: Mapping[str, str]) -> dict[str, str]:
    """The specs some host filter evaluates with the operator language."""
    return {
        key: value
        for key, value in extra_specs.items()
        if scoped_key(key, CAPABILITIES_SCOPE) is not None
        or scoped_key(key, AGGREGATE_SCOPE) is not None
    }


def validate_extra_specs(extra_specs: Mapping[str, str], what: str = "flavor.extra_specs") -> None:
    """Refuse a requirement no host could ever be checked against.

    :raises InvalidRequest: naming the spec, e.g. ``flavor.extra_specs
        'capabilities:vcpus' = '>= many': operator '>=' compares numbers and
        'many' is not one``.
    """
    for key, text in operator_specs(extra_specs).items():
        problem = parse(text).problem
        if problem is not None:
            raise InvalidRequest(reason=f"{what} {key!r} = {text!r}: {problem}")
