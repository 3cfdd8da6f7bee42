"""The checks of one field of a message: each takes the raw value (or the
mapping and key it sits under) and returns it typed, or raises
:class:`~scheduler.exceptions.InvalidRequest` naming the field. The request
objects (:mod:`scheduler.objects`) and the RPC arguments
(:mod:`scheduler.arguments`) are read with these, so a field is checked by
one rule wherever it arrives."""

from __future__ import annotations

import math
import uuid as uuidlib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any

from scheduler.exceptions import InvalidRequest

MAX_VALUE_LENGTH = 255
MAX_HOST_NAME = 255  # the longest host (or node) name taken from a message


def frozen_map(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def require_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidRequest(reason=f"{what} must be an object, got {type(value).__name__}")
    return value


def check_fields(
    data: Mapping[str, Any],
    what: str,
    allowed: AbstractSet[str],
    required: AbstractSet[str] = frozenset(),
) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidRequest(reason=f"{what} has unknown field(s): {', '.join(unknown)}")
    missing = sorted(required - set(data))
    if missing:
        raise InvalidRequest(reason=f"{what} is missing field(s): {', '.join(missing)}")


def int_field(
    data: Mapping[str, Any], key: str, what: str, lo: int, hi: int, default: int | None = None
) -> int:
    value = data.get(key, default)
    if value is None:
        raise InvalidRequest(reason=f"{what}.{key} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(reason=f"{what}.{key} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidRequest(reason=f"{what}.{key} must be between {lo} and {hi}, got {value}")
    return value


def str_field(
    data: Mapping[str, Any],
    key: str,
    what: str,
    *,
    optional: bool = False,
    default: str | None = None,
    max_len: int = 255,
) -> str | None:
    value = data.get(key, default)
    if value is None:
        if optional:
            return None
        raise InvalidRequest(reason=f"{what}.{key} is required")
    if not isinstance(value, str):
        raise InvalidRequest(reason=f"{what}.{key} must be a string, got {type(value).__name__}")
    if not value and not optional:
        raise InvalidRequest(reason=f"{what}.{key} must not be empty")
    if len(value) > max_len:
        raise InvalidRequest(reason=f"{what}.{key} is longer than {max_len} characters")
    return value


def bool_field(data: Mapping[str, Any], key: str, what: str, default: bool = False) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise InvalidRequest(reason=f"{what}.{key} must be a boolean, got {type(value).__name__}")
    return value


def str_map(
    data: Mapping[str, Any],
    key: str,
    what: str,
    max_entries: int,
    max_value: int = MAX_VALUE_LENGTH,
) -> dict[str, str]:
    value = data.get(key) or {}
    require_mapping(value, f"{what}.{key}")
    if len(value) > max_entries:
        raise InvalidRequest(reason=f"{what}.{key} has more than {max_entries} entries")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidRequest(reason=f"{what}.{key} must map strings to strings")
        if len(k) > MAX_VALUE_LENGTH or len(v) > max_value:
            raise InvalidRequest(
                reason=f"{what}.{key} entry {k[:40]!r} is too long "
                f"(keys up to {MAX_VALUE_LENGTH}, values up to "
                f"{max_value} characters)"
            )
        out[k] = v
    return out


def str_list(
    data: Mapping[str, Any], key: str, what: str, max_items: int = 1000
) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list | tuple):
        raise InvalidRequest(reason=f"{what}.{key} must be a list, got {type(value).__name__}")
    if len(value) > max_items:
        raise InvalidRequest(reason=f"{what}.{key} has more than {max_items} items")
    for item in value:
        if not isinstance(item, str) or not item or len(item) > MAX_VALUE_LENGTH:
            raise InvalidRequest(
                reason=f"{what}.{key} must hold non-empty strings of up to "
                f"{MAX_VALUE_LENGTH} characters"
            )
    return tuple(value)


def validate_uuid(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(reason=f"{what} must be a UUID string")
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise InvalidRequest(reason=f"{what} is not a valid UUID: {value[:64]!r}") from None


def validate_host_name(value: Any, what: str) -> str:
    """A host (or node, zone) name as a message carries it: printable, 1 to
    :data:`MAX_HOST_NAME` long, no space around it (not: that it exists)."""
    if not isinstance(value, str):
        raise InvalidRequest(reason=f"{what} must be a host name, got {type(value).__name__}")
    if not value or len(value) > MAX_HOST_NAME:
        raise InvalidRequest(reason=f"{what} must be 1 to {MAX_HOST_NAME} characters long")
    if not value.isprintable() or value != value.strip():
        raise InvalidRequest(reason=f"{what} is not a host name: {value[:64]!r}")
    return value


def validate_number(value: Any, what: str, lo: float, hi: float) -> float:
    """A finite number (not a boolean) between ``lo`` and ``hi``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(reason=f"{what} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidRequest(reason=f"{what} must be a finite number between {lo} and {hi}")
    return float(value)
