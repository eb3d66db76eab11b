"""The held-out-style check of what a teacher wrote, on any finished work dir.

    python scripts/teacher_check.py WORK_DIR ENV

Prints one JSON object: turns and distinct thoughts, thoughts that contradict the observation
they follow (scripts/thought_claims.py), skill-bank sizes per section,
placeholders left in the bank, the experience block's share of the instruction, instruction
lengths against the cutoff, and the share of thoughts applying a shown skill
(pipeline/stages/corpus_metrics.py says how).
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

from thought_claims import find_contradictions  # beside this script

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.envs.prompt_profiles import bracketed_placeholders
from skillsft.pipeline.formats.conversations import RenderOptions
from skillsft.pipeline.formats.record_files import TRAJECTORIES, load_records
from skillsft.pipeline.formats.token_lengths import token_lengths
from skillsft.pipeline.stages.corpus_metrics import instruction_lengths, skill_use, thoughts_of
from skillsft.schemas.conversation import AlpacaRecord


def check(work_dir: Path, env: str) -> dict[str, object]:
    spec = get_env(env)
    conversations = json.loads((work_dir / "distilled_trajectories.json").read_text())
    records = {r.env_id: r for r in load_records(
        work_dir / "processed_trajectories.json", TRAJECTORIES, "check").records}
    bank = json.loads((work_dir / "skill_bank.json").read_text())
    corpus = json.loads((work_dir / f"{env}_sft_data.json").read_text())
    thoughts: list[str] = []
    situations: set[tuple[str, str, str]] = set()
    contradictions = []
    for conversation in conversations:
        info = conversation["extra_info"]
        said = thoughts_of(conversation["conversations"])
        thoughts += said
        record = records[info["env_id"]]
        number = int(info["trajectory_id"].rsplit("/", 1)[1])
        drafts = spec.turn_layout().build_turns(record.task, "", record.trajectories[number],
                                                info["trajectory_id"], RenderOptions(), Counter())
        turns = [(d.observation, d.action, t) for d, t in zip(drafts, said, strict=True)]
        situations.update((record.task, d.observation, d.action) for d in drafts)
        contradictions += [(info["trajectory_id"], c) for c in
                           find_contradictions(record.task, turns, spec.action_semantics)]
    per_category = bank.get(spec.bank_category_key) or {}
    prose = json.dumps([bank["general_skills"], per_category, bank["common_mistakes"]])
    use = skill_use(conversations)
    lengths = instruction_lengths([r["instruction"] for r in corpus])
    tokens = token_lengths([AlpacaRecord.model_validate(r) for r in corpus])
    return {
        "env": env,
        "turns": len(thoughts),
        "distinct_thoughts": len(set(thoughts)),
        # (goal, observation, action) seen: the most distinct thoughts a situation-bound
        # teacher can write (repeated situations across trajectories read alike).
        "distinct_situations": len(situations),
        # The reason a thought ends with, without any quoted observation before it: how many
        # different reasons the teacher gives, not how many observations it copied.
        "distinct_reasons": len({re.split(r"(?<=[.!?…])\s+", t.strip())[-1] for t in thoughts}),
        "contradictions": len(contradictions),
        "contradiction_examples": [f"{tid} step {c.step} [{c.claim}]: {c.thought}"
                                   for tid, c in contradictions[:3]],
        "bank": {"general": len(bank["general_skills"]),
                 "per_category": {c: len(s) for c, s in per_category.items() if s},
                 "mistakes": len(bank["common_mistakes"]),
                 "placeholders": len(bracketed_placeholders(prose))},
        "block_share_mean": lengths.block_share_mean,
        "block_share_max": lengths.block_share_max,
        "instruction_chars_p50": lengths.chars_p50,
        "instruction_tokens_max": int(tokens.instruction.max),
        "over_cutoff_8192": tokens.over_cutoff,
        "skill_use_by_title": use.share(use.by_title),
        "skill_use_by_overlap": use.share(use.by_overlap),
    }


if __name__ == "__main__":
    print(json.dumps(check(Path(sys.argv[1]), sys.argv[2]), indent=1))
