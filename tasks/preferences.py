"""Luigi tasks beyond the SFT corpus: preference pairs and the skill document (issue 14).

`PreferencePairs` (`<env>_preference_pairs.jsonl`) reads every episode of the rollout folder
(mixed envs included, whatever `--include-mixed` says for SFT) and the skill bank; its
fingerprint covers the rollout folder, the bank, the rendering knobs, the teacher and the prompt
versions, so changing any of them recomputes it and nothing else does. `SkillDocument` writes
`skills/<env>-skills/SKILL.md` beside the corpus from the same bank.
"""

from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.tasks.base import StageOutput, StageTask, hash_file, signature_of_tree
from skillsft.tasks.params import (
    RENDERING,
    AggregateParams,
    DistillParams,
    MemoryParams,
    SelectionParams,
    TeacherParams,
)
from skillsft.tasks.teacher import build_teacher


class FromSkillBank(SelectionParams, TeacherParams, MemoryParams, AggregateParams, DistillParams,
                    StageTask):
    """A stage reading the skill bank: the user's file (`skill_bank`) or stage 2's output."""

    skill_bank = luigi.Parameter(default="")

    def requires(self) -> list[luigi.Task]:
        from skillsft.tasks.stages import AggregateSkillBank, InputFile

        if self.skill_bank:
            return [InputFile(path=self.skill_bank)]
        return [self.clone(AggregateSkillBank)]

    def bank_file(self) -> Path:
        return Path(luigi.task.flatten(self.input())[0].path)

    def external_signatures(self) -> dict[str, str]:
        return {"skill_bank": hash_file(Path(self.skill_bank))} if self.skill_bank else {}


class PreferencePairs(FromSkillBank):
    stage = "preferences"
    shaping_params = ("teacher", "base_url", "base_url_digest", "distill_model",
                      "max_output_tokens", *RENDERING)
    # `skillsft preferences` fails on an empty result; `run --preferences` writes the empty
    # file (the SFT corpus is the run's product) and the report shows why it is empty.
    require_pairs = luigi.BoolParameter(default=False, significant=False)

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return f"{self.env}_preference_pairs.jsonl"

    def fingerprinted_params(self) -> dict[str, Any]:
        return dict(sorted({**super().fingerprinted_params(), **self.selection_params()}.items()))

    def external_signatures(self) -> dict[str, str]:
        return {**super().external_signatures(),
                "rollout_dir": signature_of_tree(Path(self.rollout_dir))}

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.distill import PROMPT_VERSION as DISTILL_VERSION
        from skillsft.pipeline.stages.preferences import PROMPT_VERSION

        return {"prompt/distill": DISTILL_VERSION, "prompt/preferences": PROMPT_VERSION}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.episodes import collect_episodes
        from skillsft.pipeline.formats.conversations import RenderOptions
        from skillsft.pipeline.formats.skill_bank_io import load_skill_bank
        from skillsft.pipeline.stages.preferences import PreferenceOptions, build_preference_pairs

        spec = get_env(self.env)
        episodes = collect_episodes(spec, self.rollout_dir)
        bank = load_skill_bank(self.bank_file(), spec)
        teacher = build_teacher(self, "preferences", self.distill_model)
        options = PreferenceOptions(
            render=RenderOptions(history=self.history, seed=self.seed,
                                 search_information=self.keep_information),
            input_name=str(self.rollout_dir),
            skills=self.skill_selection(),
            scorer=self.scorer(),
        )
        result = build_preference_pairs(episodes.groups, spec, options, teacher, bank)
        if self.require_pairs and not result.records:
            raise InputError(
                f"no preference pair from {self.rollout_dir}: pairs need an env with a won and "
                f"a lost episode that act differently in the same state "
                f"({result.counts.get('groups_both_outcomes', 0)} of "
                f"{episodes.counts['groups']} envs have both outcomes)"
            )
        # Episodes the rollout folder could not give are listed, but are not candidate pairs.
        result.rejects[:0] = episodes.rejects
        result.counts = dict(sorted({**episodes.counts, **result.counts}.items()))
        return StageOutput.of(result, jsonio.dumps_lines(result.records),
                              input_name=str(self.rollout_dir),
                              rejects_name="preferences_rejects.jsonl")


class SkillDocument(FromSkillBank):
    stage = "skills"
    shaping_params = ()

    @property
    def output_name(self) -> str:  # type: ignore[override]
        from skillsft.pipeline.stages.skill_document import document_path

        return str(document_path("skills", get_env(self.env)))

    def compute(self) -> StageOutput:
        from skillsft.pipeline.formats.skill_bank_io import load_skill_bank
        from skillsft.pipeline.stages.skill_document import render_skill_document

        spec = get_env(self.env)
        bank = load_skill_bank(self.bank_file(), spec)
        return StageOutput(payload=render_skill_document(bank, spec).encode(),
                           counts={"general_skills": len(bank.general_skills),
                                   "category_skills": sum(map(len,
                                                              bank.category_skills().values())),
                                   "common_mistakes": len(bank.common_mistakes)})
