"""Task categories per environment, as data: keyword rules, labels and the classifier over them.

A rule table is ordered; the first category whose pattern matches the goal wins, and the
environment's fallback category is used when none does. Keeping the rules as data means a new
environment or a refined rule is a table edit, not a new branch in stage code.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CategoryRule:
    category: str
    pattern: re.Pattern[str]


def rules(*pairs: tuple[str, str]) -> tuple[CategoryRule, ...]:
    """Compile (category, regex) pairs, case-insensitive, in priority order."""
    return tuple(CategoryRule(cat, re.compile(rx, re.IGNORECASE)) for cat, rx in pairs)


def classify(goal: str, table: Sequence[CategoryRule], fallback: str) -> str:
    """Return the first category whose pattern is found in the goal text, else the fallback."""
    for rule in table:
        if rule.pattern.search(goal):
            return rule.category
    return fallback


# ALFWorld goals come from alfworld's goal library, e.g. "put a hot tomato in sinkbasin",
# "heat some egg and put it in countertop", "look at bowl under the desklamp",
# "examine the pen with the desklamp", "put two cellphone in sofa".
ALFWORLD_RULES = rules(
    ("look_at_obj_in_light", r"\blook at\b.*\bunder the\b"),
    ("examine", r"\bexamine\b.*\bwith the\b"),
    ("clean", r"\bclean\b"),
    ("heat", r"\b(hot|heat|heated)\b"),
    ("cool", r"\b(cool|cold|cooled)\b"),
)
ALFWORLD_LABELS = {
    "pick_and_place": "Pick And Place",
    "look_at_obj_in_light": "Look At Object In Light",
    "clean": "Clean",
    "heat": "Heat",
    "cool": "Cool",
    "examine": "Examine",
}

WEBSHOP_RULES = rules(
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
WEBSHOP_LABELS = {
    "apparel": "Apparel",
    "footwear": "Footwear",
    "home_decor": "Home Decor",
    "electronics": "Electronics",
    "accessories": "Accessories",
    "beauty_health": "Beauty Health",
    "other": "Other",
}

SEARCH_RULES = rules(
    ("comparison", r"\b(which|who)\b.*\b(or|first|older|younger|earlier|later|longer|shorter"
                   r"|larger|smaller|more|less|higher|lower|both)\b|\bboth\b|\bsame\b"),
    ("multi_hop_reasoning", r"\b(of the|whose|that|who (directed|wrote|founded|played))\b.*\b"
                            r"(of|by|in|for)\b"),
    ("entity_attribute_lookup", r"^(when|where|how (many|much|old|long|tall)|what year|"
                                r"what is the (population|height|capital|area|date))\b"),
)
SEARCH_LABELS = {
    "direct_retrieval": "Direct Retrieval",
    "multi_hop_reasoning": "Multi-Hop Reasoning",
    "entity_attribute_lookup": "Entity Attribute Lookup",
    "comparison": "Comparison",
}
# QA sources whose questions are multi-hop by construction: the source outranks the wording.
MULTI_HOP_SOURCES = frozenset({"hotpotqa", "2wikimultihopqa", "musique", "bamboogle"})


def classify_alfworld(goal: str, data_source: str | None = None) -> str:
    return classify(goal, ALFWORLD_RULES, "pick_and_place")


def classify_webshop(goal: str, data_source: str | None = None) -> str:
    return classify(goal, WEBSHOP_RULES, "other")


def classify_search(goal: str, data_source: str | None = None) -> str:
    category = classify(goal, SEARCH_RULES, "direct_retrieval")
    if category == "direct_retrieval" and (data_source or "").lower() in MULTI_HOP_SOURCES:
        return "multi_hop_reasoning"
    return category
