"""Stage options are declared once (pipeline/options.py) and everything else follows from them.

- A dummy option added to one options model, and nowhere else, is a flag of the commands whose
  tasks read that model, is in that stage's fingerprint and manifest, and changing it re-runs
  that stage and the ones after it.
- The fingerprint campaign: every shaping option of every options model of the run graph,
  changed alone (parametrised from the models, so a new option is covered without editing
  this file), re-runs exactly its stage and the stages after it, with the offline teacher.
"""

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import luigi
import orjson
import pytest

from skillsft import graph
from skillsft.cli import build_parser, main
from skillsft.command_options import COMMAND_OPTIONS
from skillsft.options_cli import flag_of
from skillsft.pipeline.options import Declared, Opt, declared
from skillsft.pipeline.stages.flatten import FlattenOptions
from skillsft.tasks.base import StageTask, walk_graph
from skillsft.tasks.options_param import OptionsParameter
from skillsft.tasks.stages import Flatten
from skillsft.tasks.targets import manifest_path_for

ENV = "alfworld"


def run(work: Path, *flags: str) -> int:
    return main(["run", ENV, "--teacher", "offline", "--work-dir", str(work), *flags])


def flags_of(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {option for action in sub._actions for option in action.option_strings}


def rewritten(work: Path, before: dict[str, int]) -> set[str]:
    """Output names whose manifest was written again since `before` was taken."""
    return {name for name, stamp in manifest_stamps(work).items() if before.get(name) != stamp}


def manifest_stamps(work: Path) -> dict[str, int]:
    """Every stage's manifest, wherever its output lives (SKILL.md is in a subfolder)."""
    return {path.name.removesuffix(".manifest.json"): path.stat().st_mtime_ns
            for path in work.rglob("*.manifest.json") if "estimate" not in path.parts}


def manifest(work: Path, name: str) -> dict[str, Any]:
    return orjson.loads(manifest_path_for(work / name).read_bytes())


# -- one place ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlattenWithDummy(FlattenOptions):
    dummy_knob: Annotated[int, Opt("a knob that exists only in this test")] = 7


def test_an_option_added_in_one_place_is_a_flag_a_fingerprint_and_a_manifest_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "--dummy-knob" not in flags_of("run")
    # The one edit: the flatten stage's options model gains a field. Here the model is swapped
    # for a subclass that has it, so the swap is made wherever the model is named: the task's
    # parameter and the command line's table of models (skillsft/command_options.py, which
    # tests/cli/test_startup.py checks against the tasks' parameters).
    param = OptionsParameter(FlattenWithDummy)
    param.__set_name__(Flatten, "flatten")  # what a class body does for its parameters
    monkeypatch.setattr(Flatten, "flatten", param)
    for command in ("run", "flatten"):
        monkeypatch.setitem(COMMAND_OPTIONS[command], "flatten", FlattenWithDummy)
    assert "--dummy-knob" in flags_of("run") and "--dummy-knob" in flags_of("flatten")
    assert "--dummy-knob" not in flags_of("distill")

    work = tmp_path / "w"
    assert run(work) == 0
    corpus = f"{ENV}_sft_data.json"
    first = manifest(work, corpus)
    assert first["params"]["dummy_knob"] == "7" and first["options"]["flatten"]["dummy_knob"] == 7

    before = manifest_stamps(work)
    assert run(work, "--dummy-knob", "9") == 0
    second = manifest(work, corpus)
    assert second["params"]["dummy_knob"] == "9" and second["options"]["flatten"]["dummy_knob"] == 9
    assert second["fingerprint"] != first["fingerprint"]
    assert rewritten(work, before) == {corpus, "report.json"}


# -- the campaign -------------------------------------------------------------------------------
def run_models() -> dict[str, type]:
    """The options models of the default run graph's tasks (publishing needs a Hub: its
    options are the publish tests' business)."""
    models = graph.options_models(*graph.RUN_TASKS)
    return {name: model for name, model in models.items() if name not in ("hub", "card")}


def shaping_options() -> list[Declared]:
    seen: dict[str, Declared] = {}
    for model in run_models().values():
        for item in declared(model):
            if item.shaping:
                seen.setdefault(item.name, item)
    return list(seen.values())


def changed_value(item: Declared) -> str:
    """A valid value other than the default, on the lenient side (keep more, allow more), so
    the changed run still has work to do."""
    kind, default = item.opt.kind, item.default
    if item.opt.choices:
        return next(c for c in item.opt.choices if c != default)
    if kind == "count_range":
        return f"{max(1, default.low - 1)}-{default.high}"
    if kind == "source_range":
        return "1-1000=nq"
    if kind == "tokenizer":
        return str(tiny_tokenizer())
    if item.type is int:
        return str(default - 1 if default > 1 else default + 1)
    if item.type is float:
        return f"{default - 0.1:.2f}" if default >= 0.2 else f"{default + 0.1:.2f}"
    if item.type is str:
        return f"{default}changed"
    raise AssertionError(f"no changed value for {item.name} ({item.type}); add a rule here")


def tiny_tokenizer() -> Path:
    """A word-level tokenizer.json (the `tokenizers` package), for `--tokenizer`."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = Path(tempfile.mkdtemp(prefix="tiny-tokenizer-"))
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["you are an agent"], tokenizers.trainers.WordLevelTrainer(
        special_tokens=["[UNK]"]))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def flag_args(item: Declared) -> list[str]:
    return [flag_of(item)] if item.type is bool else [flag_of(item), changed_value(item)]


# Options that count only in a mode other than the default: the baseline opens that mode.
GATED_BY = {"top_k_skills": ["--skills", "retrieve"], "skill_threshold": ["--skills", "retrieve"],
            "max_block_chars": ["--skills", "retrieve"],
            "embedding_model": ["--skills", "retrieve"],
            # flatten reads them only with --fit-cutoff (the report reads cutoff_len always)
            "cutoff_len": ["--fit-cutoff"], "tokenizer": ["--fit-cutoff"]}
# Needs an embeddings endpoint to run: checked on the graph's fingerprints instead.
GRAPH_ONLY = {"embedding_model"}


def expected_stages(item: Declared, baseline: list[str]) -> set[str]:
    """The outputs of the tasks whose options declare `item`, and of every task after them."""
    args = build_parser().parse_args(["run", ENV, "--teacher", "offline", "--work-dir", "w",
                                      *baseline])
    tasks = [t for t in walk_graph(graph.run_graph(graph.run_plan(args, {})))
             if isinstance(t, StageTask)]
    owners = {t.task_id for t in tasks
              if any(item.name in {d.name for d in declared(type(o)) if d.shaping}
                     for o in t.options().values())}
    dirty: set[str] = set()
    for task in tasks:  # dependencies come before dependants
        deps = luigi.task.flatten(task.requires())
        if task.task_id in owners or any(dep.task_id in dirty for dep in deps):
            dirty.add(task.task_id)
    return {t.output_file().name for t in tasks if t.task_id in dirty}


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], Path]:
    made: dict[tuple[str, ...], Path] = {}
    for flags in {tuple(GATED_BY.get(item.name, [])) for item in shaping_options()}:
        work = tmp_path_factory.mktemp("baseline") / "w"
        assert run(work, *flags) == 0
        made[flags] = work
    return made


def test_the_campaign_covers_every_stage_that_has_options() -> None:
    names = {item.name for item in shaping_options()}
    assert {"source_ranges", "all_trajectories", "batch_size", "history", "seed",
            "cutoff_len", "skills"} <= names
    assert "max_failure_rate" not in names  # a rule about the output, not its content


@pytest.mark.parametrize("item", shaping_options(), ids=lambda item: item.name)
def test_changing_one_shaping_option_reruns_its_stage_and_those_after_it(
    item: Declared, baselines: dict[tuple[str, ...], Path], tmp_path: Path
) -> None:
    baseline = GATED_BY.get(item.name, [])
    expected = expected_stages(item, baseline)
    assert expected, f"{item.name}: no stage of the run graph reads it"
    if item.name in GRAPH_ONLY:
        before = fingerprints(baseline)
        after = fingerprints([*baseline, *flag_args(item)])
        assert {name for name in after if after[name] != before.get(name)} == expected
        return
    work = tmp_path / "w"
    shutil.copytree(baselines[tuple(baseline)], work)
    stamps = manifest_stamps(work)
    assert run(work, *baseline) == 0 and rewritten(work, stamps) == set()  # the copy is current
    assert run(work, *baseline, *flag_args(item)) == 0
    assert rewritten(work, stamps) == expected, item.name


def fingerprints(flags: list[str]) -> dict[str, str]:
    args = build_parser().parse_args(["run", ENV, "--teacher", "offline", "--work-dir", "w",
                                      *flags])
    return {t.output_file().name: t.fingerprint()
            for t in walk_graph(graph.run_graph(graph.run_plan(args, {})))
            if isinstance(t, StageTask)}


def test_the_dummy_options_model_really_is_one_declaration() -> None:
    """The dummy field is all FlattenWithDummy adds: no flag table, no parameter list."""
    added = {f.name for f in dataclasses.fields(FlattenWithDummy)} - {
        f.name for f in dataclasses.fields(FlattenOptions)}
    assert added == {"dummy_knob"}


def task_ids(*flags: str) -> list[str]:
    args = build_parser().parse_args(["run", ENV, "--teacher", "offline", "--work-dir", "w",
                                      *flags])
    return [t.task_id for t in walk_graph(graph.run_graph(graph.run_plan(args, {})))]


def test_task_ids_hold_what_answers_not_how_fast_or_under_which_budget() -> None:
    """Processes sharing one luigid must name a stage alike whatever their pace knobs
    (--max-cost even draws a spend id per command), and apart when the output differs."""
    assert task_ids() == task_ids("--concurrency", "3", "--max-concurrency", "5", "--timeout",
                                  "9", "--max-cost", "1", "--retry-failed", "0", "--rpm", "7")
    assert task_ids() != task_ids("--max-output-tokens", "100")
    assert task_ids() != task_ids("--history", "3")
