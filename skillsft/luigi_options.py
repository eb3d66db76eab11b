"""The options `skillsft` hands to `luigi.build`: flags first, then the user's Luigi config.

Luigi reads its configuration from `/etc/luigi/luigi.cfg`, `luigi.cfg` in the current folder
and `LUIGI_CONFIG_PATH`. A scheduler URL, worker count or logging set up there applies to
skillsft runs as it would to a `luigi` call; a flag given on the command line wins. Without a
scheduler anywhere, the run uses Luigi's in-process local scheduler.
"""

import argparse
from typing import Any

import luigi.configuration

_SCHEDULER_OPTIONS = ("default-scheduler-url", "default_scheduler_url",
                      "default-scheduler-host", "default_scheduler_host")
_LOGGING_OPTIONS = ("logging_conf_file", "logging-conf-file")


def luigi_build_options(args: argparse.Namespace) -> dict[str, Any]:
    config = luigi.configuration.get_config()
    options: dict[str, Any] = {}
    if getattr(args, "workers", None) is not None:
        options["workers"] = args.workers
    if getattr(args, "scheduler_url", None):
        options["scheduler_url"] = args.scheduler_url
    elif not _has_any(config, "core", _SCHEDULER_OPTIONS):
        options["local_scheduler"] = True
    set_keep_alive(config, central=not options.get("local_scheduler"))
    if not config_sets_up_logging(config):
        # Luigi's own console handler would print every worker traceback; skillsft prints
        # one line per failure and keeps the rest in its log file. Luigi reads this switch
        # from its configuration only, so it is set there, for this process.
        if not config.has_section("core"):
            config.add_section("core")
        config.set("core", "no_configure_logging", "true")
    return options


_KEEP_ALIVE_SET_HERE = [False]  # whether the keep_alive in the config is ours, not the user's


def set_keep_alive(config: Any, *, central: bool) -> None:
    """With a central scheduler other processes may be running the tasks this one waits for
    (shards of a stage): keep waiting for them instead of giving up when idle. Only then: with
    the in-process scheduler, a worker kept alive would wait for its own failed tasks, so a
    later build of this process takes back what an earlier one set."""
    if central and not _has_any(config, "worker", ("keep_alive",)):
        if not config.has_section("worker"):
            config.add_section("worker")
        config.set("worker", "keep_alive", "true")
        _KEEP_ALIVE_SET_HERE[0] = True
    elif not central and _KEEP_ALIVE_SET_HERE[0]:
        config.remove_option("worker", "keep_alive")
        _KEEP_ALIVE_SET_HERE[0] = False


def config_sets_up_logging(config: Any) -> bool:
    has_section = getattr(config, "has_section", None)
    return _has_any(config, "core", _LOGGING_OPTIONS) or bool(has_section and
                                                              has_section("logging"))


def _has_any(config: Any, section: str, options: tuple[str, ...]) -> bool:
    for option in options:
        try:
            if config.get(section, option, None):
                return True
        except Exception:  # noqa: BLE001 - a config parser of another kind: treat as unset
            continue
    return False
