"""Parsing a request spec into request groups: what is read, what is refused."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import scheduler
from scheduler.exceptions import InvalidRequest
from scheduler.objects import Flavor, Image, RequestSpec
from scheduler.resource_request import RequestGroup, ResourceRequest
from tests.unit.factories import spec

FLAVOR = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


def group(suffix: str = "", resources: dict[str, int] | None = None, **kw: Any) -> RequestGroup:
    return RequestGroup(
        suffix=suffix,
        resources=FLAVOR if resources is None and not suffix else resources or {},
        **kw,
    )


@pytest.mark.parametrize(
    ("extra_specs", "image_props", "expected"),
    [
        pytest.param({}, {}, ResourceRequest((group(),)), id="flavor-only"),
        pytest.param(
            {"hw:cpu_policy": "dedicated", "capabilities:cpu_info": "x"},
            {},
            ResourceRequest((group(),)),
            id="other-namespaces-ignored",
        ),
        pytest.param(
            {"resources:VCPU": "4"},
            {},
            ResourceRequest((group(resources={**FLAVOR, "VCPU": 4}),)),
            id="override-vcpu",
        ),
        pytest.param(
            {"resources:DISK_GB": "0"},
            {},
            ResourceRequest((group(resources={"VCPU": 1, "MEMORY_MB": 1024}),)),
            id="override-disk-to-zero-drops-it",
        ),
        pytest.param(
            {"resources:CUSTOM_FPGA_X": "2"},
            {},
            ResourceRequest((group(resources={**FLAVOR, "CUSTOM_FPGA_X": 2}),)),
            id="custom-class",
        ),
        pytest.param(
            {"trait:HW_CPU_X86_AVX512F": "required", "trait:CUSTOM_SLOW": "forbidden"},
            {},
            ResourceRequest(
                (
                    group(
                        required_traits=frozenset({"HW_CPU_X86_AVX512F"}),
                        forbidden_traits=frozenset({"CUSTOM_SLOW"}),
                    ),
                )
            ),
            id="flavor-traits",
        ),
        pytest.param(
            {"trait:A": "required"},
            {"trait:B": "required", "hw_arch": "x86_64"},
            ResourceRequest((group(required_traits=frozenset({"A", "B"})),)),
            id="image-trait-joins-the-flavor's",
        ),
        pytest.param(
            {"required": "A,!B&in:C,D&in:E"},
            {},
            ResourceRequest(
                (
                    group(
                        required_traits=frozenset({"A"}),
                        forbidden_traits=frozenset({"B"}),
                        any_traits=(frozenset({"C", "D"}), frozenset({"E"})),
                    ),
                )
            ),
            id="required-clauses-and-any-of",
        ),
        pytest.param(
            {"member_of": "in:agg1,agg2&agg3&!agg4&!in:agg5,agg6"},
            {},
            ResourceRequest(
                (
                    group(
                        member_of=(frozenset({"agg1", "agg2"}), frozenset({"agg3"})),
                        forbidden_aggregates=frozenset({"agg4", "agg5", "agg6"}),
                    ),
                )
            ),
            id="member-of-any-all-and-forbidden",
        ),
        pytest.param(
            {
                "resources1:VGPU": "1",
                "trait1:CUSTOM_NVIDIA_11": "required",
                "member_of1": "gpu-agg",
            },
            {},
            ResourceRequest(
                (
                    group(),
                    group(
                        "1",
                        {"VGPU": 1},
                        required_traits=frozenset({"CUSTOM_NVIDIA_11"}),
                        member_of=(frozenset({"gpu-agg"}),),
                    ),
                )
            ),
            id="one-granular-group-needs-no-policy",
        ),
        pytest.param(
            {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "isolate"},
            {},
            ResourceRequest(
                (group(), group("1", {"VGPU": 1}), group("2", {"VGPU": 1})), group_policy="isolate"
            ),
            id="two-groups-isolate",
        ),
        pytest.param(
            {"resources_gpu:VGPU": "1", "required_gpu": "in:CUSTOM_A,CUSTOM_B"},
            {},
            ResourceRequest(
                (
                    group(),
                    group("_gpu", {"VGPU": 1}, any_traits=(frozenset({"CUSTOM_A", "CUSTOM_B"}),)),
                )
            ),
            id="named-suffix",
        ),
        pytest.param(
            {
                "resources:VCPU": "0",
                "resources:MEMORY_MB": "0",
                "resources:DISK_GB": "0",
                "resources1:VCPU": "2",
            },
            {},
            ResourceRequest((group(resources={}), group("1", {"VCPU": 2}))),
            id="everything-moved-to-a-numbered-group",
        ),
    ],
)
def test_parsed(extra_specs: dict, image_props: dict, expected: ResourceRequest) -> None:
    request = spec(extra_specs=extra_specs, image=Image(properties=image_props)).resource_request
    assert request == expected


@pytest.mark.parametrize(
    ("extra_specs", "image_props", "names"),
    [
        pytest.param({"resources:VCPUS": "1"}, {}, "resources:VCPUS", id="unknown-standard-class"),
        pytest.param(
            {"resources:custom_x": "1"}, {}, "resources:custom_x", id="lower-case-custom-class"
        ),
        pytest.param({"resources:VCPU": "-1"}, {}, "resources:VCPU", id="negative-amount"),
        pytest.param({"resources:VCPU": "two"}, {}, "resources:VCPU", id="amount-not-a-number"),
        pytest.param({"resources:VCPU": "99999999999"}, {}, "resources:VCPU", id="huge-amount"),
        pytest.param({"resources1:VGPU": "0"}, {}, "resources1:VGPU", id="zero-in-numbered-group"),
        pytest.param({"trait:HW_X": "yes"}, {}, "trait:HW_X", id="trait-value"),
        pytest.param({"trait:hw-x": "required"}, {}, "trait:hw-x", id="trait-name"),
        pytest.param({"trait1:CUSTOM_X": "required"}, {}, "group 1", id="group-without-resources"),
        pytest.param(
            {"resources1:VGPU": "1", "resources2:VGPU": "1"},
            {},
            "group_policy",
            id="two-groups-without-policy",
        ),
        pytest.param(
            {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "spread"},
            {},
            "group_policy",
            id="unknown-policy",
        ),
        pytest.param(
            {"trait:A": "required", "required": "!A"}, {}, "A", id="required-and-forbidden"
        ),
        pytest.param({"required": "!in:A,B"}, {}, "required", id="not-in-for-traits"),
        pytest.param({"required": "A&&B"}, {}, "required", id="empty-clause"),
        pytest.param({"member_of": "a,b"}, {}, "member_of", id="member-of-list-without-in"),
        pytest.param({"member_of": "in:a,,b"}, {}, "member_of", id="member-of-empty-name"),
        pytest.param(
            {}, {"trait:CUSTOM_X": "forbidden"}, "trait:CUSTOM_X", id="image-trait-not-required"
        ),
        pytest.param(
            {}, {"trait1:CUSTOM_X": "required"}, "trait1:CUSTOM_X", id="image-trait-in-a-group"
        ),
        pytest.param(
            {"resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"},
            {},
            "no resources",
            id="nothing-asked",
        ),
    ],
)
def test_refused_at_validation_naming_the_spec(
    extra_specs: dict, image_props: dict, names: str
) -> None:
    primitive = spec(extra_specs=extra_specs, image=Image(properties=image_props)).to_primitive()
    with pytest.raises(InvalidRequest) as err:
        RequestSpec.from_primitive(primitive)
    assert names in err.value.message


def test_volume_backed_root_disk_is_not_asked() -> None:
    flavor = Flavor(name="f", vcpus=1, memory_mb=512, root_gb=20, ephemeral_gb=5, swap_mb=1500)
    request = RequestSpec(flavor=flavor, project_id="p", user_id="u", is_bfv=True).resource_request
    assert dict(request.unsuffixed.resources) == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 7}


def test_totals_and_required_traits_span_groups() -> None:
    request = spec(
        extra_specs={
            "resources1:VCPU": "2",
            "trait1:CUSTOM_A": "required",
            "trait:CUSTOM_B": "required",
        }
    ).resource_request
    assert request.resources == {"VCPU": 3, "MEMORY_MB": 1024, "DISK_GB": 10}
    assert request.required_traits == {"CUSTOM_A", "CUSTOM_B"}


def test_image_disk_format_round_trips_and_is_checked() -> None:
    image = Image.from_primitive({"id": "img", "disk_format": "qcow2"})
    assert Image.from_primitive(image.to_primitive()) == image
    with pytest.raises(InvalidRequest):
        Image.from_primitive({"disk_format": "QCOW 2"})


def _imports(module: str) -> set[str]:
    """The ``scheduler`` modules a module of the package imports anywhere in it
    (at the top, under TYPE_CHECKING, inside a function), read from its source."""
    root = Path(scheduler.__file__).parent
    path = root.joinpath(*module.split(".")[1:])
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == "scheduler" and _is_module(root, name)}


def _is_module(root: Path, name: str) -> bool:
    path = root.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_resource_request_does_not_depend_on_the_request_objects() -> None:
    # One way only: scheduler.objects builds its resource request from this
    # module, so nothing this module imports, however indirectly, may import
    # scheduler.objects back.
    assert "scheduler.resource_request" in _imports("scheduler.objects")
    seen, todo = set(), ["scheduler.resource_request"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += _imports(module)
    assert "scheduler.objects" not in seen, sorted(seen)
