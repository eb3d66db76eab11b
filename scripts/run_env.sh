#!/usr/bin/env bash
# Shared body of run_<env>.sh: hand over to `skillsft run <env>` with every argument, from the
# installed command or the repo's own .venv. Configured by the variables in README.md;
# flags win over variables.
set -euo pipefail
env_name="$1"
shift
repo="$(cd "$(dirname "$0")/.." && pwd)"
if command -v skillsft >/dev/null 2>&1; then
  exec skillsft run "$env_name" "$@"
elif [ -x "$repo/.venv/bin/skillsft" ]; then
  exec "$repo/.venv/bin/skillsft" run "$env_name" "$@"
fi
echo "run_$env_name.sh: the skillsft command is not installed; run 'pip install -e .' in $repo first" >&2
exit 127
