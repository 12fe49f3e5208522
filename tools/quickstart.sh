#!/usr/bin/env bash
# The README's first command: set up the machine, generate the quick-start corpus,
# build ps_train and train configs/quickstart.yaml (about two minutes on 2 CPU cores).
# Metrics land in runs/quickstart/metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
[ -f data_cache/quickstart/train.txt ] || python3 tools/make_corpus.py data_cache/quickstart
bazel build //trainer:ps_train
# run.overwrite: a second quick start trains afresh instead of resuming the first.
bazel-bin/trainer/ps_train --config configs/quickstart.yaml --set run.overwrite=true "$@"
