#!/usr/bin/env bash
# Build the alfworld SFT corpus (= skillsft run alfworld "$@"): every stage through Luigi, resumable.
exec "$(dirname "$0")/scripts/run_env.sh" alfworld "$@"
