"""Configuration: the sample in etc/ is current, the flavor catalog is one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scheduler.flavors import BUILTIN, load_catalog

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "etc" / "scheduler" / "scheduler.conf.sample"


def test_sample_config_is_current(tmp_path: Path) -> None:
    out = tmp_path / "sample.conf"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "oslo_config.generator",
            "--config-file",
            str(ROOT / "etc" / "scheduler" / "scheduler-config-generator.conf"),
            "--output-file",
            str(out),
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    assert out.read_text() == SAMPLE.read_text(), (
        "etc/scheduler/scheduler.conf.sample is stale: run `tox -e genconfig`"
    )


def test_sample_shows_our_control_exchange() -> None:
    assert "#control_exchange = scheduler" in SAMPLE.read_text()


def test_builtin_flavors_match_etc_catalog() -> None:
    shipped = json.loads((ROOT / "etc" / "scheduler" / "flavors.json").read_text())
    assert shipped == BUILTIN


def test_operator_flavors_extend_the_catalog(tmp_path: Path) -> None:
    extra = tmp_path / "flavors.json"
    extra.write_text(json.dumps({"gpu.large": {"vcpus": 8, "memory_mb": 32768, "root_gb": 100}}))
    catalog = load_catalog(str(extra))
    assert catalog["gpu.large"].memory_mb == 32768
    assert catalog["m1.tiny"].memory_mb == 512


def test_two_configurations_in_one_process_do_not_share_option_state() -> None:
    """An override or default set on one private configuration is never read back
    by another, nor by the global one, in any group."""
    from oslo_config import cfg

    from scheduler import conf
    from tests.unit.factories import private_conf

    first = private_conf()
    first.set_override("workers", 4, group="scheduler")
    first.set_override("max_instances_per_host", 3, group="filter_scheduler")
    first.set_default("topic", "elsewhere", group="scheduler")
    second = private_conf()
    assert second.scheduler.workers == 1
    assert second.filter_scheduler.max_instances_per_host == 50
    assert second.scheduler.topic == "scheduler"
    fresh = cfg.ConfigOpts()
    conf.register_opts(fresh)
    fresh([], project="scheduler", default_config_files=[])
    assert (fresh.scheduler.workers, fresh.scheduler.topic) == (1, "scheduler")
    assert conf.CONF.scheduler.workers == 1  # the global configuration
    assert first.scheduler.workers == 4 and first.scheduler.topic == "elsewhere"


def _doc_paragraph(page: str, starts: str) -> str:
    """The paragraph of doc/source/``page`` that starts with ``starts``, on one line."""
    text = (ROOT / "doc" / "source" / page).read_text()
    at = text.index(starts)
    return " ".join(text[at : text.index("\n\n", at)].split())


def test_the_docs_list_the_default_filters_of_the_code() -> None:
    """The request reference's list of default host filters is DEFAULT_FILTERS,
    in order."""
    import re

    from scheduler.engine.settings import DEFAULT_FILTERS

    paragraph = _doc_paragraph(
        "reference/requests.rst", "Host filters then run on the candidates; the defaults"
    )
    listed = paragraph.split("NUMA filters:", 1)[1].split(".", 1)[0]
    assert tuple(re.findall(r"``(\w+)``", listed)) == DEFAULT_FILTERS


def test_the_docs_give_the_key_pattern_the_store_writes() -> None:
    """The architecture page's redis-cli pattern matches the keys of the default
    prefix."""
    import fnmatch

    from scheduler.conf import CONF
    from scheduler.store.keys import Keys

    prefix = CONF.redis.key_prefix
    paragraph = _doc_paragraph(
        "reference/architecture.rst", "State lives in Redis under one key prefix"
    )
    pattern = paragraph.split("--scan --pattern '", 1)[1].split("'", 1)[0]
    keys = Keys.for_prefix(prefix).all()
    assert all(fnmatch.fnmatchcase(k, pattern) for k in keys)
    assert not any(fnmatch.fnmatchcase(k, f"{prefix}:*") for k in keys)
