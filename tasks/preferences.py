"""Luigi tasks beyond the SFT corpus: preference pairs and the skill document (issue 14).

`PreferencePairs` (`<env>_preference_pairs.jsonl`) reads every episode of the rollout folder
(mixed envs included, whatever `--include-mixed` says for SFT) and the skill bank; its
fingerprint covers the rollout folder, the bank, the rendering knobs, the teacher and the prompt
versions, so changing any of them recomputes it and nothing else does. `SkillDocument` writes
`skills/<env>-skills/SKILL.md` beside the corpus from the same bank.
"""

from pathlib import Path

import luigi

from skillsft.pipeline import workdir
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.distill import DistillOptions
from skillsft.pipeline.stages.outcome import FailureRule
from skillsft.pipeline.stages.skill_selection import scorer_for
from skillsft.pipeline.teacher.plan import build_teacher, embedding_client
from skillsft.tasks.base import StageOutput, StageTask, signature_of_tree
from skillsft.tasks.options_param import OptionsParameter
from skillsft.tasks.teacher import TeacherParameter


class FromSkillBank(StageTask):
    """A stage reading the skill bank: its one input (the user's file or stage 2's output)."""

    input_names = ("skill_bank",)


class PreferencePairs(FromSkillBank):
    stage = "preferences"
    # Every episode of the folder, mixed envs included: its own input, beside the bank.
    rollout_dir = luigi.Parameter(default="")
    teacher = TeacherParameter()
    distill = OptionsParameter(DistillOptions)  # the same rendering and skills as stage 3
    failure = OptionsParameter(FailureRule)
    # `skillsft preferences` fails on an empty result; `run --preferences` writes the empty
    # file (the SFT corpus is the run's product) and the report shows why it is empty.
    require_pairs = luigi.BoolParameter(default=False, significant=False)

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return workdir.preference_pairs(self.env)

    def external_signatures(self) -> dict[str, str]:
        return {**super().external_signatures(),
                "rollout_dir": signature_of_tree(Path(self.rollout_dir))}

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.distill import PROMPT_VERSION as DISTILL_VERSION
        from skillsft.pipeline.stages.preferences import PROMPT_VERSION

        return {"prompt/distill": DISTILL_VERSION, "prompt/preferences": PROMPT_VERSION}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.preferences import (
            PreferenceOptions,
            folder_preference_pairs,
            read_episodes,
        )
        from skillsft.pipeline.stages.skill_bank_io import load_skill_bank

        spec = get_env(self.env)
        episodes = read_episodes(spec, self.rollout_dir)
        bank = load_skill_bank(self.input_file("skill_bank"), spec)
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        options = PreferenceOptions(
            render=self.distill.render,
            input_name=str(self.rollout_dir),
            skills=self.distill.skills,
            scorer=scorer_for(embedding_client(self.distill.skills, self.teacher,
                                                Path(self.work_dir))),
        )
        result = folder_preference_pairs(episodes, spec, options, teacher, bank)
        if self.require_pairs and not result.records:
            raise InputError(
                f"no preference pair from {self.rollout_dir}: pairs need an env with a won and "
                f"a lost episode that act differently in the same state "
                f"({result.counts.get('groups_both_outcomes', 0)} of "
                f"{result.counts['groups']} envs have both outcomes)"
            )
        return StageOutput.of(result, jsonio.dumps_lines(result.records),
                              input_name=str(self.rollout_dir),
                              rejects_name=workdir.REJECTS[self.stage])


class SkillDocument(FromSkillBank):
    stage = "skills"

    @property
    def output_name(self) -> str:  # type: ignore[override]
        from skillsft.pipeline.stages.skill_document import document_path

        return str(document_path("skills", get_env(self.env)))

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.skill_bank_io import load_skill_bank
        from skillsft.pipeline.stages.skill_document import render_skill_document

        spec = get_env(self.env)
        bank = load_skill_bank(self.input_file("skill_bank"), spec)
        return StageOutput(payload=render_skill_document(bank, spec).encode(),
                           counts={"general_skills": len(bank.general_skills),
                                   "category_skills": sum(map(len,
                                                              bank.category_skills().values())),
                                   "common_mistakes": len(bank.common_mistakes)})
