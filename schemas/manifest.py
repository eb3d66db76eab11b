"""The manifest beside every stage output (`.skillsft/<output>.manifest.json`).

Written last, after the output, by `tasks.base.StageTask.run`; read by the target (is this
output still the one the current parameters ask for?), the summary, the report and publish.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Manifest(BaseModel):
    # Older manifests lack `options`; newer writers may add keys: both still read.
    model_config = ConfigDict(extra="allow")

    fingerprint: str
    task: str = ""
    stage: str = ""
    params: dict[str, Any] = Field(default_factory=dict)  # the shaping values, by option name
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)  # every option, by object
    versions: dict[str, str] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    teacher: list[dict[str, Any]] = Field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU while the stage ran (0 in older manifests)
    peak_rss_mib: float = 0.0  # the process's memory high-water mark when the stage ended
    written_at: str = ""
