"""Image properties the host filters read, normalised as Nova normalises them.

An image may ask for a CPU architecture, a hypervisor type, a VM mode and a
hypervisor version. Names are read under their current keys and the legacy
ones (``architecture``, ``hypervisor_type``, ``vm_mode``,
``hypervisor_version_requires``); values are canonicalised (``AMD64`` ->
``x86_64``, ``i386`` -> ``i686``, ``xapi`` -> ``xen``, ``pv`` -> ``xen``,
``hv`` / ``baremetal`` -> ``hvm``, lower case throughout).

A version requirement is a comma-separated list of comparisons
(``>=6.0,<7.0``); versions compare as integers encoded the way computes
report them (``major * 1,000,000 + minor * 1,000 + patch``).

Nova fails the request deep in the filter on an unknown architecture, type
or mode; **we differ**: :func:`validate_image_properties` refuses it when
the request is validated, naming the property.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from scheduler.exceptions import InvalidRequest

ARCHITECTURES = frozenset(
    {
        "alpha",
        "armv6",
        "armv7l",
        "armv7b",
        "aarch64",
        "cris",
        "i686",
        "ia64",
        "lm32",
        "m68k",
        "microblaze",
        "microblazeel",
        "mips",
        "mipsel",
        "mips64",
        "mips64el",
        "openrisc",
        "parisc",
        "parisc64",
        "ppc",
        "ppcle",
        "ppc64",
        "ppc64le",
        "ppcemb",
        "s390",
        "s390x",
        "sh4",
        "sh4eb",
        "sparc",
        "sparc64",
        "unicore32",
        "x86_64",
        "xtensa",
        "xtensaeb",
    }
)
HYPERVISOR_TYPES = frozenset(
    {
        "baremetal",
        "bhyve",
        "docker",
        "fake",
        "hyperv",
        "ironic",
        "kqemu",
        "kvm",
        "lxc",
        "lxd",
        "openvz",
        "parallels",
        "virtuozzo",
        "phyp",
        "qemu",
        "test",
        "uml",
        "vbox",
        "vmware",
        "xen",
        "zvm",
        "pvm",
    }
)
VM_MODES = frozenset({"hvm", "xen", "uml", "exe"})

_ARCH_ALIASES = {
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "x86_32": "i686",
    "amd64": "x86_64",
    "x64": "x86_64",
}
_HV_ALIASES = {"xapi": "xen"}
_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}

#: (current name, legacy name) of each property the filters read.
ARCH_KEYS = ("hw_architecture", "architecture")
HV_TYPE_KEYS = ("img_hv_type", "hypervisor_type")
VM_MODE_KEYS = ("hw_vm_mode", "vm_mode")
VERSION_KEYS = ("img_hv_requested_version", "hypervisor_version_requires")


def canonical_arch(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip().lower()
    return _ARCH_ALIASES.get(name, name)


def canonical_hv_type(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip().lower()
    return _HV_ALIASES.get(name, name)


def canonical_vm_mode(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip().lower()
    return _MODE_ALIASES.get(name, name)


def version_to_int(text: str) -> int:
    """``"6.2.1"`` -> 6002001 (at most three parts, each below 1000).

    :raises ValueError: not such a version.
    """
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) < 1000 for p in parts):
        raise ValueError(f"not a version: {text!r}")
    numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    return numbers[0] * 1_000_000 + numbers[1] * 1_000 + numbers[2]


_COMPARISON = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*")
_COMPARE: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class VersionRequirement:
    """``>=6.0,<7.0`` as (operator, encoded version) pairs, all of which must hold."""

    text: str
    clauses: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, text: str) -> VersionRequirement:
        """:raises ValueError: naming what cannot be read."""
        clauses = []
        for part in text.split(","):
            match = _COMPARISON.fullmatch(part)
            if match is None:
                raise ValueError(f"{part.strip()!r} is not a comparison such as '>=6.0'")
            clauses.append((match.group(1), version_to_int(match.group(2))))
        return cls(text, tuple(clauses))

    def satisfied(self, versions: np.ndarray) -> np.ndarray:
        """Mask of the encoded ``versions`` that meet every clause."""
        ok = np.ones(versions.shape, dtype=bool)
        for op, bound in self.clauses:
            ok &= _COMPARE[op](versions, bound)
        return ok


@dataclass(frozen=True)
class ImageRequirements:
    """What an image asks of the host's hypervisor (all canonical; None: anything)."""

    arch: str | None = None
    hv_type: str | None = None
    vm_mode: str | None = None
    version: VersionRequirement | None = None

    @property
    def asks_anything(self) -> bool:
        """Nova checks nothing (not even the version) unless one of the three is set."""
        return any((self.arch, self.hv_type, self.vm_mode))


def _first(props: Mapping[str, str], keys: tuple[str, str]) -> tuple[str, str] | None:
    for key in keys:
        value = props.get(key)
        if value:
            return key, value
    return None


def image_requirements(
    props: Mapping[str, str], default_arch: str | None = None
) -> ImageRequirements:
    """Read and canonicalise; unreadable values are left out (validation refuses them)."""
    arch = _first(props, ARCH_KEYS)
    hv_type = _first(props, HV_TYPE_KEYS)
    mode = _first(props, VM_MODE_KEYS)
    version = _first(props, VERSION_KEYS)
    requirement = None
    if version is not None:
        try:
            requirement = VersionRequirement.parse(version[1])
        except ValueError:
            requirement = None
    return ImageRequirements(
        arch=canonical_arch(arch[1] if arch else default_arch),
        hv_type=canonical_hv_type(hv_type[1]) if hv_type else None,
        vm_mode=canonical_vm_mode(mode[1]) if mode else None,
        version=requirement,
    )


def validate_image_properties(props: Mapping[str, str], what: str = "image.properties") -> None:
    """Refuse an architecture, hypervisor type, VM mode or version requirement
    that cannot be read.

    :raises InvalidRequest: naming the property.
    """
    for keys, canonical, known in (
        (ARCH_KEYS, canonical_arch, ARCHITECTURES),
        (HV_TYPE_KEYS, canonical_hv_type, HYPERVISOR_TYPES),
        (VM_MODE_KEYS, canonical_vm_mode, VM_MODES),
    ):
        found = _first(props, keys)
        if found is not None and canonical(found[1]) not in known:
            raise InvalidRequest(
                reason=f"{what} {found[0]!r} = {found[1]!r} is not one of "
                f"{', '.join(sorted(known))}"
            )
    version = _first(props, VERSION_KEYS)
    if version is not None:
        try:
            VersionRequirement.parse(version[1])
        except ValueError as exc:
            raise InvalidRequest(reason=f"{what} {version[0]!r} = {version[1]!r}: {exc}") from None
