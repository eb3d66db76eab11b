#!/usr/bin/env bash
# Build the search SFT corpus (= skillsft run search "$@"): every stage through Luigi, resumable.
exec "$(dirname "$0")/scripts/run_env.sh" search "$@"
