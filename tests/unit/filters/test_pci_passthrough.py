"""PciPassthroughFilter (simplified): free devices per alias."""

from __future__ import annotations

import pytest

from scheduler.engine.settings import PciAlias
from scheduler.exceptions import InvalidRequest
from scheduler.filters.pci_passthrough import PciPassthroughFilter, requested_devices
from tests.unit.factories import host, spec
from tests.unit.filters.helpers import kept

ALIASES = {
    "nic": PciAlias("nic", "8086", "154d"),
    "vf": PciAlias("vf", "8086", "154c"),
    "any-intel": PciAlias("any-intel", "8086"),
}


def pools(*entries: tuple[str, str, int]) -> dict[str, list[dict[str, object]]]:
    return {"pci_devices": [{"vendor_id": v, "product_id": p, "count": n} for v, p, n in entries]}


HOSTS = [
    host("nics", capabilities=pools(("8086", "154D", 2))),
    host("vfs", capabilities=pools(("8086", "154c", 4), ("8086", "154c", 4))),
    host("mixed", capabilities=pools(("8086", "154d", 1), ("8086", "154c", 1))),
    host("none"),
]


@pytest.mark.parametrize(
    ("alias_spec", "expected"),
    [
        pytest.param(None, ["nics", "vfs", "mixed", "none"], id="no-request"),
        pytest.param("nic", ["nics", "mixed"], id="one-device"),
        pytest.param("nic:2", ["nics"], id="count"),
        pytest.param("vf:8", ["vfs"], id="pools-of-a-kind-add-up"),
        pytest.param("nic:1, vf:1", ["mixed"], id="every-alias"),
        pytest.param("nic:1,nic:1", ["nics"], id="repeated-alias-adds-up"),
        pytest.param("any-intel:3", ["vfs"], id="vendor-alias-any-product"),
    ],
)
def test_pci_passthrough(alias_spec: str | None, expected: list[str]) -> None:
    extra = {"pci_passthrough:alias": alias_spec} if alias_spec is not None else {}
    assert (
        kept(PciPassthroughFilter, HOSTS, spec(extra_specs=extra), pci_aliases=ALIASES) == expected
    )


@pytest.mark.parametrize(
    ("alias_spec", "message"),
    [
        pytest.param("gpu:1", "PCI alias 'gpu', which is not configured", id="unknown-alias"),
        pytest.param("nic:0", "positive count", id="zero-count"),
        pytest.param("nic:x", "positive count", id="not-a-count"),
        pytest.param(":2", "positive count", id="no-name"),
    ],
)
def test_bad_alias_requests_are_refused(alias_spec: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        requested_devices(spec(extra_specs={"pci_passthrough:alias": alias_spec}), ALIASES)
    assert message in err.value.message


@pytest.mark.parametrize(
    ("text", "alias"),
    [
        pytest.param(
            '{"name": "a1", "vendor_id": "8086", "product_id": "154D"}',
            PciAlias("a1", "8086", "154d"),
            id="full",
        ),
        pytest.param(
            '{"name": "a1", "vendor_id": "10DE", "device_type": "type-PF"}',
            PciAlias("a1", "10de", None),
            id="no-product",
        ),
    ],
)
def test_alias_from_config(text: str, alias: PciAlias) -> None:
    assert PciAlias.from_json(text) == alias


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a1", id="not-json"),
        pytest.param('["a1"]', id="not-an-object"),
        pytest.param('{"name": "a1"}', id="no-vendor"),
        pytest.param('{"vendor_id": "8086"}', id="no-name"),
    ],
)
def test_bad_alias_config_fails(text: str) -> None:
    with pytest.raises(ValueError, match="PCI alias"):
        PciAlias.from_json(text)
