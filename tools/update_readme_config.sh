#!/usr/bin/env bash
# Regenerates the config reference in README.md from the config schema (the field
# table in trainer/config/config_schema.cc). //tests/trainer:config_test fails until this
# has been run after a config key changes.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //trainer:ps_train
ref=$(mktemp)
bazel-bin/trainer/ps_train --config-reference > "$ref"
python3 - "$ref" <<'PY'
import sys
ref = open(sys.argv[1]).read()
readme = open("README.md").read()
begin, end = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"
head, rest = readme.split(begin, 1)
_, tail = rest.split(end, 1)
open("README.md", "w").write(head + begin + ref + end + tail)
PY
rm -f "$ref"
echo "README.md config reference updated"
