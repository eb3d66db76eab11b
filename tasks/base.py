"""The shape every stage task shares: fingerprinted output, timed run, manifest with counts.

A stage task is thin by design: `compute()` reads its inputs, calls one function of
`pipeline/` and returns a `StageOutput`; everything about where files go, how they are written
and how re-runs are decided lives here, once.
"""

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import luigi
import orjson

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.options import declared_values, shaping_values
from skillsft.pipeline.stages.outcome import FailureRule, check_outcome, outcome_of
from skillsft.pipeline.stages.result import StageResult
from skillsft.schemas import Reject
from skillsft.tasks.failures import record_failure
from skillsft.tasks.options_param import OptionsParameter, TaskListParameter
from skillsft.tasks.targets import StageTarget, write_bytes_atomically
from skillsft.tasks.teacher import TeacherParameter, TeacherPlan

# Bumped when a stage's own logic changes in a way that changes its output.
CODE_VERSION = "1"


@dataclass
class StageOutput:
    payload: bytes
    counts: dict[str, int] = field(default_factory=dict)
    teacher: list[dict[str, Any]] = field(default_factory=list)
    side_files: dict[str, bytes] = field(default_factory=dict)  # name beside output -> bytes
    rejects_name: str = ""
    # The stage function's result, judged by the failure rule (stages/outcome.py) from its
    # fixed counters after the side files (its rejects file among them, named `rejects_name`)
    # are written, so a failing stage still lists what it dropped. `input_name` is what the
    # stage read, as the user knows it, for the failure message.
    result: StageResult[Any] | None = None
    input_name: str = ""
    # A failure the stage met midway (e.g. a failed aggregation call): raised once the side
    # files, which list it, are on disk.
    failure: Exception | None = None

    @classmethod
    def of(cls, result: StageResult[Any], payload: bytes, *, input_name: str,
           rejects_name: str, side_files: dict[str, bytes] | None = None) -> "StageOutput":
        """The output of a stage function's result: its counters and teacher usage go to the
        manifest, its rejects to `rejects_name`, and `run()` judges it."""
        return cls(
            payload=payload,
            counts=result.counts,
            teacher=[stats.model_dump(mode="json") for stats in result.teacher],
            side_files={**(side_files or {}), rejects_name: jsonio.dumps_lines(result.rejects)},
            rejects_name=rejects_name,
            result=result,
            input_name=input_name,
        )


# Signatures of inputs from outside the graph, kept only inside `input_signatures_frozen()`:
# Luigi asks every task for its fingerprint many times per build (a run walked the rollout
# folder 65 times), and during one build the inputs do not change. Outside the block nothing is
# kept, so a long-lived process that builds twice sees files edited in between.
_FROZEN: dict[tuple[str, str], str] | None = None


@contextlib.contextmanager
def input_signatures_frozen() -> Iterator[None]:
    global _FROZEN
    _FROZEN = {}
    try:
        yield
    finally:
        _FROZEN = None


def _signature(kind: str, path: Path, compute: Callable[[Path], str]) -> str:
    if _FROZEN is None:
        return compute(path)
    key = (kind, str(path))
    if key not in _FROZEN:
        _FROZEN[key] = compute(path)
    return _FROZEN[key]


def hash_file(path: Path) -> str:
    """sha256 of a file's bytes (user-given input files)."""
    return _signature("file", path, _hash_file)


def signature_of_tree(root: Path) -> str:
    """A cheap signature of a folder's files (relative path, size, mtime), so edited, added or
    removed rollout files make stage 1 run again without hashing gigabytes of text."""
    return _signature("tree", root, _signature_of_tree)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _signature_of_tree(root: Path) -> str:
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath, name)
            try:
                stat = path.stat()
            except OSError:
                continue
            digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


# Rejects lines for items a stage chose not to use (selection): listed, but not failures.
SKIP_PREFIX = "skipped_"


def rejects_lines(rejects: list[Reject]) -> bytes:
    return jsonio.dumps_lines(rejects)


class EnvParameter(luigi.Parameter):
    """An environment name, checked against the registry (pipeline/envs) when a task is built,
    not when this module is imported: an environment registered later is accepted, and a wrong
    name fails with the list of valid ones."""

    def normalize(self, x: Any) -> str:
        return get_env(str(x)).name


class InputFile(luigi.ExternalTask):
    """A file made outside the graph (a user's memories, skill bank, trajectories); it counts in
    the fingerprint of the task reading it by content, under `role` (else its name)."""

    path = luigi.Parameter()
    role = luigi.Parameter(default="", significant=False)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.path)


class StageTask(luigi.Task):
    """Base of every stage: subclasses set `output_name` and implement `compute()`.

    A stage carries only what it reads: its inputs (upstream task instances or `InputFile`s,
    composed by skillsft/graph.py) and its own options objects (`OptionsParameter`s). Its
    fingerprint holds the shaping fields of those objects; the rest reaches it through the
    upstream fingerprints, so a distill-only knob never invalidates stage 2."""

    output_name: ClassVar[str]
    env = EnvParameter()
    work_dir = luigi.Parameter()
    output_path = luigi.Parameter(default="", significant=False)
    inputs = TaskListParameter(default=())

    # -- what a subclass provides -------------------------------------------------------------
    def compute(self) -> StageOutput:
        raise NotImplementedError

    def version_tags(self) -> dict[str, str]:
        """Code and prompt versions this stage's output depends on (prompt changes go here)."""
        return {}

    def external_signatures(self) -> dict[str, str]:
        """Content signatures of inputs from outside the graph (files, folders)."""
        files = [dep for dep in luigi.task.flatten(list(self.inputs))
                 if isinstance(dep, InputFile)]
        return {dep.role or f"{Path(dep.path).name}#{i}": hash_file(Path(dep.path))
                for i, dep in enumerate(files)}

    def input_file_records(self) -> dict[str, dict[str, str]]:
        """The outside files this output was made from, by role: where they were and their
        sha256 (for the manifest: publish uploads the very skill bank a corpus was made with,
        pipeline/corpus_bank.py). Not part of the fingerprint, which has the hashes already."""
        files = [dep for dep in luigi.task.flatten(list(self.inputs))
                 if isinstance(dep, InputFile)]
        return {dep.role or Path(dep.path).name: {"path": str(Path(dep.path).resolve()),
                                                  "sha256": hash_file(Path(dep.path))}
                for dep in files}

    # -- fingerprint --------------------------------------------------------------------------
    def requires(self) -> Any:
        return list(self.inputs)

    def input_files(self) -> list[Path]:
        return [Path(target.path) for target in luigi.task.flatten(self.input())]

    def to_str_params(self, only_significant: bool = False, only_public: bool = False
                      ) -> dict[str, str]:
        """For the task id (`only_significant`), the teacher plan counts by its identity only
        (TeacherPlan.identity); everywhere else it travels whole."""
        params = super().to_str_params(only_significant, only_public)
        teacher = getattr(self, "teacher", None)
        if only_significant and isinstance(teacher, TeacherPlan) and "teacher" in params:
            params["teacher"] = orjson.dumps(teacher.identity(),
                                             option=orjson.OPT_SORT_KEYS).decode()
        return params

    def options(self) -> dict[str, Any]:
        """This task's options objects, by parameter name."""
        return {name: getattr(self, name) for name, param in self.get_params()
                if isinstance(param, OptionsParameter) and not isinstance(param, TeacherParameter)}

    def fingerprinted_params(self) -> dict[str, Any]:
        """The shaping fields of this task's teacher and options, by option name."""
        params: dict[str, Any] = {"env": self.env}
        teacher = getattr(self, "teacher", None)
        if isinstance(teacher, TeacherPlan):
            params.update(teacher.shaping(self.stage_name()))
        for options in self.options().values():
            params.update(shaping_values(options))
        return dict(sorted(params.items()))

    def upstream_tasks(self) -> list["StageTask"]:
        deps = luigi.task.flatten(self.requires())
        return [dep for dep in deps if isinstance(dep, StageTask)]

    def fingerprint(self) -> str:
        """Hash of what shapes this output. Not cached on the instance: Luigi reuses task
        instances with equal parameters within a process, and the inputs outside the graph
        (rollout files, user files) may have changed between two builds; their signatures are
        kept only for the length of one build (`input_signatures_frozen`)."""
        body = {
            "task": self.get_task_family(),
            "code": CODE_VERSION,
            "versions": self.version_tags(),
            "params": self.fingerprinted_params(),
            "external": self.external_signatures(),
            "upstream": [dep.fingerprint() for dep in self.upstream_tasks()],
        }
        return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()

    # -- output -------------------------------------------------------------------------------
    def output_file(self) -> Path:
        if self.output_path:
            return Path(self.output_path)
        return Path(self.work_dir) / self.output_name

    def output(self) -> StageTarget:
        return StageTarget(self.output_file(), self.fingerprint())

    def run(self) -> None:
        started = time.monotonic()
        result = self.compute()
        if result.result is not None:
            for notice in result.result.notices:
                print(f"skillsft: {self.stage_name()}: {notice}", file=sys.stderr)
        target = self.output()
        folder = target_dir(target)
        # The rejects file first, so a stage that fails below has listed what it dropped; the
        # other side files (a corpus .jsonl, provenance) only once the stage has passed.
        if result.rejects_name in result.side_files:
            write_bytes_atomically(folder / result.rejects_name,
                                   result.side_files[result.rejects_name])
        if result.failure is not None:
            raise result.failure
        if result.result is not None:
            # The one place the failure rule is applied.
            rule = getattr(self, "failure", FailureRule())
            outcome = outcome_of(result.result, self.stage_name(), result.input_name)
            check_outcome(outcome, rule.max_failure_rate, str(folder / result.rejects_name))
        for name, data in result.side_files.items():
            if name != result.rejects_name:
                write_bytes_atomically(folder / name, data)
        target.write(result.payload)
        target.write_manifest(
            {
                "task": self.get_task_family(),
                "stage": self.stage_name(),
                "params": self.fingerprinted_params(),
                "options": {name: declared_values(value) for name, value in self.options().items()},
                "versions": self.version_tags(),
                "counts": result.counts,
                "teacher": result.teacher,
                "wall_seconds": round(time.monotonic() - started, 3),
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **({"inputs": inputs} if (inputs := self.input_file_records()) else {}),
            }
        )

    def on_failure(self, exception: BaseException) -> str:
        """Keep the cause for the command line (Luigi logs only the returned traceback)."""
        return record_failure(self.output_file(), self.stage_name(), exception)

    @classmethod
    def stage_name(cls) -> str:
        return getattr(cls, "stage", cls.get_task_family())


def target_dir(target: StageTarget) -> Path:
    return Path(target.path).parent


def walk_graph(root: luigi.Task) -> Iterable[luigi.Task]:
    """Every task reachable from root, each once, dependencies before dependants."""
    seen: set[str] = set()
    order: list[luigi.Task] = []

    def visit(task: luigi.Task) -> None:
        if task.task_id in seen:
            return
        seen.add(task.task_id)
        for dep in luigi.task.flatten(task.requires()):
            visit(dep)
        order.append(task)

    visit(root)
    return order
