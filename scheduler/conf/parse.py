"""A command's configuration: its files found, its command line parsed into the
global ``CONF`` and every value checked before anything uses one."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence

from oslo_config import cfg

from scheduler.conf.opts import CONF, set_defaults
from scheduler.conf.validation import validate


def version() -> str:
    """The installed package's version (what --version prints)."""
    try:
        return importlib.metadata.version("vm-scheduler")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


#: Where a command looks for its configuration when no --config-file is given,
#: as OpenStack services do (oslo.config's search: ~/.scheduler/, ~/,
#: /etc/scheduler/, /etc/, for scheduler.conf and <prog>.conf).
def find_config_files(prog: str) -> list[str]:
    return list(cfg.find_config_files(project="scheduler", prog=prog))


def parse_args(
    argv: Sequence[str],
    prog: str,
    description: str = "",
    default_config_files: Sequence[str] | None = None,
) -> cfg.ConfigOpts:
    """Parse the command line and config files into the global CONF, and check
    every option's value (:func:`validate`) before anything uses one.

    With ``default_config_files`` None, the files oslo.config finds for the
    project (``/etc/scheduler/scheduler.conf`` when it exists) are read unless
    ``--config-file`` names others. oslo.messaging's own options
    (``transport_url``, ``[oslo_messaging_rabbit]``) are registered when the
    transport is built; ``set_transport_defaults`` makes ``transport_url``
    known before parsing so it can be given on the CLI.

    :raises ConfigInvalid: an option whose value cannot be used.
    :raises oslo_config.cfg.Error: a file that cannot be read or parsed.
    """
    set_defaults()
    CONF(
        list(argv),
        project="scheduler",
        prog=prog,
        description=description,
        version=version(),
        default_config_files=(
            find_config_files(prog) if default_config_files is None else list(default_config_files)
        ),
    )
    validate(CONF)
    return CONF
