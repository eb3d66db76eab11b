"""Search-QA: answering a question step by step with a search engine, as one `EnvSpec`.

Everything that is Search's own lives here: its query types and the rules (and QA sources) that
classify a question into one, what its actions need and provide (offline memories), what the
teacher is told about it, how its turns are rendered (its own layout, not the text
environments'), and the signs that tell its rollout files apart. It has no post-checks.
"""

from skillsft.pipeline.envs.action_semantics import ActionRule, ActionSemantics, frozen, rx
from skillsft.pipeline.envs.categories import classify, rules
from skillsft.pipeline.envs.prompt_profiles import PromptProfile, plain_words
from skillsft.pipeline.envs.spec import EnvSpec
from skillsft.pipeline.formats.conversations import SearchLayout
from skillsft.pipeline.formats.rollouts.kinds import SEARCH_FORMAT

RULES = rules(
    ("comparison", r"\b(which|who)\b.*\b(or|first|older|younger|earlier|later|longer|shorter"
                   r"|larger|smaller|more|less|higher|lower|both)\b|\bboth\b|\bsame\b"),
    ("multi_hop_reasoning", r"\b(of the|whose|that|who (directed|wrote|founded|played))\b.*\b"
                            r"(of|by|in|for)\b"),
    ("entity_attribute_lookup", r"^(when|where|how (many|much|old|long|tall)|what year|"
                                r"what is the (population|height|capital|area|date))\b"),
)
LABELS = {
    "direct_retrieval": "Direct Retrieval",
    "multi_hop_reasoning": "Multi-Hop Reasoning",
    "entity_attribute_lookup": "Entity Attribute Lookup",
    "comparison": "Comparison",
}
# QA sources whose questions are multi-hop by construction: the source outranks the wording.
MULTI_HOP_SOURCES = frozenset({"hotpotqa", "2wikimultihopqa", "musique", "bamboogle"})


def classify_task(goal: str, data_source: str | None = None) -> str:
    category = classify(goal, RULES, "direct_retrieval")
    if category == "direct_retrieval" and (data_source or "").lower() in MULTI_HOP_SOURCES:
        return "multi_hop_reasoning"
    return category


SEMANTICS = ActionSemantics(
    rules=(
        # A query naming an entity an earlier result revealed (the bridge of a multi-hop
        # question) depends on that result.
        ActionRule("search", rx(r"^<search>\s*(?P<query>.+?)\s*</search>$"),
                   needs=("bridge:{query}",), phrase="Search {query}"),
        ActionRule("answer", rx(r"^<answer>\s*(?P<answer>.+?)\s*</answer>$"),
                   needs=("seen:{answer}",), phrase="Synthesize {answer}"),
    ),
    # Each kept query is its own hop: [Entity_1], [Entity_2], ... (numbered like objects).
    roles=frozen({"query": "Entity", "answer": "Answer"}),
    target_field="answer",
    target_role="Answer",
    free_text_actions=rx(r"^<(search|answer)>"),
    fact_phrases=frozen({"seen": "retrieved evidence mentioning '{0}'",
                          "bridge": "an earlier result naming what '{0}' asks about"}),
    evidence_kinds=frozenset({"seen"}),
    terminal_rules=frozenset({"answer"}),
    wrong_final_choice=(
        "The retrieved passages do not clearly support one candidate answer",
        "Committing to an answer that the retrieved evidence does not support instead of "
        "searching again with a more specific query"),
)


PROMPTS = PromptProfile(
    description_form="One plain paragraph of one to three sentences.",
    description_rules=(
        "Say what kind of question it is: multi-hop reasoning or direct retrieval.",
        "Say what the agent did and whether it succeeded, and briefly why.",
    ),
    goal_step="the step that gave the final answer",
    refinement_rules=(
        "Keep only the searches whose results were used for the answer, including the search "
        "that found a bridge entity a later search depends on; drop searches that returned "
        "nothing useful.",
        "Replace entities with placeholders ('Search for [Person] career history').",
        "Summarise each observation by the kind of fact it gave ('found career dates and team "
        "list'), never by copying the passage.",
    ),
    pattern_rules=(
        "Write a decomposition chain such as 'Decompose Question -> Search Entity A -> Search "
        "Entity B -> Synthesize', with generic terms [Entity], [Attribute], [Time_Period] "
        "instead of names, dates or answers.",
    ),
    mistake_rules=(
        "Triggers and bad actions are abstract ('ambiguous entity name' / 'repeated the same "
        "query'); never quote the answer or a wrong answer.",
    ),
    placeholders=plain_words({
        "[Entity]": "the entity", "[Attribute]": "the asked attribute",
        "[Time_Period]": "the time period", "[Person]": "the person", "[Query]": "a query",
        "[Answer]": "the answer",
    }),
    example_description=(
        "A multi-hop question asking for the birthplace of a film's director. The agent first "
        "identified the director, then searched the director's biography, and answered "
        "correctly because both hops were supported by retrieved passages."
    ),
    example_pattern=(
        "Decompose Question -> Search [Entity] -> Search [Attribute] of [Entity] -> Synthesize"
    ),
    category_noun="query type",
    offline_success=("A {label} question. The agent's plan: {summary}; it answered correctly "
                     "because a retrieved passage stated the answer."),
    offline_failure="A {label} question. The agent failed, due to {cause}.",
    reflect_rules=(
        "A wrong answer given after too few searches calls for a skill about when the "
        "evidence is enough, in the query type's section; never write an answer into the bank.",
    ),
)


LAYOUT = SearchLayout(
    system_template="You are a helpful and harmless assistant.",
    human_template=(
        "You are an expert agent tasked with answering the given question step-by-step.\n"
        "Your question: {question}\n\n{block}\n\n{history}"
        "You should first reason step-by-step inside <think> </think> tags. Then either issue "
        "another search via <search>...</search> or commit to a final answer via "
        "<answer>...</answer>."
    ),
    history_header="History:\n",
    history_line="Step {j}: {action}",
    information=" <information>{information}</information>",
    history_footer="\n\n",
    output="<think>{thought}</think>\n{action}",
    progress_first="\n\n## Current Progress\n",
)


SPEC = EnvSpec(
    name="search",
    prompts=PROMPTS,
    memory_environment_tag="SearchAgent",
    categories=tuple(LABELS),
    category_labels=LABELS,
    classify_task=classify_task,
    bank_category_key="query_type_skills",
    layout=LAYOUT,
    action_semantics=SEMANTICS,
    rollout_format=SEARCH_FORMAT,
    win_reward=1.0,
    title="Search-QA",
    skill_scope="answering a question step by step with a search engine: issuing "
    "<search> queries, reading what they retrieve and committing to an <answer>",
    dump_signs=(r"(?m)^Your question:", r"<(search|answer)>"),
)
