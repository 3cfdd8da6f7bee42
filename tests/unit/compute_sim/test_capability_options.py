"""compute-sim: what its options make each host report."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from oslo_config import cfg

from compute_sim.cmd import capability_report, cli_opts
from scheduler.engine.capabilities import CapabilityReport, NumaCell, PciPool


@pytest.fixture
def parse() -> Iterator:  # type: ignore[type-arg]
    confs: list[cfg.ConfigOpts] = []

    def _parse(*argv: str) -> CapabilityReport:
        conf = cfg.ConfigOpts()
        conf.register_cli_opts(cli_opts)
        conf(list(argv), project="compute-sim", default_config_files=[])
        confs.append(conf)
        return capability_report(conf)

    yield _parse
    for conf in confs:
        conf.reset()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            (),
            CapabilityReport(
                cpu_arch="x86_64",
                hypervisor_type="kvm",
                hypervisor_version=8_000_000,
                supported_instances=(("x86_64", "kvm", "hvm"),),
            ),
            id="defaults",
        ),
        pytest.param(
            ("--cpu-arch", "aarch64", "--hypervisor-type", "qemu", "--hypervisor-version", "9.1"),
            CapabilityReport(
                cpu_arch="aarch64",
                hypervisor_type="qemu",
                hypervisor_version=9_001_000,
                supported_instances=(("aarch64", "qemu", "hvm"),),
            ),
            id="arch-type-version",
        ),
        pytest.param(
            ("--numa-cells", "8:32768,4:16384", "--pci-devices", "8086:154d:4"),
            CapabilityReport(
                cpu_arch="x86_64",
                hypervisor_type="kvm",
                hypervisor_version=8_000_000,
                supported_instances=(("x86_64", "kvm", "hvm"),),
                numa_cells=(NumaCell(8, 32768), NumaCell(4, 16384)),
                pci_devices=(PciPool("8086", "154d", 4),),
            ),
            id="numa-and-pci",
        ),
    ],
)
def test_capability_report(
    parse,
    argv: tuple[str, ...],  # type: ignore[no-untyped-def]
    expected: CapabilityReport,
) -> None:
    assert parse(*argv) == expected


def test_extra_capabilities_nest_and_read_json(parse) -> None:  # type: ignore[no-untyped-def]
    report = parse(
        "--capability",
        "cpu_info:vendor=Intel",
        "--capability",
        'cpu_info:features=["avx", "sse"]',
        "--capability",
        "ssd=true",
    )
    assert report.extra == {
        "cpu_info": {"vendor": "Intel", "features": ["avx", "sse"]},
        "ssd": True,
    }
    assert report.attributes()["cpu_info:features"] == ("avx", "sse")
