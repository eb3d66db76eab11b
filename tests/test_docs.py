"""The docs in docs/ against the code: every command and flag documented where users look for
it, the literal layouts in formats.md equal to what the code renders, links that resolve, and
nothing a user reads pointing into ../shared (which users of the project do not have)."""

import argparse
import re
from pathlib import Path

import pytest

from skillsft.cli import build_parser
from skillsft.pipeline.envs import ENVS, get_env
from skillsft.pipeline.formats.render import render_block
from skillsft.schemas import CommonMistake, Skill, SkillBank

ALFWORLD = get_env("alfworld")
WEBSHOP = get_env("webshop")
SEARCH_LAYOUT = get_env("search").turn_layout()

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
CLI_MD = DOCS / "cli.md"
FORMATS_MD = DOCS / "formats.md"

HEADING = re.compile(r"^(#{1,6}) (.+)$")
FLAG_ROW = re.compile(r"^\|\s*`(--[a-z][a-z0-9-]*)")
ANCHOR_LINK = re.compile(r"\]\(#([a-z0-9_-]+)\)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SHARED = re.compile(r"\.\./shared|shared/docs|shared/data")
# The contract files in ../shared, by name: user-facing markdown points to docs/ instead.
CONTRACT_NAMES = re.compile(r"\b(FORMATS|CLI)\.md\b")


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return kept.replace(" ", "-")


def sections(text: str) -> dict[str, tuple[int, str, str]]:
    """anchor -> (level, title, body up to the next heading of the same or a higher level)."""
    lines = text.splitlines()
    headings = [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(lines)
                if (m := HEADING.match(line))]
    found = {}
    for n, (start, level, title) in enumerate(headings):
        end = next((i for i, lvl, _ in headings[n + 1:] if lvl <= level), len(lines))
        found[slug(title)] = (level, title, "\n".join(lines[start + 1:end]))
    return found


def table_flags(body: str) -> set[str]:
    return {m.group(1) for line in body.splitlines() if (m := FLAG_ROW.match(line))}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def accepted_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--") and option != "--help"}


def documented_flags(command: str) -> set[str]:
    """Flags in the command's own table plus those of the flag groups its section links to."""
    found = sections(CLI_MD.read_text())
    _, _, body = found[f"skillsft-{command}"]
    flags = table_flags(body)
    for anchor in ANCHOR_LINK.findall(body):
        if anchor in found:
            flags |= table_flags(found[anchor][2])
    return flags


def test_every_subcommand_has_a_section_in_cli_md() -> None:
    found = sections(CLI_MD.read_text())
    missing = [name for name in subcommands() if f"skillsft-{name}" not in found]
    assert not missing, f"docs/cli.md has no '## skillsft <command>' section for {missing}"


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_flag_of_a_command_is_in_its_flag_tables(command: str) -> None:
    """A flag counts as documented when a table row of its command's section, or of a flag
    group that section links to, starts with it (a mention in prose does not count)."""
    parser = subcommands()[command]
    undocumented = sorted(accepted_flags(parser) - documented_flags(command))
    assert not undocumented, (
        f"`skillsft {command}` accepts {undocumented}, not documented under "
        f"'## skillsft {command}' in docs/cli.md: add a row to its flag table"
    )


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_documented_flag_is_accepted_by_its_command(command: str) -> None:
    """The other direction: a table row for a flag the command does not take is a doc error."""
    parser = subcommands()[command]
    extra = sorted(documented_flags(command) - accepted_flags(parser))
    assert not extra, f"docs/cli.md documents {extra} for `skillsft {command}`, which has none"


def test_every_flag_of_the_skillsft_command_itself_is_in_a_flag_table() -> None:
    """Flags before the subcommand (`skillsft --version`) belong in a table row somewhere."""
    top_level = accepted_flags(build_parser())
    undocumented = sorted(top_level - table_flags(CLI_MD.read_text()))
    assert not undocumented, f"`skillsft` accepts {undocumented}; add them to a table in cli.md"


def test_cli_md_names_every_environment_and_exit_code() -> None:
    text = CLI_MD.read_text()
    for env in ENVS:
        assert f"run_{env}.sh" in text
    exit_codes = sections(text)["exit-codes-errors-and-logs"][2]
    for code in ("0", "1", "2", "130"):
        assert re.search(rf"^\| {code} \|", exit_codes, re.MULTILINE), code


def one_line(text: str) -> str:
    """A multi-line template as formats.md writes it: newlines as the two characters \\n."""
    return text.replace("\n", "\\n")


def test_formats_md_reproduces_the_turn_and_record_layouts_the_code_renders() -> None:
    doc = FORMATS_MD.read_text()
    alfworld, webshop = ALFWORLD.turn_layout(), WEBSHOP.turn_layout()
    expected = {
        "ALFWorld system": alfworld.system("<task>", "<block>"),
        "WebShop system": webshop.system("<task>", "<block>"),
        "text turn 0": alfworld.first_turn.format(observation="<obs>",
                                                  admissible="<a1, a2, ...>"),
        "history line": alfworld.history_line.format(i=1, observation="<obs of turn k-n>",
                                                     action="<action of turn k-n>"),
        "alpaca turn 0": "<system>" + alfworld.progress_first + "<human turn 0>",
        "alpaca turn k": "<system>" + alfworld.progress_later.format(k="<k>", n="<n>")
        + "<history lines>\nYou are now at step <k+1> and your current observation is: ",
        "Search system": f"System text: `{SEARCH_LAYOUT.system('', '')}`",
        "Search human turn": SEARCH_LAYOUT.human_template.format(
            question="<question>", block="<block>", history="<history section>"),
        "Search record": "<system>" + SEARCH_LAYOUT.progress_first + "<human turn>",
    }
    assert webshop.first_turn == alfworld.first_turn  # one template documented for both
    missing = [name for name, text in expected.items() if one_line(text) not in doc]
    assert not missing, f"docs/formats.md no longer shows these layouts as rendered: {missing}"


def test_formats_md_shows_the_experience_block_as_rendered() -> None:
    bank = SkillBank(
        general_skills=[Skill(skill_id="gen_001", title="<title>", principle="<principle>")],
        task_specific_skills={"clean": [Skill(skill_id="cle_001", title="<title>",
                                              principle="<principle>",
                                              when_to_apply="<when_to_apply>")]},
        common_mistakes=[CommonMistake(mistake_id="err_001", description="<description>",
                                       how_to_avoid="<how_to_avoid>")],
    )
    block = render_block(bank, ALFWORLD, "clean").replace("### Clean Skills",
                                                          "### <Category Label> Skills")
    as_code = "\n".join(f"    {line}" if line else "" for line in block.splitlines())
    assert as_code in FORMATS_MD.read_text()


def markdown_files() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", markdown_files(),
                         ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_links_in_the_docs_resolve(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        missing_heading = (linked.is_file() and linked.suffix == ".md" and bool(anchor)
                           and anchor not in sections(linked.read_text()))
        if not linked.exists() or missing_heading:
            broken.append(target)
    assert not broken, f"{path.name}: links to missing files or headings: {broken}"


def user_facing_files() -> list[Path]:
    """What a user of the project reads: docs, READMEs, messages in the code, the scripts."""
    files = [REPO_ROOT / "README.md", REPO_ROOT / "luigi.cfg", REPO_ROOT / "pyproject.toml",
             *REPO_ROOT.glob("run_*.sh"), *(REPO_ROOT / "scripts").glob("*"),
             *DOCS.rglob("*.md")]
    for folder in ("pipeline", "tasks", "skillsft", "schemas", "bench"):
        files += (REPO_ROOT / folder).rglob("*.py")
    files += (REPO_ROOT / "examples").rglob("*.md")
    return sorted(p for p in files if p.is_file())


def test_nothing_a_user_reads_points_into_shared() -> None:
    assert any(p.parent == DOCS for p in user_facing_files())
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in user_facing_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SHARED.search(line)
    ]
    assert not offenders, "\n".join(offenders)


def test_markdown_a_user_reads_names_our_docs_not_the_contract_files() -> None:
    pages = [REPO_ROOT / "README.md", *DOCS.rglob("*.md"), *(REPO_ROOT / "examples").rglob("*.md")]
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in pages
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if CONTRACT_NAMES.search(line)
    ]
    assert not offenders, "\n".join(offenders)


def code_blocks(section_body: str) -> list[str]:
    """The indented code blocks of a markdown section, unindented: runs of lines indented by
    four spaces (blank lines inside included) that follow a blank line."""
    blocks: list[list[str]] = []
    inside = False
    previous = ""
    for line in section_body.splitlines():
        if line.startswith("    ") and (inside or not previous.strip()):
            if not inside:
                blocks.append([])
            inside = True
            blocks[-1].append(line[4:])
        elif inside and not line.strip():
            blocks[-1].append("")
        else:
            inside = False
        previous = line
    return ["\n".join(block).strip("\n") for block in blocks]


def test_the_rollout_examples_in_formats_md_parse_as_described() -> None:
    from skillsft.pipeline.formats.rollouts.search import parse_search_rollout
    from skillsft.pipeline.formats.rollouts.steps import parse_step_rollout

    found = sections(FORMATS_MD.read_text())
    step_file = next(b for b in code_blocks(found["alfworld-and-webshop-step-files"][2])
                     if "Step -1" in b)
    episode = parse_step_rollout("\n".join(
        line for line in step_file.splitlines() if line != "..."))
    assert episode.task == "put a clean mug in shelf"
    assert [s.step_id for s in episode.steps] == ["Step -1", "Step 00", "Step 07"]
    assert set(episode.steps[1].metadata) == {"Raw Model Output", "Parsed Action", "Valid Action"}
    assert episode.steps[1].admissible_actions == [
        "examine countertop 1", "go to shelf 1", "take mug 1 from countertop 1"]
    assert "Welcome" not in episode.steps[0].observation
    assert episode.succeeded(ALFWORLD.win_reward)

    question_file = next(b for b in code_blocks(found["search-question-files"][2]))
    search = parse_search_rollout(question_file)
    assert [s.action for s in search.steps] == [
        "<search>the office us first episode air date</search>", "<answer>March 24, 2005</answer>"]
    assert search.reward == 1.0 and search.steps[1].memory_context.startswith("Step 0: <search>")
