"""The Retrieved-experience block, byte for byte (FORMATS.md 6); expected text written by hand."""

import json

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.render import BlockOptions, render_block
from skillsft.schemas.skill_bank import SkillBank

ALFWORLD = get_env("alfworld")
SEARCH = get_env("search")
WEBSHOP = get_env("webshop")


def make_bank(key: str = "task_specific_skills", category: str = "clean", **extra) -> SkillBank:
    data = {
        "general_skills": [
            {"skill_id": "gen_001", "title": "Plan First", "principle": "Read the goal.. ",
             "when_to_apply": "always"},
        ],
        key: {
            category: [
                {"skill_id": "cle_001", "title": "Rinse", "principle": "Use the sinkbasin",
                 "when_to_apply": "Before placing the object."},
                {"skill_id": "cle_002", "title": "Carry", "principle": "Hold it.",
                 "when_to_apply": ""},
            ]
        },
        "common_mistakes": [
            {"mistake_id": "err_001", "description": "Placing before cleaning",
             "why_it_happens": "haste", "how_to_avoid": "Clean first..."},
        ],
    }
    data.update(extra)
    return SkillBank.model_validate(data)


def test_block_alfworld_golden() -> None:
    expected = (
        "## Retrieved Relevant Experience\n"
        "\n"
        "### General Principles\n"
        "- **Plan First**: Read the goal.\n"
        "\n"
        "### Clean Skills\n"
        "- **Rinse**: Use the sinkbasin.\n"
        "  _Apply when: Before placing the object._\n"
        "- **Carry**: Hold it.\n"
        "\n"
        "### Mistakes to Avoid\n"
        "- **Don't**: Placing before cleaning.\n"
        "  **Instead**: Clean first."
    )
    assert render_block(make_bank(), ALFWORLD, "clean") == expected


def test_block_leaves_out_empty_sections() -> None:
    expected = (
        "## Retrieved Relevant Experience\n"
        "\n"
        "### Look At Object In Light Skills\n"
        "- **Rinse**: Use the sinkbasin.\n"
        "  _Apply when: Before placing the object._\n"
        "- **Carry**: Hold it."
    )
    bank = make_bank(category="look_at_obj_in_light", common_mistakes=[], general_skills=[])
    assert render_block(bank, ALFWORLD, "look_at_obj_in_light") == expected


def test_block_category_without_skills_has_no_category_section() -> None:
    block = render_block(make_bank(), ALFWORLD, "heat")
    assert "### Heat Skills" not in block
    assert block.startswith("## Retrieved Relevant Experience\n\n### General Principles\n")
    assert block.endswith("### Mistakes to Avoid\n- **Don't**: Placing before cleaning.\n"
                          "  **Instead**: Clean first.")


@pytest.mark.parametrize(
    ("spec", "key", "category", "heading"),
    [
        (WEBSHOP, "task_specific_skills", "home_decor", "### Home Decor Skills\n"),
        (SEARCH, "query_type_skills", "multi_hop_reasoning", "### Multi-Hop Reasoning Skills\n"),
    ],
    ids=["webshop", "search"],
)
def test_block_label_comes_from_the_spec(spec, key, category, heading) -> None:
    block = render_block(make_bank(key=key, category=category), spec, category)
    assert f"\n\n{heading}- **Rinse**: Use the sinkbasin.\n" in block


def test_block_caps() -> None:
    block = render_block(make_bank(), ALFWORLD, "clean", BlockOptions(max_category=1))
    assert "- **Rinse**" in block
    assert "- **Carry**" not in block


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (ALFWORLD, "alfworld/claude_style_skills.json"),
        (WEBSHOP, "webshop/claude_style_skills.json"),
        (SEARCH, "search/claude_style_skills_search.json"),
    ],
    ids=["alfworld", "webshop", "search"],
)
def test_block_from_released_banks(shared_dir, spec, path) -> None:
    bank_file = shared_dir / "data" / "skillrl-memory" / path
    if not bank_file.is_file():
        pytest.skip(f"{bank_file} is not present")
    bank = SkillBank.model_validate(json.loads(bank_file.read_text()))
    for category in spec.categories:
        block = render_block(bank, spec, category)
        assert f"\n\n### {spec.label(category)} Skills\n- **" in block
        for line in block.splitlines():
            if line.startswith(("- **", "  _Apply when", "  **Instead")):
                assert line.rstrip("_").endswith(".") and not line.rstrip("_").endswith(".."), line


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Do x", "Do x."), ("Do x.", "Do x."), ("Do x...", "Do x."), ("Do x. . ", "Do x."),
     ("  Do x.\n", "Do x."), ("Use v1.2 first", "Use v1.2 first.")],
)
def test_exactly_one_trailing_period(text: str, expected: str) -> None:
    from skillsft.pipeline.formats.render import sentence

    assert sentence(text) == expected
