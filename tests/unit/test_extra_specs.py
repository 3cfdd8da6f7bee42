"""The extra-spec operator language: matching and validation."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.extra_specs import (
    AGGREGATE_SCOPE,
    CAPABILITIES_SCOPE,
    parse,
    scoped_key,
    validate_extra_specs,
)


@pytest.mark.parametrize(
    ("value", "requirement", "matches"),
    [
        pytest.param("x86_64", "x86_64", True, id="plain-equal"),
        pytest.param("X86_64", "x86_64", False, id="plain-is-case-sensitive"),
        pytest.param("a b", "a b", True, id="plain-compares-whole-text"),
        pytest.param("123", "= 123", True, id="eq-sign-is-numeric-ge-equal"),
        pytest.param("124", "= 123", True, id="eq-sign-is-numeric-ge-above"),
        pytest.param("122", "= 123", False, id="eq-sign-is-numeric-ge-below"),
        pytest.param("12.0", "== 12", True, id="numeric-eq"),
        pytest.param("12.5", "!= 12", True, id="numeric-ne"),
        pytest.param("12", ">= 12.0", True, id="numeric-ge"),
        pytest.param("13", "<= 12", False, id="numeric-le"),
        pytest.param(4096, ">= 2048", True, id="numeric-host-value"),
        pytest.param("many", ">= 2", False, id="non-numeric-host-value-never-matches"),
        pytest.param("10", "s> 9", False, id="string-gt-is-lexical"),
        pytest.param("abc", "s== abc", True, id="string-eq"),
        pytest.param("abc", "s!= abc", False, id="string-ne"),
        pytest.param("b", "s>= a", True, id="string-ge"),
        pytest.param("a", "s< b", True, id="string-lt"),
        pytest.param("a", "s<= a", True, id="string-le"),
        pytest.param("abc", "s== abc def", True, id="only-the-first-word-counts"),
        pytest.param("Intel Xeon", "<in> Xeon", True, id="in-substring"),
        pytest.param("Intel Xeon", "<in> Epyc", False, id="in-missing"),
        pytest.param("avx avx2 sse4", "<all-in> avx2 sse4", True, id="all-in-every-word"),
        pytest.param("avx avx2", "<all-in> avx2 sse4", False, id="all-in-one-missing"),
        pytest.param("kvm", "<or> xen <or> kvm", True, id="or-second"),
        pytest.param("qemu", "<or> xen <or> kvm", False, id="or-none"),
        pytest.param("kvm", "<or> kvm", True, id="or-single"),
        pytest.param(None, "x", False, id="unreported-never-matches"),
        pytest.param(True, "True", True, id="boolean-as-python-text"),
        pytest.param(("avx", "sse"), "avx", True, id="list-contains-value"),
        pytest.param(("avx", "sse"), "<in> ss", True, id="list-any-element-matches"),
        pytest.param(("avx", "sse"), "<all-in> avx sse", True, id="list-all-in-elements"),
        pytest.param(("avx", "sse"), "<all-in> avx fma", False, id="list-all-in-missing"),
        pytest.param((), "avx", False, id="empty-list"),
    ],
)
def test_match(value: Any, requirement: str, matches: bool) -> None:
    assert parse(requirement).matches(value) is matches


@pytest.mark.parametrize(
    ("key", "scope", "attribute"),
    [
        pytest.param(
            "capabilities:cpu_info:vendor",
            CAPABILITIES_SCOPE,
            "cpu_info:vendor",
            id="scoped-nested",
        ),
        pytest.param("ssd", CAPABILITIES_SCOPE, "ssd", id="unscoped-is-read-by-capabilities"),
        pytest.param("ssd", AGGREGATE_SCOPE, "ssd", id="unscoped-is-read-by-aggregates"),
        pytest.param(
            "aggregate_instance_extra_specs:ssd", AGGREGATE_SCOPE, "ssd", id="aggregate-scope"
        ),
        pytest.param(
            "aggregate_instance_extra_specs:ssd", CAPABILITIES_SCOPE, None, id="other-scope"
        ),
        pytest.param("hw:cpu_policy", CAPABILITIES_SCOPE, None, id="hw-namespace"),
        pytest.param("trait:HW_CPU_X86_AVX", AGGREGATE_SCOPE, None, id="trait-namespace"),
        pytest.param("capabilities:", CAPABILITIES_SCOPE, None, id="empty-key"),
        pytest.param("group_policy", AGGREGATE_SCOPE, None, id="placement-key"),
        pytest.param("required", CAPABILITIES_SCOPE, None, id="placement-required"),
        pytest.param("required2", AGGREGATE_SCOPE, None, id="placement-numbered-required"),
        pytest.param("member_of", AGGREGATE_SCOPE, None, id="placement-member-of"),
        pytest.param("member_of_gpu", CAPABILITIES_SCOPE, None, id="placement-named-member-of"),
        pytest.param(
            "requiredness",
            AGGREGATE_SCOPE,
            "requiredness",
            id="not-a-group-suffix-is-an-aggregate-key",
        ),
    ],
)
def test_scoped_key(key: str, scope: str, attribute: str | None) -> None:
    assert scoped_key(key, scope) == attribute


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        pytest.param(
            {"capabilities:vcpus": ">= many"},
            "'capabilities:vcpus' = '>= many': "
            "operator '>=' compares numbers and 'many' is not one",
            id="numeric-non-number",
        ),
        pytest.param(
            {"aggregate_instance_extra_specs:gen": "= new"}, "'= new'", id="eq-sign-non-number"
        ),
        pytest.param(
            {"capabilities:hypervisor_type": "<or>"}, "operator '<or>' needs a value", id="bare-or"
        ),
        pytest.param({"ssd": "s=="}, "operator 's==' needs a value", id="operator-without-value"),
        pytest.param({"ssd": "== nan"}, "'nan' is not one", id="nan-is-not-a-number"),
    ],
)
def test_unreadable_requirements_are_refused_naming_the_spec(
    specs: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_extra_specs(specs)
    assert message in err.value.message
    assert err.value.message.startswith("invalid request: flavor.extra_specs")


@pytest.mark.parametrize(
    "specs",
    [
        pytest.param({}, id="none"),
        pytest.param({"capabilities:vcpus": ">= 4", "ssd": "true"}, id="readable"),
        pytest.param(
            {"hw:numa_nodes": ">= x", "trait:CUSTOM_A": "required"},
            id="other-namespaces-are-not-operator-specs",
        ),
        pytest.param({"capabilities:x": "<or> a <or>"}, id="trailing-or-as-nova"),
    ],
)
def test_readable_requirements_pass(specs: dict[str, str]) -> None:
    validate_extra_specs(specs)
    assert all(
        parse(text).problem is None
        for key, text in specs.items()
        if ":" not in key or key.startswith("capabilities:")
    )
