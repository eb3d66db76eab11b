"""The shape every stage task shares: fingerprinted output, timed run, manifest with counts.

A stage task is thin by design: `compute()` reads its inputs, calls one function of
`pipeline/` and returns a `StageOutput`; everything about where files go, how they are written
and how re-runs are decided lives here, once.
"""

import contextlib
import hashlib
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import luigi
import orjson

from skillsft.pipeline.durable import commit_staged, stage_file
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.options import declared_values, shaping_values
from skillsft.pipeline.stages.outcome import FailureRule, check_outcome, outcome_of
from skillsft.pipeline.stages.result import StageResult
from skillsft.pipeline.teacher.plan import TeacherPlan
from skillsft.schemas import Reject
from skillsft.tasks.failures import record_failure
from skillsft.tasks.options_param import OptionsParameter, TaskListParameter
from skillsft.tasks.targets import StageTarget, write_bytes_atomically
from skillsft.tasks.teacher import TeacherParameter

# Bumped when a stage's own logic changes in a way that changes its output.
CODE_VERSION = "1"


# A file's bytes, or its chunks in order when a stage streams its records out
# (pipeline/formats/record_stream.py); chunks are consumed once, when the file is written.
FileBytes = bytes | Iterable[bytes]


@dataclass
class StageOutput:
    payload: FileBytes
    counts: dict[str, int] = field(default_factory=dict)
    teacher: list[dict[str, Any]] = field(default_factory=list)
    side_files: dict[str, FileBytes] = field(default_factory=dict)  # name beside output -> bytes
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
    def of(cls, result: StageResult[Any], payload: FileBytes, *, input_name: str,
           rejects_name: str, side_files: dict[str, FileBytes] | None = None) -> "StageOutput":
        """The output of a stage function's result: its counters and teacher usage go to the
        manifest, its rejects to `rejects_name`, and `run()` judges it. The payload may stream
        the result's records; the result is read only once the files are written (`settle`)."""
        return cls(payload=payload, side_files=dict(side_files or {}),
                   rejects_name=rejects_name, result=result, input_name=input_name)

    def settle(self) -> None:
        """Take the counters, teacher usage and rejects from the stage's result: a stage that
        streams its records fills them in as the records are written."""
        if self.result is None:
            return
        self.counts = self.result.counts
        self.teacher = [stats.model_dump(mode="json") for stats in self.result.teacher]
        self.side_files[self.rejects_name] = jsonio.dumps_lines(self.result.rejects)


# Signatures of inputs from outside the graph, and the fingerprints made of them, kept only
# inside `input_signatures_frozen()`: Luigi asks every task whether it is complete many times
# per build (a run walked the rollout folder 65 times, and each `complete()` hashed the
# fingerprints of every task upstream again), and during one build neither the inputs nor a
# task's parameters change. Outside the block nothing is kept, so a long-lived process that
# builds twice sees files edited in between.
_FROZEN: dict[tuple[str, str], str] | None = None


@contextlib.contextmanager
def input_signatures_frozen() -> Iterator[None]:
    global _FROZEN
    _FROZEN = {}
    try:
        yield
    finally:
        _FROZEN = None


def _signature(kind: str, name: str, compute: Callable[[], str]) -> str:
    if _FROZEN is None:
        return compute()
    key = (kind, name)
    if key not in _FROZEN:
        _FROZEN[key] = compute()
    return _FROZEN[key]


def hash_file(path: Path) -> str:
    """sha256 of a file's bytes (user-given input files)."""
    return _signature("file", str(path), lambda: _hash_file(path))


def signature_of_tree(root: Path) -> str:
    """A cheap signature of a folder's files (relative path, size, mtime), so edited, added or
    removed rollout files make stage 1 run again without hashing gigabytes of text."""
    return _signature("tree", str(root), lambda: _signature_of_tree(root))


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


def cpu_seconds() -> float:
    """CPU time of this process and of its child processes that have ended (parse's pool of
    folder workers): a stage's CPU is all of it, so that a stage whose work ran in workers does
    not look like one that waited."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


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
    # What the inputs are, in the order skillsft/graph.py passes them, so `compute` reads one
    # by its name (`input_file("skill_bank")`). A stage reading all its inputs alike names none.
    input_names: ClassVar[tuple[str, ...]] = ()

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
        pipeline/stages/corpus_bank.py). Not part of the fingerprint, which has the hashes
        already."""
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

    def input_file(self, name: str) -> Path:
        """The file of the input `input_names` calls `name`."""
        task = self.inputs[self.input_names.index(name)]
        return Path(luigi.task.flatten(task.output())[0].path)

    def to_str_params(self, only_significant: bool = False, only_public: bool = False
                      ) -> dict[str, str]:
        """For the task id (`only_significant`), the teacher plan counts by its identity only
        (TeacherPlan.identity); everywhere else it travels whole.

        Kept on the instance: a task's parameters never change once it is made, and Luigi asks
        for them at every repr, task id and scheduler message, each time serialising the
        options objects and, through `inputs`, every upstream task's parameters again."""
        cache: dict[tuple[bool, bool], dict[str, str]] = self.__dict__.setdefault(
            "_str_params_cache", {})
        key = (only_significant, only_public)
        if key not in cache:
            params = super().to_str_params(only_significant, only_public)
            teacher = getattr(self, "teacher", None)
            if only_significant and isinstance(teacher, TeacherPlan) and "teacher" in params:
                params["teacher"] = orjson.dumps(teacher.identity(),
                                                 option=orjson.OPT_SORT_KEYS).decode()
            cache[key] = params
        return dict(cache[key])

    def __repr__(self) -> str:
        """Luigi's repr (family and significant parameters), kept like `to_str_params`: the
        scheduler, the log and the execution summary ask for it again and again."""
        if "_repr_cache" not in self.__dict__:
            self.__dict__["_repr_cache"] = super().__repr__()
        return self.__dict__["_repr_cache"]

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
        (rollout files, user files) may have changed between two builds; it is computed once
        per build (`input_signatures_frozen`), like the signatures it holds."""
        # By every parameter (the task id leaves the insignificant ones out), so two tasks
        # that differ only there never share a fingerprint.
        every_param = orjson.dumps(self.to_str_params(), option=orjson.OPT_SORT_KEYS).decode()
        return _signature("fingerprint", f"{self.get_task_family()}{every_param}",
                          self._fingerprint)

    def _fingerprint(self) -> str:
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
        started, cpu_started = time.monotonic(), cpu_seconds()
        result = self.compute()
        target = self.output()
        folder = target_dir(target)
        # Every output is staged first (a temporary file beside it, a streamed one written a
        # record at a time); the result is complete only then. The rejects file goes in place
        # before the stage is judged, so a failing stage still lists what it dropped; the
        # other files only once it has passed.
        staged: dict[Path, Path] = {}
        try:
            # The output first: a stage writing side files from the same pass over its
            # records (flatten) has them complete only once its output is written.
            output = stage_file(Path(target.path), result.payload)
            staged[Path(target.path)] = output
            for name, data in result.side_files.items():
                if name != result.rejects_name:
                    staged[folder / name] = stage_file(folder / name, data)
            result.settle()
            if result.result is not None:
                for notice in result.result.notices:
                    print(f"skillsft: {self.stage_name()}: {notice}", file=sys.stderr)
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
        except BaseException:
            # A streamed payload stopped between two records (a full disk, an interrupt) is
            # closed now, so the stage's teacher stream gives back its calls' claims and slots
            # at once rather than whenever the garbage collector gets to it.
            close = getattr(result.payload, "close", None)
            if close is not None:
                close()
            for temporary in staged.values():
                temporary.unlink(missing_ok=True)
            raise
        for path, temporary in staged.items():  # side files first, the output last
            if temporary is not output:
                commit_staged(temporary, path)
        commit_staged(output, Path(target.path))
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
                # CPU of this process meanwhile (the teacher client's threads and parse's
                # folder workers included): the rest of the wall time was spent waiting,
                # mostly on the teacher.
                "cpu_seconds": round(cpu_seconds() - cpu_started, 3),
                # The process's memory high-water mark so far: the first stage whose manifest
                # shows the run's peak is the one that reached it.
                "peak_rss_mib": round(
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
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
