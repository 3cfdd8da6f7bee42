"""How the Redis store reaches Redis, and what its errors become.

:func:`redis_client` builds a client for any store URL
:class:`~scheduler.store.redis_store.RedisStore` takes (its docstring
describes them); :func:`translated` wraps each of the store's methods so that
redis-py's errors come out as the store's typed ones. The translation from a
script's error reply to an exception lives in :func:`_script_error` and
nowhere else.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar, cast
from urllib.parse import unquote

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerConflict,
    ConsumerDeleted,
    GenerationConflict,
    GroupPolicyViolation,
    InstanceNotFound,
    InventoryInUse,
    NoSuchInventory,
    NotFound,
    ProviderExists,
    ProviderNotFound,
    RecordChanged,
    StoreError,
    StoreUnavailable,
    StreamTruncated,
    UnitRuleViolation,
)
from scheduler.log import mask_secrets

P = ParamSpec("P")
R = TypeVar("R")

SENTINEL_SCHEME = "redis+sentinel://"


#: A Redis Cluster; the second one over TLS.
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


#: A client of a single Redis (or a Sentinel's master) or of a Redis Cluster.
Client = redis.Redis | RedisCluster


# --- errors -------------------------------------------------------------------------

_ERROR_PREFIX = "SCHEDULER "


#: A script's error code -> the exception it stands for, called with its fields.
_SCRIPT_ERRORS: dict[str, Callable[..., StoreError]] = {
    "ServiceNotFound": functools.partial(NotFound, kind="service"),
    **{
        cls.__name__: cls
        for cls in (
            ProviderNotFound,
            InstanceNotFound,
            ProviderExists,
            GenerationConflict,
            InventoryInUse,
            CapacityExceeded,
            NoSuchInventory,
            UnitRuleViolation,
            ConsumerConflict,
            ConsumerDeleted,
            RecordChanged,
            GroupPolicyViolation,
            StreamTruncated,
        )
    },
}


def _script_error(message: str) -> StoreError:
    """The typed exception for an error reply (``SCHEDULER <Code> <JSON fields>``)."""
    if message.startswith(_ERROR_PREFIX):
        code, _, rest = message[len(_ERROR_PREFIX) :].partition(" ")
        build = _SCRIPT_ERRORS.get(code)
        if build is not None:
            fields, _ = json.JSONDecoder().raw_decode(rest)
            return build(**fields)
    return StoreError(message)


#: What a Redis Cluster answers while it reshards or fails over (each a
#: ``ResponseError`` or the cluster client's own exception, never a refusal).
_CLUSTER_ERRORS = (
    redis.exceptions.ClusterError,
    redis.exceptions.AskError,  # and MovedError
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)


class _LoadsScripts(Protocol):
    """What :func:`translated` wraps the methods of (:class:`.redis_base.RedisBase`)."""

    def _load_scripts(self) -> None: ...


def translated(method: Callable[P, R]) -> Callable[P, R]:
    """Raise redis-py's errors as the store's typed ones."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError) as exc:
            raise StoreUnavailable(reason=str(exc)) from exc
        except _CLUSTER_ERRORS as exc:
            # A redirect the client could not follow, a slot that moves or has
            # no master yet, a cluster that is down: all pass with time.
            raise StoreUnavailable(reason=f"{type(exc).__name__}: {exc}") from exc
        except redis.exceptions.NoScriptError as exc:
            # Only a cluster pipeline meets this (it does not load scripts
            # first): a node restarted or a replica took over without them.
            # Load them again for the caller's retry (if that fails too, the
            # retry meets this again).
            try:
                cast(_LoadsScripts, args[0])._load_scripts()
            except (redis.RedisError, redis.exceptions.RedisClusterException):
                pass
            raise StoreUnavailable(reason=f"NoScriptError: {exc}") from exc
        except redis.ResponseError as exc:
            raise _script_error(str(exc)) from None

    return wrapper


# --- connections --------------------------------------------------------------------


def redis_client(url: str, socket_timeout: float = 5.0) -> Client:
    """A client (decoding replies to str) for any store URL this module reads."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "health_check_interval": 30,
        "retry": Retry(
            ExponentialWithJitterBackoff(cap=1.0, base=0.05),
            3,
            supported_errors=(redis.ConnectionError,),
        ),
    }
    if url.startswith(CLUSTER_SCHEMES):
        return _cluster_client(url, options)
    if not url.startswith(SENTINEL_SCHEME):
        return redis.Redis.from_url(url, **options)
    userinfo, _, rest = url[len(SENTINEL_SCHEME) :].rpartition("@")
    hosts, _, path = rest.partition("/")
    service, _, db = path.strip("/").partition("/")
    if not hosts or not service:
        raise ValueError(f"a Sentinel URL needs hosts and a service name: {mask_secrets(url)!r}")
    username, _, password = (unquote(part) for part in userinfo.partition(":"))
    return Sentinel(_hosts(hosts), socket_timeout=socket_timeout).master_for(
        service, db=int(db or 0), username=username or None, password=password or None, **options
    )


def _hosts(hosts: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as (host, port) pairs (``[v6]:port`` too)."""
    found = []
    for hostport in hosts.split(","):
        host, _, port = hostport.rpartition(":")
        found.append((host.strip("[]"), int(port)))
    return found


def _cluster_client(url: str, options: dict[str, Any]) -> RedisCluster:
    """A Redis Cluster client: the listed nodes are where it discovers the cluster.

    The URL is read as the ``redis://`` (``rediss://``) URL of its first node,
    so credentials and query options mean what they mean there; the other
    nodes are more places to start from. A cluster has no databases but 0.
    """
    scheme, _, rest = url.partition("://")
    userinfo, at, rest = rest.rpartition("@")
    hosts, slash, tail = rest.partition("/")
    if not hosts or tail.split("?", 1)[0].strip("/") not in ("", "0"):
        raise ValueError(
            f"a cluster URL is host:port[,host:port...][/?options]: {mask_secrets(url)!r}"
        )
    try:
        nodes = _hosts(hosts)
    except ValueError:
        raise ValueError(f"a cluster URL needs host:port pairs: {mask_secrets(url)!r}") from None
    first = f"{scheme.split('+')[0]}://{userinfo}{at}{hosts.split(',')[0]}{slash}{tail}"
    return RedisCluster.from_url(
        first, startup_nodes=[ClusterNode(host, port) for host, port in nodes[1:]], **options
    )
