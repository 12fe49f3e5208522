#!/usr/bin/env bash
# The README's first command: set up the machine, generate the quick-start corpus,
# build ps_train and train configs/quickstart.yaml (about two minutes on 2 CPU cores).
# Metrics land in runs/quickstart/metrics.jsonl. A first argument ending in .yaml trains
# that config instead (configs/bert-quickstart.yaml: the BERT quick start); the other
# arguments go to ps_train.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
[ -f data_cache/quickstart/train.txt ] || python3 tools/make_corpus.py data_cache/quickstart
bazel build //trainer:ps_train
# run.overwrite: a second quick start trains afresh instead of resuming the first.
config=configs/quickstart.yaml
if [[ "${1:-}" == *.yaml ]]; then
  config=$1
  shift
fi
bazel-bin/trainer/ps_train --config "$config" --set run.overwrite=true "$@"
