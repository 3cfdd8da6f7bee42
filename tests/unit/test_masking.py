"""Masking: no secret survives, in any form oslo.utils knows or a URL the project
accepts, and what is not a secret comes back as it was.

The keys are oslo.utils' own list, read from ``oslo_utils.strutils`` when the
tests run (never a copy), so a key oslo.utils adds is tested the day it ships.
Every test asserts the exact masked text: a secret that survives in part fails
as surely as one that survives whole.
"""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oslo_utils import strutils

from scheduler.log import MASK, is_secret_key, mask_secrets, masked
from scheduler.store.redis_store import CLUSTER_SCHEMES, SENTINEL_SCHEME


def oslo_secret_keys() -> list[str]:
    """The names oslo.utils masks, as the installed oslo.utils has them."""
    return list(strutils._SANITIZE_KEYS)


#: The names masked beside oslo.utils' list (scheduler.log says which).
MORE_KEYS = ["passwd"]
#: Every scheme a transport or store URL of the project may have.
SCHEMES = ["rabbit://", "redis://", "rediss://", "unix://", SENTINEL_SCHEME, *CLUSTER_SCHEMES]


_ALL_KEYS = [*oslo_secret_keys(), *MORE_KEYS]


def holds_a_key(text: str) -> bool:
    lowered = text.lower()
    return any(key in lowered for key in _ALL_KEYS)


def test_the_list_is_oslo_utils_own() -> None:
    keys = oslo_secret_keys()
    assert len(keys) >= 35
    assert {"admin_pass", "private_key", "secret_uuid", "configdrive", "token"} <= set(keys)
    assert all(is_secret_key(key) for key in keys)
    assert not is_secret_key("host") and not is_secret_key("flavor")


# --- what is drawn ---------------------------------------------------------------------

#: A key oslo.utils treats as secret, as it matches keys: anywhere in the name,
#: whatever the case (``db_Password2``, ``X-Auth-Token``).
secret_keys = st.builds(
    lambda prefix, key, suffix, case: case(f"{prefix}{key}{suffix}"),
    st.from_regex(r"([a-z][a-z0-9]{0,3}[_.-])?", fullmatch=True),
    st.sampled_from(_ALL_KEYS),
    st.from_regex(r"([_-]?[a-z0-9]{1,3})?", fullmatch=True),
    st.sampled_from([str.lower, str.upper, str.title, str]),
)
#: A key that is not a secret's.
plain_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True).filter(
    lambda key: not holds_a_key(key)
)
#: Any character a text can hold but a space (a bare ``k=v`` value ends at one).
_unspaced = st.characters(blacklist_categories=("Z", "C"))
#: A secret as a bare value: up to the next space or quote, as oslo.utils reads ``k=v``
#: (one that opens a bracket is a bracketed value: :func:`test_a_bracketed_value_never_survives`).
bare_secrets = st.text(_unspaced.filter(lambda c: c not in "\"'"), min_size=1, max_size=24).filter(
    lambda v: v[0] not in "[{("
)
#: A secret as a quoted value: anything at all (escaped as JSON or Python escape it).
any_secrets = st.text(min_size=1, max_size=24)
#: Text around a secret that holds none: words with no secret key, no quote,
#: no ``=``, ``:``, ``@`` or ``<``.
_word = st.text(
    st.sampled_from(string.ascii_letters + string.digits + "_.,;/()[]{}!?#%+-"),
    min_size=1,
    max_size=10,
).filter(lambda w: not holds_a_key(w))
plain_text = st.lists(_word, max_size=4).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(key=st.text(max_size=30) | secret_keys | plain_keys)
def test_a_key_is_secret_exactly_when_oslo_utils_masks_it(key: str) -> None:
    """The matching is oslo.utils' own: ``mask_dict_password`` masks the value
    under ``key`` exactly when :func:`is_secret_key` says so (``passwd`` aside),
    and such a key's value is masked in text too."""
    oslo_masks = strutils.mask_dict_password({key: "v"})[key] == "***"
    assert is_secret_key(key) == (oslo_masks or "passwd" in key.lower())
    if is_secret_key(key):
        assert masked({key: "hunter2"}) == {key: MASK}
        quoted = json.dumps(key, ensure_ascii=False)
        text = f"{{{quoted}: {json.dumps('hunter2')}, 'n': 1}}"
        assert mask_secrets(text) == f"{{{quoted}: {json.dumps(MASK)}, 'n': 1}}"


def _around(before: str, form: str, after: str) -> str:
    return " ".join(part for part in (before, form, after) if part)


# --- every form of a key and its value -------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    key=secret_keys,
    value=bare_secrets,
    sep=st.sampled_from(["=", " = ", ": ", ":", " : "]),
    before=plain_text,
    after=plain_text,
)
def test_a_bare_value_never_survives(
    key: str, value: str, sep: str, before: str, after: str
) -> None:
    """``k=v``, ``k = v``, ``k: v``: the value is masked up to the next space."""
    text = _around(before, f"{key}{sep}{value}", after)
    assert mask_secrets(text) == _around(before, f"{key}{sep}{MASK}", after)


@settings(max_examples=200, deadline=None)
@given(
    key=secret_keys,
    values=st.lists(any_secrets, min_size=1, max_size=3),
    shape=st.sampled_from([list, tuple, "json", "mapping"]),
    sep=st.sampled_from(["=", ": ", "': ", '": ']),
    before=plain_text,
    after=plain_text,
)
def test_a_bracketed_value_never_survives(
    key: str, values: list[str], shape: Any, sep: str, before: str, after: str
) -> None:
    """``k=[...]``, ``'k': (...)``, ``"k": {...}`` as Python or JSON writes them (a
    scheduler hint's list of values, a nested mapping): masked whole, brackets
    and quotes inside counted."""
    if shape == "json":
        value = json.dumps(values)
    elif shape == "mapping":
        value = repr({f"v{n}": [v, "(]"] for n, v in enumerate(values)})
    else:
        value = repr(shape(values))
    text = _around(before, f"{key}{sep}{value}", after)
    assert mask_secrets(text) == _around(before, f"{key}{sep}{MASK}", after)


@settings(max_examples=200, deadline=None)
@given(key=secret_keys, value=any_secrets, before=plain_text, after=plain_text)
def test_a_json_value_never_survives(key: str, value: str, before: str, after: str) -> None:
    """``"k": "v"``, the value as JSON writes it (escapes included)."""
    other = json.dumps({"host": "h1"})[1:-1]
    text = _around(before, "{" + f"{json.dumps(key)}: {json.dumps(value)}, {other}" + "}", after)
    want = _around(before, "{" + f"{json.dumps(key)}: {json.dumps(MASK)}, {other}" + "}", after)
    assert mask_secrets(text) == want


@settings(max_examples=200, deadline=None)
@given(key=secret_keys, value=any_secrets, before=plain_text)
def test_a_python_repr_value_never_survives(key: str, value: str, before: str) -> None:
    """``{'k': 'v', ...}`` as Python writes a mapping (either quote, escapes included)."""
    text = _around(before, repr({key: value, "host": "h1"}), "")
    quote_ = repr(value)[0]
    want = _around(before, "{" + f"{key!r}: {quote_}{MASK}{quote_}, 'host': 'h1'" + "}", "")
    assert mask_secrets(text) == want


@settings(max_examples=200, deadline=None)
@given(
    key=secret_keys,
    value=st.text(_unspaced.filter(lambda c: c not in "\"'\\"), min_size=1, max_size=24),
    quote_=st.sampled_from(['"', "'"]),
    before=plain_text,
)
def test_the_other_forms_oslo_utils_reads_never_keep_the_value(
    key: str, value: str, quote_: str, before: str
) -> None:
    """``k="v"``, ``k "v"``, ``--k v``, ``<k>v</k>``."""
    for form, want in (
        (f"{key}={quote_}{value}{quote_}", f"{key}={quote_}{MASK}{quote_}"),
        (f"{key} {quote_}{value}{quote_}", f"{key} {quote_}{MASK}{quote_}"),
        # (a value that starts with ``=`` or ``:`` reads as ``--k=v``, ``--k: v``)
        (f"--{key} x{value}", f"--{key} {MASK}"),
    ):
        assert mask_secrets(_around(before, form, "end")) == _around(before, want, "end")
    xml_value = value.replace("<", "")
    if xml_value:
        text = f"<req><{key}>{xml_value}</{key}><host>h1</host></req>"
        assert mask_secrets(text) == f"<req><{key}>{MASK}</{key}><host>h1</host></req>"


#: Any value a mapping may hold under a secret key: masked whole, whatever it is.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_secrets,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_keys, inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=200, deadline=None)
@given(key=secret_keys, value=json_values, bare=bare_secrets, depth=st.integers(0, 5))
def test_a_mapping_or_a_nested_list_never_keeps_the_value(
    key: str, value: Any, bare: str, depth: int
) -> None:
    """A mapping's value under a secret key (whatever it is), and a secret in a
    string, inside lists and mappings nested ``depth`` deep."""
    inside: Any = {key: value, "host": "h1", "note": f"{key}={bare}"}
    want: Any = {key: MASK, "host": "h1", "note": f"{key}={MASK}"}
    for level in range(depth):
        inside, want = (
            ([inside, "plain"], [want, "plain"]) if level % 2 else ({"a": inside}, {"a": want})
        )
    assert masked(inside) == want
    assert masked(tuple([inside])) == (want,)


# --- URLs -------------------------------------------------------------------------------

_hosts = st.lists(
    st.tuples(
        st.from_regex(r"[a-z][a-z0-9.-]{0,15}", fullmatch=True),
        st.integers(1, 65535),
    ),
    min_size=1,
    max_size=3,
)
#: A URL's user name (none at all, too), never one that names a secret.
_users = st.from_regex(r"[a-z0-9_.-]{0,10}", fullmatch=True).filter(lambda u: not holds_a_key(u))
#: A password as a URL holds it: anything, percent-encoded.
_passwords = any_secrets.map(lambda pw: quote(pw, safe=""))
_tails = st.sampled_from(["", "/", "/0", "//", "/cloud", "/mymaster/1", "/0?ssl_ca_certs=/ca.pem"])


@settings(max_examples=200, deadline=None)
@given(
    scheme=st.sampled_from(SCHEMES),
    hosts=_hosts,
    users=st.lists(_users, min_size=3, max_size=3),
    passwords=st.lists(_passwords, min_size=3, max_size=3),
    each_host=st.booleans(),
    tail=_tails,
    before=plain_text,
)
def test_a_url_password_never_survives_whatever_the_scheme(
    scheme: str,
    hosts: list[tuple[str, int]],
    users: list[str],
    passwords: list[str],
    each_host: bool,
    tail: str,
    before: str,
) -> None:
    """``scheme://user:password@host:port[,...]``: credentials once, or per host
    (as a multi-host ``rabbit://`` has them); in text, a mapping and a list."""

    def url(secret: list[str]) -> str:
        if each_host:
            nodes = [
                f"{u}:{pw}@{h}:{p}" for (h, p), u, pw in zip(hosts, users, secret, strict=False)
            ]
            return f"{scheme}{','.join(nodes)}{tail}"
        nodes = [f"{h}:{p}" for h, p in hosts]
        return f"{scheme}{users[0]}:{secret[0]}@{','.join(nodes)}{tail}"

    text, want = url(passwords), url([MASK] * 3)
    assert mask_secrets(_around(before, text, "now")) == _around(before, want, "now")
    assert masked({"transport_url": text, "urls": [text]}) == {
        "transport_url": want,
        "urls": [want],
    }


@settings(max_examples=200, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), hosts=_hosts, user=_users, tail=_tails)
def test_a_url_without_a_password_is_left_as_it_was(
    scheme: str, hosts: list[tuple[str, int]], user: str, tail: str
) -> None:
    nodes = ",".join(f"{h}:{p}" for h, p in hosts)
    for url in (f"{scheme}{nodes}{tail}", f"{scheme}{user}@{nodes}{tail}"):
        assert mask_secrets(url) == url


# --- what is not a secret ---------------------------------------------------------------

#: Text that names no secret key and holds no URL credentials (no ``@``).
plain_strings = st.text(max_size=40).filter(lambda t: "@" not in t and not holds_a_key(t))
plain_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | plain_strings,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(plain_keys, inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(value=plain_values)
def test_a_value_that_holds_no_secret_is_left_as_it_was(value: Any) -> None:
    assert masked(value) == value
    assert type(masked(value)) is type(value)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(
            plain_keys,
            st.sampled_from(["=", ": ", '": "']),
            bare_secrets.filter(lambda v: "@" not in v and not holds_a_key(v)),
        ),
        max_size=4,
    ),
    before=plain_text,
)
def test_pairs_of_keys_that_are_not_secret_are_left_as_they_were(
    pairs: list[tuple[str, str, str]], before: str
) -> None:
    """``host=h1 flavor: m1 "zone": "az1"``: only a secret key's value is masked."""
    text = _around(before, " ".join(f"{k}{sep}{v}" for k, sep, v in pairs), "")
    assert mask_secrets(text) == text


def test_a_secret_among_plain_pairs_takes_none_of_them_with_it() -> None:
    text = 'host=h1 admin_pass=hunter2 zone: az1 "user": "bob", "token": "t0k", "n": 1'
    assert (
        mask_secrets(text)
        == 'host=h1 admin_pass=*** zone: az1 "user": "bob", "token": "***", "n": 1'
    )
    # oslo.utils' own mask_password takes the values after a masked one too:
    assert "bob" not in strutils.mask_password("{'password': 'a', 'user': 'bob'}")
    assert mask_secrets("{'password': 'a', 'user': 'bob'}") == "{'password': '***', 'user': 'bob'}"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("the password is wrong", id="prose"),
        pytest.param("time: 12:30:05 host=h1", id="times"),
        pytest.param("token_count", id="a-key-alone"),
        pytest.param("rabbit://guest@h1:5672//", id="user-no-password"),
    ],
)
def test_text_with_no_value_to_mask_is_left_as_it_was(text: str) -> None:
    assert mask_secrets(text) == text


class _Thing:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Thing(text={self.text!r})"


def test_an_object_is_masked_as_its_repr_only_when_that_holds_a_secret() -> None:
    plain = _Thing("host=h1")
    assert masked(plain) is plain
    assert masked(_Thing("admin_pass=hunter2")) == "Thing(text='admin_pass=***')"
    assert masked(ValueError("private_key=abc")) == "ValueError('private_key=***')"


def test_a_value_nested_past_the_walk_is_masked_as_its_text() -> None:
    deep: Any = {"admin_pass": "hunter2"}
    for _ in range(40):
        deep = [deep]
    assert "hunter2" not in repr(masked(deep))


@pytest.mark.timeout(30)
def test_masking_stays_linear_on_long_adversarial_text() -> None:
    """Long runs of pairs, keys and quotes: a quadratic scan would run past the
    timeout here (minutes); a linear one takes a fraction of a second."""
    for text, want in (
        ("a=" * 50_000, "a=" * 50_000),
        ("token=" * 50_000, f"token={MASK}"),
        ("x-" * 50_000 + "token: t", "x-" * 50_000 + f"token: {MASK}"),
        ('"' * 50_000, '"' * 50_000),
        ("'password' " * 20_000, f"'password' '{MASK}' " * 10_000),
    ):
        assert mask_secrets(text) == want


# --- where it applies: errors to callers, notifications, faults -------------------------


def test_an_error_returned_to_a_caller_is_masked_on_the_wire() -> None:
    """What oslo.messaging sends back for an expected error (message, arguments,
    keyword arguments, the one-line ``tb``) holds no secret, and the caller
    rebuilds the error, typed, with the masked message."""
    from oslo_messaging._drivers import common as rpc_common
    from oslo_messaging.rpc.dispatcher import ExpectedException

    from scheduler import rpc
    from scheduler.exceptions import InvalidRequest

    @rpc.expected_exceptions(InvalidRequest)
    def method() -> None:
        raise InvalidRequest(
            reason="image property img_admin_pass='hunter2' on rediss://u:s3cr3t@h:6380/0"
        )

    with pytest.raises(ExpectedException) as wrapped:
        method()
    wire = rpc_common.serialize_remote_exception(wrapped.value.exc_info)
    assert "hunter2" not in wire and "s3cr3t" not in wire
    rebuilt = rpc_common.deserialize_remote_exception(wire, rpc.ALLOWED_EXMODS)
    assert isinstance(rebuilt, InvalidRequest)
    assert rebuilt.message == (
        f"invalid request: image property img_admin_pass='{MASK}' on rediss://u:{MASK}@h:6380/0"
    )


class _Published:
    """Stands in for oslo_messaging.Notifier: keeps what is published."""

    def __init__(self) -> None:
        self.payloads: list[tuple[str, dict[str, Any]]] = []

    def info(self, ctxt: Any, event_type: str, payload: dict[str, Any]) -> None:
        self.payloads.append((event_type, payload))

    error = info


#: A request spec whose operator- and user-controlled fields hold secrets.
def _spec_with_secrets() -> Any:
    from tests.unit.factories import spec

    return spec(
        extra_specs={"quota:cpu_shares": "1024", "admin_pass": "flavorPW"},
        image_properties={"hw_disk_bus": "virtio", "img_private_key": "imagePK"},
        scheduler_hints={"same_host": ("h1",), "secret_uuid": ("hintSECRET",)},
    )


def test_notification_payloads_are_masked_request_spec_fields_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A boot's notifications carry the request spec: a flavor extra spec, an
    image property or a scheduler hint under a secret key is masked, the others
    published as they are."""
    from scheduler import notifier as notifier_module
    from tests.fixtures.manager import USER, rig

    published = _Published()
    monkeypatch.setattr(notifier_module.oslo_messaging, "Notifier", lambda *a, **k: published)
    r = rig()
    r.endpoint.notifier = notifier_module.Notifier(object(), "h1")  # type: ignore[arg-type]
    spec = _spec_with_secrets()
    uuid = "00000000-0000-4000-8000-000000000001"
    r.endpoint.run_instance(USER, spec.to_primitive(), [uuid])
    r.endpoint.notifier.stop()
    text = json.dumps(published.payloads)
    for secret in ("flavorPW", "imagePK", "hintSECRET"):
        assert secret not in text
    # Both formats went out (the default); the legacy one names the fields as is.
    assert any("nova_object.data" in payload for _, payload in published.payloads)
    (start,) = (
        payload["request_spec"]
        for event, payload in published.payloads
        if event == "scheduler.run_instance.start" and "request_spec" in payload
    )
    assert start["flavor"]["extra_specs"] == {"quota:cpu_shares": "1024", "admin_pass": MASK}
    assert start["image"]["properties"] == {"hw_disk_bus": "virtio", "img_private_key": MASK}
    assert start["scheduler_hints"] == {"same_host": ["h1"], "secret_uuid": MASK}
    assert [name for name, _ in r.compute.calls] == ["build_and_run_instances"]  # it was placed


def test_a_fault_is_written_masked_for_a_build_and_a_move() -> None:
    from dataclasses import replace

    from conductor_stub import records
    from scheduler.objects import RESIZING
    from tests.unit.conductor_stub.helpers import building, cloud, resizing

    store = cloud("h1", "h2")
    uuid = building(store, "i1")
    assert records.fail_build(
        store, uuid, "invalid request: admin_pass=hunter2", "quoted redis://:s3cr3t@h:6379"
    )
    record = store.get_instance(uuid)
    assert (record.fault, record.fault_details) == (
        f"invalid request: admin_pass={MASK}",
        f"quoted redis://:{MASK}@h:6379",
    )
    moving, _ = resizing(store, "h1", "h2", name="i2")
    record = replace(store.get_instance(moving), state=RESIZING)
    assert records.fail_move(store, record, "bad token: 'abc'", "last failure: private_key=pk")
    record = store.get_instance(moving)
    assert (record.fault, record.fault_details) == (
        f"bad token: '{MASK}'",
        f"last failure: private_key={MASK}",
    )
