"""What `skillsft evolve` lets the user set: how many edits a round applies, which sections
stay as they are, how big each teacher call is, and the gate (the user's evaluator)."""

from dataclasses import dataclass
from typing import Annotated

from skillsft.pipeline.options import Opt


@dataclass(frozen=True)
class EvolveOptions:
    # The "learning rate": SkillOpt applies at most 4 edits per step.
    max_edits: Annotated[int, Opt("most edits one round applies to the bank",
                                  kind="positive_int")] = 4
    protect: Annotated[tuple[str, ...], Opt(
        "a bank section no edit may touch (general, mistakes or a category id); repeat the "
        "flag for several", kind="repeated", metavar="SECTION")] = ()
    memories_per_call: Annotated[int, Opt("new memories one reflect call reads",
                                          kind="positive_int")] = 20
    edits_per_call: int = 6  # edits one reflect or merge answer may hold
    merge_batch: int = 24  # edits one merge call reads, at every level
    max_prompt_chars: int = 24_000  # every rendered reflect or merge prompt stays under this
    rejected_shown: int = 12  # earlier rounds' rejected edits a reflect prompt shows

    @property
    def merge_fan_in(self) -> int:
        """How many merge answers one later-level call combines (their edits fit one batch)."""
        return max(2, self.merge_batch // self.edits_per_call)


@dataclass(frozen=True)
class GateOptions:
    gate_command: Annotated[str, Opt(
        "the evaluator: a command in which {bank} is replaced by a bank's path; it prints one "
        'JSON line {"score": <number>} (default: no gate, every selected edit is applied)',
        metavar="CMD")] = ""
    gate_timeout: Annotated[float, Opt("seconds the evaluator may take for one bank "
                                       "(default 3600)", kind="positive_float",
                                       shaping=False)] = 3600.0
