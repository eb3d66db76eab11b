"""The gate: the user's evaluator scores a bank; a candidate is kept only if it scores higher.

`--gate-command` is split like a shell line (no shell runs it) and `{bank}` in any word is
replaced by the bank's path. The evaluator's stdout and stderr go to a log file; its stdout
must hold one line that is a JSON object with a numeric `score` (the last such line counts).
Scores are kept in `evolution/gate_scores.jsonl` by the bank file's sha256 and the command,
so no bank is scored twice: the current bank of round 2 is round 1's accepted bank, already
scored. A command that cannot start is the user's flag to fix (exit 2); a timeout, a non-zero
exit or no score line is one error naming the log (exit 1), with the candidate kept on disk.
"""

import contextlib
import hashlib
import math
import os
import shlex
import signal
import subprocess
from pathlib import Path

import orjson

from skillsft.pipeline.durable import make_folder_durably, write_all
from skillsft.pipeline.errors import ConfigError, SkillsftError
from skillsft.schemas.evolve import GateScore

SCORES_FILE = "gate_scores.jsonl"


class GateError(SkillsftError):
    """The evaluator ran but gave no usable score (timeout, failure, no score line)."""


class GateCommandError(ConfigError):
    """The evaluator cannot be started: the --gate-command flag needs fixing."""


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def command_words(command: str, bank: Path) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise GateCommandError(f"--gate-command {command!r}: {exc}; quote it as a shell "
                               "line") from None
    if not words:
        raise GateCommandError("--gate-command is empty; give the evaluator's command line")
    if not any("{bank}" in word for word in words):
        raise GateCommandError(f"--gate-command {command!r} has no {{bank}}; put {{bank}} where "
                               "the evaluator takes the skill bank's path")
    return [word.replace("{bank}", str(bank)) for word in words]


def parse_score(stdout: str) -> float | None:
    """The score of the last stdout line that is a JSON object with a finite numeric score."""
    for line in reversed(stdout.splitlines()):
        try:
            data = orjson.loads(line.strip())
        except orjson.JSONDecodeError:
            continue
        score = data.get("score") if isinstance(data, dict) else None
        if isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(
                score):
            return float(score)
    return None


def run_evaluator(command: str, bank: Path, log: Path, timeout: float) -> float:
    """Run the evaluator on one bank and return its score (see module docstring)."""
    words = command_words(command, bank)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as handle:
        handle.write(f"$ {shlex.join(words)}\n".encode())
        handle.flush()
        try:
            process = subprocess.Popen(words, stdout=subprocess.PIPE, stderr=handle,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise GateCommandError(f"--gate-command cannot start {words[0]!r}: "
                                   f"{exc.strerror or exc}; fix the command") from None
        try:
            stdout, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise GateError(f"the evaluator took longer than --gate-timeout {timeout:g}s on "
                            f"{bank}; its output is in {log}") from None
        except BaseException:  # ctrl-C: the evaluator runs in its own session, stop it too
            _stop(process)
            raise
        handle.write(b"--- stdout ---\n" + stdout)
    if process.returncode != 0:
        raise GateError(f"the evaluator exited with status {process.returncode} on {bank}; its "
                        f"output is in {log}")
    score = parse_score(stdout.decode(errors="replace"))
    if score is None:
        raise GateError(f'the evaluator printed no {{"score": <number>}} line for {bank}; its '
                        f"output is in {log}")
    return score


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the evaluator and everything it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


class ScoreBook:
    """Every bank score the gate paid for, by bank sha256 and command (append-only JSONL)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lookup(self, sha: str, command: str) -> GateScore | None:
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return None
        found = None
        for line in lines:
            try:
                score = GateScore.model_validate_json(line)
            except ValueError:
                continue  # a line torn by a crash: that bank is scored again
            if score.bank_sha256 == sha and score.command == command:
                found = score
        return found

    def add(self, score: GateScore) -> None:
        make_folder_durably(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            write_all(fd, score.model_dump_json().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)

    def score(self, bank: Path, command: str, log: Path, timeout: float) -> tuple[GateScore, bool]:
        """(the bank's score, whether it was already known)."""
        sha = sha256_of(bank)
        known = self.lookup(sha, command)
        if known is not None:
            return known, True
        value = run_evaluator(command, bank, log, timeout)
        score = GateScore(bank_sha256=sha, command=command, score=value, log=str(log))
        self.add(score)
        return score, False
