"""The Lua scripts are read from the package's ``lua/`` files, every one of
them is used and registered, and Redis compiles each (against the real Redis
at ``SCHEDULER_TEST_REDIS_URL``, as the store's other tests)."""

from __future__ import annotations

import configparser
import dataclasses
import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scheduler.store import scripts

REDIS_URL = os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[3]
LUA = ROOT / "scheduler" / "store" / "lua"
SCRIPT_FILES = sorted(LUA.glob("*.lua"))
HELPER_FILES = sorted((LUA / "lib").glob("*.lua"))
FIELDS = [field.name for field in dataclasses.fields(scripts.Scripts)]


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    with redis.Redis.from_url(REDIS_URL, decode_responses=True, socket_timeout=2.0) as client:
        yield client


def test_every_script_file_is_a_registered_script_and_each_script_has_a_file() -> None:
    names = [path.stem for path in SCRIPT_FILES]
    assert sorted(FIELDS) == names
    for name in names:
        assert isinstance(getattr(scripts, name.upper()), str), name


def test_every_helper_file_is_in_some_script() -> None:
    texts = [getattr(scripts, name.upper()) for name in FIELDS]
    for path in HELPER_FILES:
        # lib/checked.lua takes the indices of its arguments: as RELEASE has them.
        source = scripts._checked(3) if path.stem == "checked" else scripts._lib(path.stem)
        assert any(source in text for text in texts), path.name


def test_no_script_keeps_its_documentation_or_a_placeholder() -> None:
    for name in FIELDS:
        text = getattr(scripts, name.upper())
        assert "@" not in text, name
        assert not text.lstrip("\n").startswith("--"), name


def test_the_package_data_names_every_lua_file() -> None:
    # A wheel or a non-editable install carries only what setup.cfg names.
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    patterns = [p.strip() for p in config["options.package_data"]["scheduler.store"].split(",")]
    package = ROOT / "scheduler" / "store"
    for path in [*SCRIPT_FILES, *HELPER_FILES]:
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


def test_redis_compiles_every_registered_script(client: redis.Redis) -> None:
    registered = scripts.Scripts.register(client)
    for name in FIELDS:
        script = getattr(registered, name)
        assert script.script == getattr(scripts, name.upper())
        assert client.script_load(script.script) == script.sha, name
