"""Every Lua script of the Redis store, one module constant each.

The Lua source lives beside this module, one file per script in ``lua/``
and one per shared helper function in ``lua/lib/`` (package data: see
``[options.package_data]`` in setup.cfg); this module is the one place that
reads, composes and names them. A script is its helpers' source followed by
its own, in the order given below; each file's opening ``--`` comment (what
the script takes and returns) stays in the file and is not sent to Redis.
``@{name}`` in a file is filled in here (:data:`DELETING_MARKER`,
:data:`INDEX_COMPLETE`, and the argument indices of :func:`_checked`), so a
value the Python side also uses has one home. It is all read once, at
import: each call is still one EVALSHA of a script registered once.

Each write that must be atomic is one script, so it runs whole with nothing
interleaved. Scripts make every check before their first write: a refusal
returns an error reply and leaves nothing behind (Redis does not roll a
script back). Every script that changes providers, usages, aggregates or
service state appends to the change stream in the same script.

Conventions, relied on by :mod:`scheduler.store.redis_store`:

* A writing script gets the change stream as ``KEYS[1]`` and the stream's
  approximate maximum length as ``ARGV[1]``.
* A refusal is an error reply ``SCHEDULER <Code> <JSON fields>``, where
  ``<Code>`` names the exception class and the fields are its arguments
  (``ServiceNotFound`` is the one code without a class of its own).
* Redis's cjson writes numbers with 14 significant digits (and an empty list
  as ``{}``): exact for the integers it rewrites here (generations, usages,
  counts), not for floats. So a provider's inventories, which carry
  allocation ratios, are kept as JSON text inside the provider's JSON and
  never re-encoded; and the instance script, whose records carry timestamps,
  writes numbers with 17 digits itself.

Change kinds written to the stream: ``provider`` (the whole provider JSON),
``usage`` (``uuid``, ``generation``, ``usages``, ``consumers``), ``aggregate``
and ``service`` (with the host's last heartbeat in field ``hb``).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

from scheduler.objects import BUILDING
from scheduler.store.base import BUILT, NO_RECORD, NOT_BUILDING, STALE
from scheduler.store.records import PREEMPTOR_STATES, VICTIM_STATES

#: The marker a ``deleted:<uuid>`` key holds while the instance is DELETING.
DELETING_MARKER = "deleting"

#: The ``deadlines`` index's member that says every record written before the
#: index existed has been indexed (scored ``+inf``: never due).
INDEX_COMPLETE = "*indexed*"

_LUA = resources.files(__package__).joinpath("lua")


class _Source(string.Template):
    """A Lua file's text with ``@{name}`` placeholders (Lua itself never uses ``@``)."""

    delimiter = "@"


def _lua(path: str, **values: object) -> str:
    """The source of ``lua/<path>``: its opening comment dropped, placeholders
    filled in (an unknown or missing one raises, at import)."""
    lines = _LUA.joinpath(path).read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    text = "".join(lines)
    return _Source(text).substitute(
        deleting_marker=DELETING_MARKER, index_complete=INDEX_COMPLETE, **values
    )


def _lib(name: str) -> str:
    """A helper function's source (``lua/lib/<name>.lua``)."""
    return _lua(f"lib/{name}.lua")


def _script(name: str, *helpers: str, **values: object) -> str:
    """A script: the helpers it uses, then its own source (``lua/<name>.lua``,
    with ``values`` for its own placeholders)."""
    return "".join(helpers) + _lua(f"{name}.lua", **values)


# --- shared Lua helpers (prepended to the scripts that use them) --------------------

_FAIL = _lib("fail")
_FEED = _lib("feed")
_SORTED_KEYS = _lib("sorted_keys")
_SAVE_USAGE = _lib("save_usage")
_SAVE_SERVICE = _lib("save_service")
_SAVE_CONSUMER = _lib("save_consumer")
_STREAM_INFO = _lib("stream_info")
_LEAVE_GROUP = _lib("leave_group")
_FIND_RECORD = _lib("find_record")
_FIELDS_DIFFER = _lib("fields_differ")
_CHECK_RECORD = _lib("check_record")
_ENCODE_RECORD = _lib("encode_record")
_INDEX_DEADLINE = _lib("index_deadline")
_RELEASE_CONSUMER = _SORTED_KEYS + _SAVE_USAGE + _LEAVE_GROUP + _lib("release_consumer")


def _checked(first: int) -> str:
    """The optional record check of an allocation write whose check's uuid,
    states and expected fields are ARGV[first..first+2] (see lib/checked.lua)."""
    return (
        _FIND_RECORD
        + _FIELDS_DIFFER
        + _CHECK_RECORD
        + _lua("lib/checked.lua", first=first, states=first + 1, expect=first + 2)
    )


# --- allocations --------------------------------------------------------------------

CLAIM = _script(
    "claim",
    _FAIL,
    _FEED,
    _SORTED_KEYS,
    _SAVE_USAGE,
    _SAVE_CONSUMER,
    _LEAVE_GROUP,
    _ENCODE_RECORD,
    _INDEX_DEADLINE,
    victim_state=VICTIM_STATES[0],
    preemptor_state=PREEMPTOR_STATES[0],
)
RELEASE = _script("release", _FAIL, _FEED, _RELEASE_CONSUMER, _checked(3))
MOVE_ALLOCATIONS = _script(
    "move_allocations", _FAIL, _FEED, _SORTED_KEYS, _SAVE_USAGE, _LEAVE_GROUP, _checked(5)
)
HEAL_ALLOCATION = _script(
    "heal_allocation", _FAIL, _FEED, _SORTED_KEYS, _SAVE_USAGE, _SAVE_CONSUMER
)

# --- providers and aggregates -------------------------------------------------------

CREATE_PROVIDER = _script("create_provider", _FAIL, _FEED)
UPDATE_PROVIDER = _script("update_provider", _FAIL, _FEED, _SORTED_KEYS)
PUT_AGGREGATE = _script("put_aggregate", _FEED)

# --- services -----------------------------------------------------------------------

REGISTER_SERVICES = _script("register_services", _FEED, _SAVE_SERVICE)
SET_SERVICE_DISABLED = _script("set_service_disabled", _FAIL, _FEED, _SAVE_SERVICE)
RECORD_BUILD_RESULT = _script("record_build_result", _FAIL, _FEED, _SAVE_SERVICE)
REPORT_SERVICES = _script("report_services", _FAIL, _FEED, _SAVE_SERVICE)
MARK_DOWN = _script("mark_down", _FEED, _SAVE_SERVICE)

# --- change feed --------------------------------------------------------------------

SNAPSHOT = _script("snapshot", _STREAM_INFO)
CHANGES = _script("changes", _FAIL, _STREAM_INFO)

# --- reads and instance records -----------------------------------------------------

PROVIDER_BY_NAME = _script("provider_by_name")
CREATE_INSTANCE = _script("create_instance")
UPDATE_INSTANCE = _script(
    "update_instance", _FAIL, _FIND_RECORD, _FIELDS_DIFFER, _ENCODE_RECORD, _INDEX_DEADLINE
)
START_DELETE = _script("start_delete", _FAIL, _FIND_RECORD, _ENCODE_RECORD, _INDEX_DEADLINE)
FINISH_DELETE = _script(
    "finish_delete",
    _FAIL,
    _FIND_RECORD,
    _FEED,
    _RELEASE_CONSUMER,
    _ENCODE_RECORD,
    _INDEX_DEADLINE,
)
DUE_INSTANCES = _script("due_instances")
STEP_READS = _script("step_reads")
MARK_BUILT = _script(
    "mark_built",
    _FAIL,
    _FIND_RECORD,
    _ENCODE_RECORD,
    _INDEX_DEADLINE,
    building=BUILDING,
    built=BUILT,
    stale=STALE,
    no_record=NO_RECORD,
    not_building=NOT_BUILDING,
)
INDEX_DEADLINES = _script("index_deadlines", _INDEX_DEADLINE)
ADD_PENDING = _script("add_pending")
REMOVE_PENDING = _script("remove_pending")


@dataclass(frozen=True)
class Scripts:
    """The scripts registered with one client (each call is one EVALSHA)."""

    claim: Script
    release: Script
    create_provider: Script
    update_provider: Script
    put_aggregate: Script
    register_services: Script
    set_service_disabled: Script
    record_build_result: Script
    report_services: Script
    snapshot: Script
    changes: Script
    provider_by_name: Script
    create_instance: Script
    update_instance: Script
    move_allocations: Script
    due_instances: Script
    index_deadlines: Script
    add_pending: Script
    remove_pending: Script
    start_delete: Script
    finish_delete: Script
    heal_allocation: Script
    mark_down: Script
    step_reads: Script
    mark_built: Script

    @classmethod
    def register(cls, client: redis.Redis | redis.RedisCluster) -> Scripts:
        return cls(
            claim=client.register_script(CLAIM),
            release=client.register_script(RELEASE),
            create_provider=client.register_script(CREATE_PROVIDER),
            update_provider=client.register_script(UPDATE_PROVIDER),
            put_aggregate=client.register_script(PUT_AGGREGATE),
            register_services=client.register_script(REGISTER_SERVICES),
            set_service_disabled=client.register_script(SET_SERVICE_DISABLED),
            record_build_result=client.register_script(RECORD_BUILD_RESULT),
            report_services=client.register_script(REPORT_SERVICES),
            snapshot=client.register_script(SNAPSHOT),
            changes=client.register_script(CHANGES),
            provider_by_name=client.register_script(PROVIDER_BY_NAME),
            create_instance=client.register_script(CREATE_INSTANCE),
            update_instance=client.register_script(UPDATE_INSTANCE),
            move_allocations=client.register_script(MOVE_ALLOCATIONS),
            due_instances=client.register_script(DUE_INSTANCES),
            index_deadlines=client.register_script(INDEX_DEADLINES),
            add_pending=client.register_script(ADD_PENDING),
            remove_pending=client.register_script(REMOVE_PENDING),
            start_delete=client.register_script(START_DELETE),
            finish_delete=client.register_script(FINISH_DELETE),
            heal_allocation=client.register_script(HEAL_ALLOCATION),
            mark_down=client.register_script(MARK_DOWN),
            step_reads=client.register_script(STEP_READS),
            mark_built=client.register_script(MARK_BUILT),
        )
