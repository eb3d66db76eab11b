"""The Luigi tasks of `skillsft evolve`: the candidate bank of a round, then the gate.

    ParseRollouts -> GenerateMemories -> EvolveCandidate -> EvolveGate -> SkillDocument
    (new rollouts, into the round's folder)   (+ the current bank, an InputFile)

Stage 1 and the memories are today's tasks pointed at the round's folder
(`WORK_DIR/evolution/round-NNN/`), sharing the work dir's journal. `EvolveCandidate` reflects,
merges, selects and updates (pipeline/stages/evolve/propose.py); `EvolveGate` runs the
evaluator and settles the round (decide.py). Both are fingerprinted like every stage, so the
same command recomputes nothing, and a gate that failed is retried without asking the teacher
again. Composed by skillsft/evolve_cli.py.
"""

import hashlib
from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.evolve import rounds
from skillsft.pipeline.stages.evolve.options import EvolveOptions, GateOptions
from skillsft.pipeline.stages.outcome import FailureRule
from skillsft.pipeline.teacher.plan import build_teacher
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask, rejects_lines
from skillsft.tasks.options_param import OptionsParameter
from skillsft.tasks.teacher import TeacherParameter


class EvolveCandidate(StageTask):
    """Inputs: the new memories, then the current bank. Output: the round's candidate bank."""

    stage = "evolve"
    output_name = rounds.CANDIDATE
    round_number = luigi.IntParameter()
    teacher = TeacherParameter()
    evolve = OptionsParameter(EvolveOptions)
    failure = OptionsParameter(FailureRule)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.evolve import merge, reflect

        return {f"prompt/{reflect.REFLECT_KIND}": reflect.PROMPT_VERSION,
                f"prompt/{merge.MERGE_KIND}": merge.PROMPT_VERSION}

    def rejected(self) -> list[dict[str, Any]]:
        return rounds.rejected_before(self.work_dir, self.round_number)

    def external_signatures(self) -> dict[str, str]:
        """The earlier rounds' rejected edits are part of the prompt, hence of the output."""
        shown = jsonio.dumps_lines(self.rejected())
        return {**super().external_signatures(), "round": str(self.round_number),
                "rejected_edits": hashlib.sha256(shown).hexdigest()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.evolve.gate import sha256_of
        from skillsft.pipeline.stages.evolve.merge import EvolveTeacherError
        from skillsft.pipeline.stages.evolve.propose import propose_candidate
        from skillsft.pipeline.stages.skill_bank_io import load_memory_files, load_skill_bank

        spec = get_env(self.env)
        memories_path, bank_path = self.input_files()
        loaded = load_memory_files([memories_path], spec)
        load_skill_bank(bank_path, spec)  # the checks of stage 3, with their messages
        raw = jsonio.load(bank_path)
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        evolution = {"round": self.round_number, "parent": str(bank_path),
                     "parent_sha256": sha256_of(bank_path)}
        try:
            result = propose_candidate(loaded.records, raw, spec, self.evolve, teacher,
                                       rejected=self.rejected(), evolution=evolution,
                                       bank_name=str(bank_path))
        except EvolveTeacherError as error:
            failed = [Reject(stage=self.stage, file=str(memories_path), reason="teacher_error",
                             step=request_id, detail=f"{request_id}: {message}")
                      for request_id, message in error.failed]
            return StageOutput(payload=b"", failure=error, rejects_name=rounds.REJECTS,
                               side_files={rounds.REJECTS: rejects_lines([*loaded.rejects,
                                                                          *failed])})
        result.absorb_load(loaded)
        records = [edit.record() for edit in result.extras["edits"]]
        return StageOutput.of(result, jsonio.dumps(result.records[0]),
                              input_name=str(memories_path), rejects_name=rounds.REJECTS,
                              side_files={rounds.SELECTION: jsonio.dumps_lines(records)})


class EvolveGate(StageTask):
    """Inputs: the candidate task, then the current bank. Output: the round's accepted bank,
    with edits.jsonl, gate.json, changes.md and rejected_edits.jsonl beside it."""

    stage = "gate"
    output_name = rounds.ACCEPTED
    round_number = luigi.IntParameter()
    teacher_name = luigi.Parameter(default="")
    gate = OptionsParameter(GateOptions)

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.evolve.decide import decide_round
        from skillsft.pipeline.stages.evolve.gate import SCORES_FILE, ScoreBook
        from skillsft.schemas.evolve import EditRecord

        candidate, current = self.input_files()
        folder = self.output_file().parent
        records = [EditRecord.model_validate_json(line)
                   for line in (candidate.parent / rounds.SELECTION).read_bytes().splitlines()
                   if line.strip()]
        scores = ScoreBook(rounds.evolution_dir(self.work_dir) / SCORES_FILE)
        decision = decide_round(records, current, candidate, folder, self.gate, scores,
                                round_number=self.round_number, teacher=self.teacher_name,
                                spec=get_env(self.env))
        gate = {**decision.gate, "round": self.round_number, "current_bank": str(current),
                "candidate_bank": str(candidate)}
        return StageOutput(
            payload=decision.accepted_bytes, counts=decision.counts,
            side_files={rounds.EDITS: jsonio.dumps_lines(decision.records),
                        rounds.GATE: jsonio.dumps(gate),
                        rounds.CHANGES: decision.changes_md.encode(),
                        rounds.REJECTED: jsonio.dumps_lines(decision.rejected)})
