"""Teacher tests import `tests.support`; make the repository root importable for them.

(If the suite's pytest config gains `pythonpath = ["."]`, the sys.path line becomes a no-op.)
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.support.fixtures import openai_server, server_factory  # noqa: E402, F401
