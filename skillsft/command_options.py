"""The options models each command offers as flags, by the parameter name its tasks use.

The tasks declare the same thing as Luigi parameters (`OptionsParameter(FlattenOptions)`), and
`graph.options_models` reads it from them; this table states it without importing Luigi or
the tasks, so that `skillsft run --help` (which needs every model's flags) costs the options
models' imports and nothing more. tests/cli/test_startup.py checks, for every command, that
the table is exactly what the tasks read, in the same order (the order of the flags).
"""

from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import AggregateOptions
from skillsft.pipeline.stages.distill import DistillOptions
from skillsft.pipeline.stages.evolve.options import EvolveOptions, GateOptions
from skillsft.pipeline.stages.flatten import FlattenOptions
from skillsft.pipeline.stages.memories import MemoryOptions
from skillsft.pipeline.stages.outcome import FailureRule
from skillsft.pipeline.stages.publish_options import CardOptions, HubOptions
from skillsft.pipeline.stages.report_options import ReportOptions

_PUBLISH: dict[str, type] = {"report": ReportOptions, "hub": HubOptions, "card": CardOptions}

COMMAND_OPTIONS: dict[str, dict[str, type]] = {
    "run": {"selection": SelectionOptions, "failure": FailureRule, "memories": MemoryOptions,
            "aggregate": AggregateOptions, "distill": DistillOptions, "flatten": FlattenOptions,
            **_PUBLISH},
    "parse": {"selection": SelectionOptions, "failure": FailureRule},
    "memories": {"memories": MemoryOptions, "failure": FailureRule},
    "aggregate": {"aggregate": AggregateOptions, "failure": FailureRule},
    "distill": {"distill": DistillOptions, "failure": FailureRule},
    "flatten": {"flatten": FlattenOptions, "failure": FailureRule},
    "preferences": {"distill": DistillOptions, "failure": FailureRule},
    "report": {"report": ReportOptions},
    "publish": _PUBLISH,
    "evolve": {"selection": SelectionOptions, "failure": FailureRule, "memories": MemoryOptions,
               "evolve": EvolveOptions, "gate": GateOptions},
}
