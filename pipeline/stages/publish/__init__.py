"""Stage 5: export the corpus as Hub configs (export.py and the configs it writes), write the
dataset card (card.py, card_usage.py) and commit it all to the Hub (hub.py).

The names callers use are re-exported here, so `skillsft.pipeline.stages.publish` keeps
working for the CLI, the Luigi task and the tests.
"""

from skillsft.pipeline.stages.publish.export import (
    LocalExport,
    PublishOptions,
    export_local,
)
from skillsft.pipeline.stages.publish.hub import PublishError, PublishResult, publish

__all__ = ["LocalExport", "PublishError", "PublishOptions", "PublishResult", "export_local",
           "publish"]
