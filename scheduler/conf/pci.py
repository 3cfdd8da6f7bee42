"""``[pci]``: the PCI devices flavors may ask for by alias."""

from __future__ import annotations

from oslo_config import cfg

pci_group = cfg.OptGroup(
    "pci", title="PCI passthrough", help="The PCI devices flavors may ask for by alias."
)

pci_opts: list[cfg.Opt] = [
    cfg.MultiStrOpt(
        "alias",
        default=[],
        help='A PCI alias as JSON, one per line: {"name": "a1", '
        '"vendor_id": "8086", "product_id": "154d"}. A flavor asks '
        "for devices with the extra spec pci_passthrough:alias=a1:2 "
        "(PciPassthroughFilter). Without product_id any product of the vendor "
        "matches.",
    ),
]
