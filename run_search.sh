#!/usr/bin/env bash
# Build the search SFT corpus: every stage through Luigi, resumable after any failure.
# Configured by the variables in README.md (ROLLOUT_DIR, WORK_DIR, OPENAI_API_KEY, ...);
# flags are passed through and win over variables.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if command -v skillsft >/dev/null 2>&1; then
  exec skillsft run search "$@"
elif [ -x "$here/.venv/bin/skillsft" ]; then
  exec "$here/.venv/bin/skillsft" run search "$@"
fi
echo "run_search.sh: the skillsft command is not installed; run 'pip install -e .' in $here first" >&2
exit 127
