"""Hypothesis strategies for what a caller can send the scheduler, good and bad.

Request specs are drawn mostly well-formed, so that many reach the engine
and get a decision, with every field now and then replaced by something of
the wrong type or out of range, and extra specs and image properties drawn
from the vocabulary the request filters and host filters read (plus noise).
:data:`CLOUD_HOSTS` names the hosts of the fuzz tests' cloud, so forced and
ignored hosts, hints and destinations sometimes name real hosts.

Used by the in-process fuzz tests (tests/unit/test_fuzz_rpc.py) and the
batches over real RabbitMQ (tests/functional_faults/test_bad_input.py, and
the compute's and the conductor's, test_bad_input_rpc.py).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: Host names of the fuzz cloud (see :func:`cloud`): forced, ignored and
#: requested hosts are drawn from these and a few that do not exist.
CLOUD_HOSTS = (
    "h0",
    "h1",
    "h2",
    "h3",
    "trait-a",
    "trait-b",
    "caps",
    "off",
    "gone",
    "gpu",
    "tiny",
    "tenant",
)
TRAITS = (
    "HW_CPU_X86_AVX2",
    "CUSTOM_FAST",
    "CUSTOM_NOWHERE",
    "COMPUTE_STATUS_DISABLED",
    "COMPUTE_IMAGE_TYPE_QCOW2",
    "lower-case",
    "",
)
RESOURCE_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB", "VGPU", "CUSTOM_MAGIC", "PCPU", "Bad RC", "")
ZONES = ("nova", "az1", "az2", "atlantis", "")

#: Scalars of every JSON type and a few Python ones msgpack/JSON allow.
bad_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)

#: Any JSON value, nested.
json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


#: Every family of bad value an RPC argument can be given (the compute's and
#: the conductor's fuzz batch, tests/functional_faults/test_bad_input_rpc.py):
#: wrong types, empty, huge, non-finite, unknown names.
bad_arguments = st.one_of(
    bad_scalars,
    json_values,
    st.sampled_from(("", " ", "x" * 300, "x" * 70000, "nowhere", "h0\n", "\x00")),
    st.sampled_from((float("nan"), float("inf"), -float("inf"), 1e308, -1, 5, 2**64)),
    st.uuids().map(lambda u: str(u).upper().replace("-", "")),
    st.text(min_size=256, max_size=300),
)

names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)
real_host_names = st.one_of(st.sampled_from(CLOUD_HOSTS), st.sampled_from(("H0", "nowhere")))
host_names = st.one_of(real_host_names, st.just(""), names)
uuids = st.uuids().map(str)


def _extra_spec_keys() -> st.SearchStrategy[str]:
    suffix = st.sampled_from(("", "", "1", "2", "_nic", "x y"))
    return st.one_of(
        st.builds(lambda s, rc: f"resources{s}:{rc}", suffix, st.sampled_from(RESOURCE_CLASSES)),
        st.builds(lambda s, t: f"trait{s}:{t}", suffix, st.sampled_from(TRAITS)),
        st.builds(lambda s: f"required{s}", suffix),
        st.builds(lambda s: f"member_of{s}", suffix),
        st.sampled_from(
            (
                "group_policy",
                "hw:numa_nodes",
                "hw:numa_cpus.0",
                "hw:numa_mem.0",
                "hw:numa_cpus.1",
                "hw:numa_mem.1",
                "pci_passthrough:alias",
                "capabilities:hypervisor_type",
                "capabilities:vcpus",
                "capabilities:cpu_arch",
                "aggregate_instance_extra_specs:ssd",
                "ssd",
                "hw:cpu_policy",
                "quota:cpu_shares",
            )
        ),
        st.text(max_size=24),
    )


EXTRA_SPEC_VALUES = (
    "required",
    "forbidden",
    "isolate",
    "none",
    "0",
    "1",
    "2",
    "4",
    "-1",
    "lots",
    "2147483648",
    "true",
    "false",
    "kvm",
    "x86_64",
    ">= 4",
    "= 2",
    "== 16",
    "s== kvm",
    "s!= qemu",
    "<in> kvm",
    "<all-in> a b",
    "<or> kvm <or> qemu",
    "<or>",
    "0-1",
    "0,1",
    "512",
    "1024",
    "nic:1",
    "nic:2",
    "nic:x",
    "gpu:1",
    "in:HW_CPU_X86_AVX2,CUSTOM_FAST",
    "!CUSTOM_FAST",
    "HW_CPU_X86_AVX2,!CUSTOM_NOWHERE",
    "in:az1-agg",
    "!in:az1-agg&ssd-agg",
    "",
)

extra_specs = st.dictionaries(
    _extra_spec_keys(),
    st.one_of(st.sampled_from(EXTRA_SPEC_VALUES), st.text(max_size=16)),
    max_size=6,
)

image_properties = st.dictionaries(
    st.one_of(
        st.sampled_from(
            (
                "hw_architecture",
                "img_hv_type",
                "hypervisor_type",
                "hw_vm_mode",
                "img_hv_requested_version",
                "hw_machine_type",
                "os_distro",
                "trait:HW_CPU_X86_AVX2",
                "trait:CUSTOM_NOWHERE",
                "trait:lower",
            )
        ),
        st.text(max_size=16),
    ),
    st.one_of(
        st.sampled_from(
            (
                "x86_64",
                "amd64",
                "aarch64",
                "pdp11",
                "kvm",
                "KVM",
                "qemu",
                "hvm",
                "xen",
                ">=6.0",
                "new",
                "required",
                "q35",
                "ubuntu",
            )
        ),
        st.text(max_size=16),
    ),
    max_size=4,
)


def _flavor() -> st.SearchStrategy[dict[str, Any]]:
    small = st.integers(min_value=0, max_value=64)
    return st.fixed_dictionaries(
        {
            "name": names,
            "vcpus": st.one_of(st.integers(1, 8), st.integers(1, 8), st.integers(1, 5000)),
            "memory_mb": st.one_of(
                st.integers(1, 8192), st.integers(1, 8192), st.integers(1, 10**6)
            ),
        },
        optional={
            "root_gb": small,
            "ephemeral_gb": small,
            "swap_mb": st.integers(0, 4096),
            "extra_specs": extra_specs,
        },
    )


def _image() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {},
            optional={
                "id": st.one_of(st.none(), uuids, st.sampled_from(("isolated-image",))),
                "properties": image_properties,
                "disk_format": st.sampled_from(("qcow2", "raw", "RAW", "vhd x", None)),
            },
        ),
    )


def _group() -> st.SearchStrategy[Any]:
    policy = st.sampled_from(
        ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity", "nearby")
    )
    return st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"uuid": st.one_of(uuids, uuids, uuids, st.text(max_size=8)), "policy": policy},
            optional={"max_server_per_host": st.integers(0, 3)},
        ),
    )


def _hints() -> st.SearchStrategy[Any]:
    return st.dictionaries(
        st.sampled_from(("same_host", "different_host", "query", "group")),
        st.lists(st.one_of(uuids, names), max_size=3),
        max_size=2,
    )


#: Request specs with every field of the right type; their values are drawn
#: from what the filters read, so some are still refused (an unknown trait,
#: an impossible NUMA split) and many get a decision.
_plain_specs: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"flavor": _flavor(), "project_id": names, "user_id": names},
    optional={
        "num_instances": st.integers(min_value=1, max_value=3),
        "image": _image(),
        "availability_zone": st.one_of(st.none(), st.sampled_from(ZONES)),
        "is_bfv": st.booleans(),
        "group": _group(),
        "ignore_hosts": st.lists(real_host_names, max_size=3),
        "scheduler_hints": _hints(),
    },
)
#: What steers a request to named hosts (admin only): at most one such field.
_steering = st.one_of(
    st.fixed_dictionaries({"force_hosts": st.lists(host_names, min_size=1, max_size=2)}),
    st.fixed_dictionaries({"force_nodes": st.lists(host_names, min_size=1, max_size=2)}),
    st.fixed_dictionaries(
        {
            "requested_destination": st.fixed_dictionaries(
                {"host": host_names}, optional={"node": st.one_of(st.none(), host_names)}
            )
        }
    ),
)


@st.composite
def _well_typed(draw: st.DrawFn) -> dict[str, Any]:
    spec = draw(_plain_specs)
    if draw(st.integers(0, 5)) == 0:
        spec.update(draw(_steering))
    return spec


#: Request specs with every field of the right type; their values are drawn
#: from what the filters read, so some are still refused (an unknown trait,
#: an impossible NUMA split) and many get a decision; one in six forces a
#: host or node or requests a destination.
well_typed_specs: st.SearchStrategy[dict[str, Any]] = _well_typed()

#: Where a broken spec is broken: a top-level field, or one of the flavor's.
_SPEC_FIELDS = (
    "flavor",
    "project_id",
    "user_id",
    "num_instances",
    "image",
    "availability_zone",
    "is_bfv",
    "group",
    "ignore_hosts",
    "scheduler_hints",
    "force_hosts",
    "force_nodes",
    "requested_destination",
    "colour",
)
_FLAVOR_FIELDS = (
    "name",
    "vcpus",
    "memory_mb",
    "root_gb",
    "ephemeral_gb",
    "swap_mb",
    "extra_specs",
    "gpus",
)


@st.composite
def broken_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A well-typed spec with one field (or one flavor field) replaced by a
    value of another kind, removed, or added where none is known."""
    spec = draw(well_typed_specs)
    bad = draw(st.one_of(bad_scalars, json_values))
    if draw(st.booleans()):
        key = draw(st.sampled_from(_SPEC_FIELDS))
        target = spec
    else:
        key = draw(st.sampled_from(_FLAVOR_FIELDS))
        target = spec["flavor"] = dict(spec["flavor"])
    if draw(st.integers(0, 9)) == 0:
        target.pop(key, None)
    else:
        target[key] = bad
    return spec


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each drawn with its weight (``st.one_of`` draws
    its branches evenly, however often one is repeated)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


#: A request spec: well typed (six in ten), broken in one place (three), or
#: any JSON value at all (one).
any_request_spec = weighted((6, well_typed_specs), (3, broken_specs()), (1, json_values))


@st.composite
def instance_uuids_for(draw: st.DrawFn, spec: Any) -> Any:
    """The instance uuids sent with ``spec``: usually one fresh uuid per instance,
    sometimes the wrong count, duplicates, bad strings or not a list."""
    count = spec.get("num_instances", 1) if isinstance(spec, dict) else 1
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 5:
        count = 1
    fresh = draw(
        st.lists(st.uuids(version=4).map(str), min_size=count, max_size=count, unique=True)
    )
    return draw(
        weighted(
            (16, st.just(fresh)),
            (1, st.just(fresh + fresh[:1])),
            (1, st.just(fresh[1:])),
            (1, st.lists(st.one_of(uuids, names), max_size=3)),
            (1, bad_scalars),
        )
    )


#: Who asks: a member, an admin, a member with a role called admin, or a
#: context whose is_admin is truthy but not True.
contexts = st.sampled_from(("member", "member", "admin", "admin", "role-only", "truthy-admin"))
