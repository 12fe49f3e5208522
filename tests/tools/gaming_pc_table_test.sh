#!/usr/bin/env bash
# The README's gaming-PC tables (what `--plan` admits per model and mode on a 24 GiB card
# with 64 GiB of RAM and an 8 GiB card with 32 GiB) are, verbatim, what
# tools/gaming_pc_table.sh prints with this build's ps_train: a change to the plan that
# moves a verdict fails here until the README is regenerated.
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$root/tools/gaming_pc_table.sh" "$root/trainer/ps_train" > "$TEST_TMPDIR/table.md"
grep -q '^| llama-3.1-8b | ' "$TEST_TMPDIR/table.md" || { cat "$TEST_TMPDIR/table.md"; fail "no table printed"; }
python3 - "$TEST_TMPDIR/table.md" "$root/README.md" <<'PY' || fail "the README's tables differ from tools/gaming_pc_table.sh's output (above); regenerate them"
import sys
table = open(sys.argv[1]).read().strip()
readme = open(sys.argv[2]).read()
if table not in readme:
    print(table)
    sys.exit(1)
PY
echo "PASS: the README's gaming-PC tables are the plan's"
