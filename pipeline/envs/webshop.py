"""WebShop: shopping in a simulated web store through search[...] and click[...], as one `EnvSpec`.

Everything that is WebShop's own lives here: its product categories and the rules that classify
a request into one, what its actions need and provide (offline memories), what the teacher is
told about it, how its turns are rendered (with the navigation repair before distillation), the
post-checks its records pass, and the signs that tell its rollout files apart.
"""

from skillsft.pipeline.envs.action_semantics import ActionRule, ActionSemantics, frozen, rx
from skillsft.pipeline.envs.categories import classify, rules
from skillsft.pipeline.envs.prompt_profiles import PromptProfile, plain_words
from skillsft.pipeline.envs.spec import EnvSpec
from skillsft.pipeline.envs.text_turns import text_layout
from skillsft.pipeline.formats.postchecks import (
    PostCheck,
    bare_buy_now,
    invented_action,
    navigation_back,
)

RULES = rules(
    ("footwear", r"\b(shoes?|sneakers?|boots?|sandals?|slippers?|heels|loafers?|flip[- ]?flops?"
                 r"|clogs?|oxfords?|footwear)\b"),
    ("beauty_health", r"\b(shampoo|conditioner|lotion|serum|makeup|mascara|lipstick|nail|"
                      r"perfume|fragrance|skin ?care|moisturi[sz]er|cream|vitamins?|supplements?"
                      r"|toothpaste|hair (dye|color|oil)|wig|deodorant|sunscreen|cleanser)\b"),
    ("electronics", r"\b(headphones?|earbuds?|charger|cable|usb|hdmi|camera|speakers?|tv|"
                    r"television|laptop|tablet|phone case|remote|router|monitor|keyboard|mouse|"
                    r"batter(y|ies)|projector|microphone|bluetooth)\b"),
    ("accessories", r"\b(watch(es)?|wallets?|handbags?|bags?|backpacks?|purses?|necklaces?|"
                    r"bracelets?|earrings?|rings?|sunglasses|belts?|scarf|scarves|hats?|caps?|"
                    r"gloves|jewelry|tote)\b"),
    ("home_decor", r"\b(curtains?|pillows?|rugs?|lamps?|candles?|wall art|blankets?|sofa|"
                   r"couch|chairs?|tables?|bedding|sheets|duvet|comforter|vase|mirror|shelf|"
                   r"shelves|cabinet|decor|furniture|ottoman|mattress|towels?)\b"),
    ("apparel", r"\b(shirts?|t-shirts?|tee|dress(es)?|pants|jeans|shorts|skirts?|jackets?|"
                r"coats?|hoodies?|sweaters?|sweatshirts?|blouses?|leggings|underwear|bra|"
                r"socks|pajamas?|swimsuits?|bikini|vest|tops?|tank|jumpsuits?|romper|"
                r"cardigan|trousers|joggers|polo|lingerie|apparel|clothing)\b"),
)
LABELS = {
    "apparel": "Apparel",
    "footwear": "Footwear",
    "home_decor": "Home Decor",
    "electronics": "Electronics",
    "accessories": "Accessories",
    "beauty_health": "Beauty Health",
    "other": "Other",
}


def classify_task(goal: str, data_source: str | None = None) -> str:
    return classify(goal, RULES, "other")


_ASIN = r"(?:b0[a-z0-9]{8}|\d{9}[\dx])"
SEMANTICS = ActionSemantics(
    rules=(
        ActionRule("search", rx(r"^search\[(?P<query>.+)\]$"), provides=("page:results",),
                   updates=frozen({"item": "", "options": ""}), phrase="Search for {query}"),
        ActionRule("paginate", rx(r"^click\[next >\]$"), needs=("page:results",),
                   provides=("page:results",), phrase="Open the next results page"),
        ActionRule("navigate", rx(r"^click\[(?:< prev|back to search)\]$")),
        ActionRule("inspect", rx(r"^click\[(?:description|features|reviews|attributes)\]$"),
                   needs=("page:item:{item}",)),
        ActionRule("buy", rx(r"^click\[buy now\]$"),
                   needs=("page:item:{item}", "option:{options}"), phrase="Click Buy Now"),
        ActionRule("product", rx(rf"^click\[(?P<item>{_ASIN})\]$"), needs=("page:results",),
                   provides=("page:item:{item}",),
                   updates=frozen({"item": "{item}", "options": ""}), phrase="Open {item}"),
        ActionRule("option", rx(r"^click\[(?P<option>.+)\]$"), needs=("page:item:{item}",),
                   provides=("option:{option}",), updates=frozen({"options": "+{option}"}),
                   phrase="Select {option}"),
    ),
    roles=frozen({"query": "Product_Query", "item": "Product", "option": "Option"}),
    target_field="item",
    target_role="Product",
    action_abstractions=((rx(rf"\[{_ASIN}\]"), "[[Product]]"),),
    free_text_actions=rx(r"^search\["),
    goal_constraint_pattern=rx(r"(?:,|\bwith\b)\s*(?:and\s+)?([a-z]+(?: [a-z]+){0,2}):\s*"
                                r"([^,]+?)(?=,|$|\s+and\s+price)"),
    fact_phrases=frozen({
        "page": "the {0} page being open", "option": "option '{0}' being selected",
    }),
    terminal_rules=frozenset({"buy"}),
    wrong_final_choice=(
        "A product page is open but not every requirement of the task (item type, size, "
        "colour, price) has been checked against it",
        "Buying a product whose attributes or selected options do not match every requirement "
        "of the task"),
)


PROMPTS = PromptProfile(
    description_form=(
        "WebShop task to <verb> a <broad item category> with <kinds of constraints>. "
        "<outcome>."
    ),
    description_rules=(
        "Name the kinds of constraints only (price, size, colour, material, pack count...), "
        "never their values: 'with size, colour and price constraints', not 'size 9, under 80 "
        "dollars'.",
        "The item category is broad ('running shoes', 'face serum'), never a product title.",
        "<outcome> says how the purchase was found, or why the episode failed (a wrong "
        "purchase, an option never selected, the step budget).",
    ),
    goal_step="click[buy now]",
    refinement_rules=(
        "Replace product titles and ids with the broad item category.",
        "Never write a concrete value: use [Price_Constraint], [Size_Constraint], "
        "[Color_Constraint] and similar, also inside actions (click[[Size_Constraint]]).",
        "Summarise each observation as the state change it shows (results listed, product page "
        "open, option selected), not as a copy of the page.",
    ),
    pattern_rules=(
        "Write a skeleton of action types joined by ' -> ', such as 'Search -> Filter -> Select "
        "-> Verify -> Buy', with no product names or constraint values.",
    ),
    mistake_rules=(
        "Triggers and bad actions name kinds of constraints ([Size_Constraint], "
        "[Price_Constraint]), never their values or product ids.",
    ),
    placeholders=plain_words({
        "[Price_Constraint]": "the price limit", "[Size_Constraint]": "the requested size",
        "[Color_Constraint]": "the requested colour", "[Product]": "the product",
        "[Product_Query]": "a query with the key attributes", "[Option]": "the required option",
    }),
    example_description=(
        "WebShop task to buy a pair of sneakers with size, colour and price constraints. "
        "Solved by searching with the key attributes, opening the best match, selecting the "
        "required options and buying."
    ),
    example_pattern="Search -> Select -> Filter -> Verify -> Buy",
    offline_success=("WebShop task to buy {label} with {constraints} constraints. Solved by "
                     "{summary}."),
    offline_failure=("WebShop task to buy {label} with {constraints} constraints. Unsolved due "
                     "to {cause}."),
    reflect_rules=(
        "A purchase that missed a size, colour or price constraint calls for a skill about "
        "checking that constraint before buying, in the product category's section.",
    ),
)

CHECKS: tuple[PostCheck, ...] = (bare_buy_now, invented_action, navigation_back)

LAYOUT = text_layout(
    "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
    "Your task is to: {task}\n\n{block}",
    repairs=(navigation_back,),
)

SPEC = EnvSpec(
    name="webshop",
    prompts=PROMPTS,
    memory_environment_tag="Webshop",
    categories=tuple(LABELS),
    category_labels=LABELS,
    classify_task=classify_task,
    bank_category_key="task_specific_skills",
    layout=LAYOUT,
    postchecks=CHECKS,
    action_semantics=SEMANTICS,
    title="WebShop",
    skill_scope="shopping in a web store for a product that meets a request's attributes, "
    "options and price limit, through search[...] and click[...] actions",
    dump_signs=(r"(?m)^Step \S+ \| Action: (search|click)\[", r"\[SEP\]"),
)
