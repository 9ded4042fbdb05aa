#!/usr/bin/env bash
# Sets up the machine, builds grpo and runs the main job: `grpo rollout` on the bundled default
# model and prompts, writing grpo.db. Extra arguments go to `grpo rollout`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
exec build/cli/grpo rollout "$@"
