"""The stages of a run, in order: the one list of their names, which every other list reads.

A stage's `name` is how the command line (`skillsft distill`, `--force distill`), the tasks,
the manifests and the `stage` of a rejects line spell it. A stage that asks a teacher also has
`teacher`, the stage its requests carry in the teacher journal (`memory` for `memories`: it is
part of every journal key, so it never changes), and `model`, the fingerprint name of the model
it asks. The five `corpus` stages make the SFT corpus, in this order; the report lists them so.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    rejects: str = ""  # the rejects file it writes beside its output; "" when it writes none
    teacher: str = ""  # its requests' stage in the teacher journal; "" when it asks no teacher
    model: str = ""  # the fingerprint name of its teacher's model
    corpus: bool = False  # one of the stages that make the SFT corpus


STAGES: tuple[Stage, ...] = (
    # parse kept the original bare rejects name
    Stage("parse", rejects="rejects.jsonl", corpus=True),
    Stage("memories", "memories_rejects.jsonl", "memory", "memory_model", corpus=True),
    Stage("aggregate", "aggregate_rejects.jsonl", "aggregate", "aggregate_model", corpus=True),
    Stage("distill", "distill_rejects.jsonl", "distill", "distill_model", corpus=True),
    Stage("flatten", "flatten_rejects.jsonl", corpus=True),
    Stage("report"),
    Stage("publish"),
    # the pairs' thoughts are distillation requests, asked of the distill model
    Stage("preferences", "preferences_rejects.jsonl", "preferences", "distill_model"),
    Stage("skills"),
    # skillsft evolve: reflect and merge edits to a bank (aggregation's model), then the gate
    Stage("evolve", teacher="evolve", model="aggregate_model"),
    Stage("gate"),
)

STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in STAGES)
CORPUS_STAGES: tuple[str, ...] = tuple(stage.name for stage in STAGES if stage.corpus)
# Every stage that asks a teacher, and those of them that make the corpus (what `run` batches
# with a bare --batch and checks before it starts).
TEACHER_STAGES: tuple[str, ...] = tuple(stage.name for stage in STAGES if stage.teacher)
CORPUS_TEACHER_STAGES: tuple[str, ...] = tuple(
    stage.name for stage in STAGES if stage.teacher and stage.corpus)
