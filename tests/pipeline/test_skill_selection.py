"""`--skills retrieve`: which skills a record shows, by both scorers; the embeddings journal;
the category default unchanged; the skill-use metric on hand-made conversations."""

from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.corpus_metrics import experience_block, instruction_lengths, skill_use
from skillsft.pipeline.stages.distill import DistillOptions, distill
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.stages.skill_selection import (
    EmbeddingScorer,
    LexicalScorer,
    SkillSelection,
    retrieve,
    retrieved_block,
)
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.pipeline.teacher.openai.embeddings import EmbeddingClient
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.schemas.skill_bank import CommonMistake, Skill, SkillBank
from tests.support.fixtures import TEST_API_KEY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"


def _skill(skill_id: str, title: str, principle: str) -> Skill:
    return Skill(skill_id=skill_id, title=title, principle=principle, when_to_apply="")


BANK = SkillBank(
    general_skills=[_skill("gen_001", "Search Before Acting",
                           "Look in likely places before interacting with anything.")],
    task_specific_skills={
        "heat": [_skill("hea_001", "Heat Then Deliver",
                        "Carry the tomato to the microwave, heat it until hot, then bring it "
                        "to the sinkbasin."),
                 _skill("hea_002", "Warm Mugs Quickly",
                        "Heat the mug in the microwave and place it on the coffeemachine.")],
        "clean": [_skill("cle_001", "Rinse At The Sinkbasin",
                         "Clean the tomato or lettuce at the sinkbasin before placing it.")],
        "cool": [_skill("coo_001", "Chill In The Fridge",
                        "Cool the apple in the fridge, then put it on the countertop.")],
    },
    common_mistakes=[CommonMistake(mistake_id="err_001", description="Repeating one action.",
                                   how_to_avoid="Try an unexplored option.")],
)
TASK = "put a hot tomato in sinkbasin"


def test_lexical_retrieval_picks_the_skills_that_cover_the_task() -> None:
    chosen = retrieve(BANK, TASK, SkillSelection("retrieve", top_k=6, threshold=0.4),
                      LexicalScorer())
    assert [s.skill_id for _, s in chosen] == ["hea_001", "cle_001"]
    assert chosen[0][0] == 1.0  # hot, tomato, sinkbasin: every content word of the task
    top1 = retrieve(BANK, TASK, SkillSelection("retrieve", top_k=1, threshold=0.4),
                    LexicalScorer())
    assert [s.skill_id for _, s in top1] == ["hea_001"]
    strict = retrieve(BANK, TASK, SkillSelection("retrieve", threshold=0.7), LexicalScorer())
    assert [s.skill_id for _, s in strict] == ["hea_001"]  # the clean skill covers 2 of 3


def test_the_block_keeps_general_skills_and_mistakes_and_respects_its_cap() -> None:
    spec = get_env("alfworld")
    selection = SkillSelection("retrieve")
    block, chosen = retrieved_block(BANK, spec, "heat", TASK, selection, LexicalScorer())
    assert [s.skill_id for s in chosen] == ["hea_001", "cle_001"]
    assert "Search Before Acting" in block and "Repeating one action" in block
    assert "Warm Mugs Quickly" not in block and "Chill In The Fridge" not in block
    capped = SkillSelection("retrieve", max_block_chars=len(block) - 1)
    smaller, kept = retrieved_block(BANK, spec, "heat", TASK, capped, LexicalScorer())
    assert [s.skill_id for s in kept] == ["hea_001"] and len(smaller) <= len(block) - 1


def _client(server, tmp_path: Path) -> EmbeddingClient:
    settings = TeacherSettings.resolve({}, teacher="openai", api_key=TEST_API_KEY,
                                       base_url=server.base_url, timeout=5.0,
                                       show_progress=False)
    return EmbeddingClient(settings, "test-embed", tmp_path / "journal")


def test_embedding_retrieval_over_http_is_journaled_and_resumes(openai_server,
                                                                tmp_path: Path) -> None:
    scorer = EmbeddingScorer(_client(openai_server, tmp_path))
    chosen = retrieve(BANK, TASK, SkillSelection("retrieve", threshold=0.4), scorer)
    ids = [s.skill_id for _, s in chosen]
    # The server's vectors are bags of 4+-letter words: the clean skill (tomato, sinkbasin in
    # a short text) is closest, the heat skill next; mugs and apples share nothing.
    assert ids == ["cle_001", "hea_001"]
    assert chosen[0][0] > chosen[1][0] >= 0.4
    sent = list(openai_server.stats.embedded_texts)
    assert TASK in sent and len(sent) == len(set(sent)) == 5  # the task and 4 skills, once each
    # A new process (a new client on the same journal) pays for nothing it already has ...
    again = EmbeddingScorer(_client(openai_server, tmp_path))
    assert [s.skill_id for _, s in retrieve(BANK, TASK, SkillSelection(
        "retrieve", threshold=0.4), again)] == ids
    assert openai_server.stats.embedded_texts == sent
    # ... and asks only for texts it has never seen.
    again.prepare(["a brand new task about a cool apple"])
    assert openai_server.stats.embedded_texts == [*sent, "a brand new task about a cool apple"]
    assert TEST_API_KEY not in (tmp_path / "journal" / "embeddings.jsonl").read_text()


def _records(env: str):
    return parse_rollouts(EXAMPLES / env, get_env(env), SelectionOptions(include_mixed=True),
                          workers=1).records


def test_category_mode_is_the_default_layout_byte_for_byte() -> None:
    spec, records = get_env("alfworld"), _records("alfworld")
    teacher = OfflineTeacher(show_progress=False)
    default = distill(records, spec, DistillOptions(), teacher, BANK)
    explicit = distill(records, spec, DistillOptions(skills=SkillSelection("category")), teacher,
                       BANK)
    assert [c.model_dump() for c in default.records] == [
        c.model_dump() for c in explicit.records]
    retrieved = distill(records, spec, DistillOptions(skills=SkillSelection("retrieve")), teacher,
                        BANK)
    heat = next(c for c in retrieved.records if c.extra_info.task == TASK)
    assert "Rinse At The Sinkbasin" in heat.system  # retrieved across categories
    assert "Warm Mugs Quickly" not in heat.system  # in the category, but not similar enough
    assert "Warm Mugs Quickly" in next(c for c in default.records
                                       if c.extra_info.task == TASK).system


def test_skill_use_counts_titles_and_overlap_on_hand_made_conversations() -> None:
    system = ("You are an agent.\nYour task is to: put a hot tomato in sinkbasin\n\n"
              "## Retrieved Relevant Experience\n\n### Heat Skills\n"
              "- **Heat Then Deliver**: Carry the tomato to the microwave, heat it, then "
              "bring it to the sinkbasin.")
    conversation = {"system": system, "extra_info": {"task": TASK}, "conversations": [
        {"from": "human", "value": "obs"},
        {"from": "gpt", "value": "<think>As Heat Then Deliver says, I go on.</think>\n<action>"
                                 "go to microwave 1</action>"},
        {"from": "human", "value": "obs"},
        {"from": "gpt", "value": "<think>I carry it to the microwave and heat it before I "
                                 "bring it back.</think>\n<action>heat tomato 1</action>"},
        {"from": "human", "value": "obs"},
        {"from": "gpt", "value": "<think>I look around.</think>\n<action>look</action>"},
    ]}
    use = skill_use([conversation])
    assert (use.thoughts, use.with_block, use.by_title, use.by_overlap) == (3, 3, 1, 1)
    assert use.share(use.by_title) == pytest.approx(1 / 3, abs=1e-3)
    bare = {**conversation, "system": "You are an agent."}
    assert skill_use([bare]).with_block == 0


def test_block_share_and_cutoff_on_hand_made_instructions() -> None:
    block = "## Retrieved Relevant Experience\n\n### General Principles\n- **A**: b."
    instruction = f"Header\n\n{block}\n\n## Current Progress\n\n" + "x" * 100
    assert experience_block(instruction) == block
    lengths = instruction_lengths([instruction])
    assert lengths.block_share_mean == pytest.approx(len(block) / len(instruction), abs=1e-3)
    both = instruction_lengths([instruction, "y" * 400])
    assert both.chars_max == 400 and both.block_share_max == lengths.block_share_mean


def test_an_embeddings_failure_names_the_endpoint_without_its_secret(tmp_path: Path) -> None:
    from skillsft.pipeline.teacher.openai.embeddings import EmbeddingError

    settings = TeacherSettings.resolve({}, teacher="openai", api_key=TEST_API_KEY,
                                       base_url="http://user:hunter2@127.0.0.1:9/v1?token=abc",
                                       timeout=1.0, max_retries=0, show_progress=False)
    client = EmbeddingClient(settings, "test-embed", tmp_path / "journal")
    with pytest.raises(EmbeddingError) as raised:
        client.embed(["a task"])
    message = str(raised.value)
    assert "127.0.0.1:9/v1" in message and "re-run" in message
    assert "hunter2" not in message and "abc" not in message and TEST_API_KEY not in message
