#!/usr/bin/env bash
# Build the webshop SFT corpus (= skillsft run webshop "$@"): every stage through Luigi, resumable.
exec "$(dirname "$0")/scripts/run_env.sh" webshop "$@"
