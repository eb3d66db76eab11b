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


def local_workers(args: argparse.Namespace) -> int | None:
    """How many Luigi workers will run this command's tasks when no other command can join
    them (the in-process scheduler: no `--scheduler-url`, none in the config); None when a
    central scheduler may bring workers of other commands."""
    config = luigi.configuration.get_config()
    if getattr(args, "scheduler_url", None) or _has_any(config, "core", _SCHEDULER_OPTIONS):
        return None
    workers = getattr(args, "workers", None)
    if workers is None:
        try:
            workers = int(config.get("core", "workers", 1))
        except (TypeError, ValueError):
            workers = 1
    return max(1, workers)


_KEEP_ALIVE_SET_HERE = [False]  # whether the keep_alive in the config is ours, not the user's


# How long an idle worker of a central scheduler sleeps before it asks for work again: Luigi's
# defaults (1 s plus up to 5 s at random) left the second of two workers asleep for 4.5 s after
# the distill shards became ready (bench/end_to_end.py's timeline), while the first ran them
# alone. Asking every 0.2-0.3 s costs one small scheduler call each time, only while idle.
IDLE_WAIT = {"wait_interval": "0.2", "wait_jitter": "0.1"}


def set_keep_alive(config: Any, *, central: bool) -> None:
    """With a central scheduler other processes may be running the tasks this one waits for
    (shards of a stage): keep waiting for them instead of giving up when idle, and look for
    work again soon (IDLE_WAIT, unless the config says). Only then: with the in-process
    scheduler, a worker kept alive would wait for its own failed tasks, so a later build of
    this process takes back the keep_alive an earlier one set (IDLE_WAIT stays: it only makes
    an idle worker ask sooner, and an in-process worker that is idle is done)."""
    if central:
        for option, value in IDLE_WAIT.items():
            if not _has_any(config, "worker", (option,)):
                if not config.has_section("worker"):
                    config.add_section("worker")
                config.set("worker", option, value)
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
