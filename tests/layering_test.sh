#!/usr/bin/env bash
# Layering check (docs/architecture.md, "Layers"): comm <- chunkmem <- optim <- trainer;
# models and data depend on LibTorch only; tokenizer on ICU, JSON and c10 only; chat on
# JSON only; trainer wires everything. Every project #include "x/..." and every Bazel
# dependency "//x..." of a folder must name a folder it may use.
# The check first proves it can fail, on a planted violation.
set -euo pipefail

allowed_for() {
  case "$1" in
    comm) echo "comm" ;;
    chunkmem) echo "comm chunkmem" ;;
    optim) echo "comm chunkmem optim" ;;
    models) echo "models" ;;
    data) echo "data" ;;
    tokenizer) echo "tokenizer" ;;
    chat) echo "chat" ;;
    trainer) echo "comm chunkmem optim models data tokenizer trainer third_party" ;;
  esac
}

# Prints one line per violation found in folder $2 (layer $1) under root $3.
violations() {
  local layer=$1 dir=$2 allowed used f
  allowed=" $(allowed_for "$layer") third_party "
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    if [ "$(basename "$f")" = BUILD ]; then
      # Dependencies only: visibility entries (__pkg__, __subpackages__, //visibility) are not.
      used=$(grep -oE '"//[a-z_]+[:/]?[^"]*"' "$f" | grep -vE '__pkg__|__subpackages__|^"//(visibility|conditions)' |
             sed -E 's|^"//([a-z_]+).*|\1|' || true)
    else
      used=$(grep -oE '^#include "[a-z_]+/' "$f" | sed 's|#include "||; s|/$||' || true)
    fi
    for u in $used; do
      case "$allowed" in *" $u "*) ;; *) echo "$f uses $u, which layer '$layer' may not depend on" ;; esac
    done
  done
}

# 1. The check itself: a planted upward include and BUILD dependency must be caught.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/comm"
echo '#include "trainer/config.h"' > "$tmp/comm/bad.h"
echo 'cc_library(name = "x", deps = ["//optim:lr_schedule"])' > "$tmp/comm/BUILD"
planted=$(violations comm "$tmp/comm" | wc -l)
if [ "$planted" -ne 2 ]; then
  echo "FAIL: the layering check missed planted violations ($planted of 2 found)"
  exit 1
fi

# 2. The real tree.
status=0
checked=0
for layer in comm chunkmem optim models data tokenizer chat trainer; do
  [ -d "$layer" ] || { echo "FAIL: folder $layer missing from test data"; exit 1; }
  out=$(violations "$layer" "$layer")
  checked=$((checked + $(ls "$layer" | wc -l)))
  if [ -n "$out" ]; then
    echo "$out"
    status=1
  fi
done
echo "layering: checked $checked files"
[ $status -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $status
