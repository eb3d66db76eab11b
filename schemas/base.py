"""Model bases shared by every schema module.

Two flavours exist on purpose: what skillsft writes is strict (an unknown key is a bug on our
side, so it must fail loudly), while readers of third-party files use tolerant validators on
the specific shapes those files are known to take (see memory.py).
"""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A record we write: unknown keys are rejected, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OpenModel(BaseModel):
    """A record we read from elsewhere: unknown keys are kept, not rejected."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
