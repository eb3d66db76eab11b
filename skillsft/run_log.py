"""Where a command's details go: a log file in the work dir, the console only with --verbose.

Every command that touches a work dir writes `WORK_DIR/.skillsft/logs/<time>-<command>.log`
with Luigi's scheduling messages and the full traceback of any failure. The console gets the
progress bars, the summary and one line per failure, which is what a user can act on.
"""

import logging
import re
import sys
import time
from pathlib import Path

from skillsft.pipeline.teacher.openai.endpoints import redact_url
from skillsft.pipeline.workdir import WorkDir

_FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s: %(message)s"
# HTTP clients log every request URL at INFO; those URLs may carry credentials.
_CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "urllib3")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE)


class RedactingFilter(logging.Filter):
    """Rewrites every URL in a record to its redacted form (no user info, no key/token query
    parameters) before any handler writes it: secrets never reach the log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _URL.sub(lambda found: redact_url(found.group(0)), message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def open_log(work_dir: Path, command: str, *, verbose: bool) -> Path:
    """Send log records to a new file under the work dir (and stderr when verbose)."""
    logs = WorkDir(work_dir).logs
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{command}.log"
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(logging.Formatter(_FORMAT))
    to_file.addFilter(RedactingFilter())
    root.addHandler(to_file)
    if verbose:
        to_console = logging.StreamHandler(sys.stderr)
        to_console.setLevel(logging.WARNING)
        to_console.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        to_console.addFilter(RedactingFilter())
        root.addHandler(to_console)
    return path


def close_log() -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        handler.close()
        root.removeHandler(handler)
