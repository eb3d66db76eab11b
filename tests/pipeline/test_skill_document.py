"""The skill bank as a SKILL.md document (issue 14): released banks, repeated titles, the CLI."""

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from skillsft.cli import main
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.render import sentence
from skillsft.pipeline.stages.skill_bank_io import load_skill_bank
from skillsft.pipeline.stages.skill_document import render_skill_document
from skillsft.schemas import CommonMistake, Skill, SkillBank

RELEASED = {
    "alfworld": "alfworld/claude_style_skills.json",
    "webshop": "webshop/claude_style_skills.json",
    "search": "search/claude_style_skills_search.json",
}


def front_matter(text: str) -> dict[str, str]:
    match = re.match(r"---\n(.*?)\n---\n", text, re.DOTALL)
    assert match, "no front matter"
    return yaml.safe_load(match.group(1))


def headings(text: str, level: str = "###") -> list[str]:
    return re.findall(rf"^{level} (.+)$", text, re.MULTILINE)


@pytest.mark.parametrize("env", sorted(RELEASED))
def test_released_bank_document(shared_dir: Path, env: str) -> None:
    path = shared_dir / "data" / "skillrl-memory" / RELEASED[env]
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    spec = get_env(env)
    bank = load_skill_bank(path, spec)
    text = render_skill_document(bank, spec)
    assert text == render_skill_document(bank, spec)

    meta = front_matter(text)
    assert set(meta) == {"name", "description"}
    assert meta["name"] == f"{env}-skills" and re.fullmatch(r"[a-z0-9-]+", meta["name"])
    assert spec.title in meta["description"] and "Load this when" in meta["description"]
    assert len(meta["description"]) <= 1024

    skills = bank.general_skills + [s for v in bank.category_skills().values() for s in v]
    titles = headings(text)
    assert Counter(titles).most_common(1)[0][1] == 1, "a title is listed twice"
    assert set(titles) == {s.title.strip() for s in skills}
    for skill in skills:  # no principle is lost, repeated titles included
        assert sentence(skill.principle) in text
    for mistake in bank.common_mistakes:
        assert sentence(mistake.description) in text
    sections = headings(text, "##")
    assert sections[0] == "General principles" and sections[-1] == "Common mistakes"
    assert [s.removesuffix(" tasks") for s in sections[1:-1]] == [
        spec.label(c) for c in spec.categories if bank.category_skills().get(c)]


def test_repeated_title_is_one_entry_that_keeps_both_principles() -> None:
    spec = get_env("webshop")
    bank = SkillBank(
        general_skills=[Skill(skill_id="gen_001", title="Read First", principle="Read the page")],
        task_specific_skills={
            "apparel": [Skill(skill_id="app_001", title="Check Price", principle="Price A",
                              when_to_apply="before buying")],
            "footwear": [Skill(skill_id="foo_001", title="Check  price ", principle="Price B")],
        },
        common_mistakes=[CommonMistake(mistake_id="err_001", description="Buying blind",
                                       why_it_happens="haste", how_to_avoid="Read first")],
    )
    text = render_skill_document(bank, spec)
    assert headings(text) == ["Read First", "Check Price"]
    assert "- Also for Footwear: Price B." in text
    assert "## Footwear tasks" not in text  # its only skill is listed under Apparel
    assert "1. **Mistake:** Buying blind.\n   **Why it happens:** haste.\n" in text


def test_export_skills_command(tmp_path: Path, capsys) -> None:
    bank = tmp_path / "bank.json"
    bank.write_text(SkillBank(general_skills=[
        Skill(skill_id="gen_001", title='Quote "This": Safely', principle="Colons: fine")],
        query_type_skills={}).model_dump_json())
    out = tmp_path / "out"
    assert main(["export-skills", "search", "--skill-bank", str(bank), "--output", str(out)]) == 0
    document = out / "search-skills" / "SKILL.md"
    first = document.read_bytes()
    assert front_matter(first.decode())["name"] == "search-skills"
    assert main(["export-skills", "search", "--skill-bank", str(bank), "--output", str(out)]) == 0
    assert document.read_bytes() == first

    capsys.readouterr()
    code = main(["export-skills", "alfworld", "--skill-bank", str(bank), "--output", str(out)])
    assert code == 2
    assert str(bank) in capsys.readouterr().err
