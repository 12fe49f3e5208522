#!/usr/bin/env bash
# Layering check (docs/architecture.md, "Layers"): base (under every layer) <- comm <-
# chunkmem <- optim <- trainer; models and data depend on LibTorch (and base) only; tokenizer on ICU, JSON and c10 only; chat on
# JSON only; trainer wires everything. Inside trainer, its rooms, lowest first:
# trainer/config <- trainer/engine <- trainer/io <- trainer/logging <- trainer (the loop
# and its components). Every project #include "x/..." and every Bazel dependency "//x..."
# of a folder must name a folder (for trainer: a room) it may use.
# The check first proves it can fail, on a planted violation.
set -euo pipefail

allowed_for() {
  case "$1" in
    base) echo "base" ;;
    comm) echo "base comm" ;;
    chunkmem) echo "base comm chunkmem" ;;
    optim) echo "base comm chunkmem optim" ;;
    models) echo "base models" ;;
    data) echo "base data" ;;
    tokenizer) echo "base tokenizer" ;;
    chat) echo "base chat" ;;
    trainer/config) echo "base comm chunkmem optim models data tokenizer trainer/config" ;;
    trainer/engine) echo "$(allowed_for trainer/config) trainer/engine" ;;
    trainer/io) echo "$(allowed_for trainer/engine) trainer/io" ;;
    trainer/logging) echo "$(allowed_for trainer/io) trainer/logging" ;;
    trainer) echo "$(allowed_for trainer/logging) trainer" ;;
  esac
}

# The unit a path names: trainer's room ("trainer/io/checkpoint.h" -> trainer/io), or
# the top folder ("models/gpt.h" -> models, "trainer/trainer.h" -> trainer).
unit_of() {
  sed -E 's#^(trainer/(config|engine|io|logging))([/:].*)?$#\1#; t; s#^([a-z_]+).*#\1#'
}

# Prints one line per violation found in folder $2 (layer $1).
violations() {
  local layer=$1 dir=$2 allowed used f
  allowed=" $(allowed_for "$layer") third_party "
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    if [ "$(basename "$f")" = BUILD ]; then
      # Dependencies only: visibility entries (__pkg__, __subpackages__, //visibility) are not.
      used=$(grep -oE '"//[a-z_]+[:/]?[^"]*"' "$f" | grep -vE '__pkg__|__subpackages__|^"//(visibility|conditions)' |
             sed -E 's|^"//([^":]*).*|\1|' | unit_of || true)
    else
      used=$(grep -oE '^#include "[a-z_]+/[^"]*' "$f" | sed 's|#include "||' | unit_of || true)
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
echo '#include "trainer/config/config.h"' > "$tmp/comm/bad.h"
echo 'cc_library(name = "x", deps = ["//optim:lr_schedule"])' > "$tmp/comm/BUILD"
mkdir -p "$tmp/trainer/config"
echo '#include "trainer/engine/engine.h"' > "$tmp/trainer/config/bad.h"
echo 'cc_library(name = "x", deps = ["//trainer/io:file_io"])' > "$tmp/trainer/config/BUILD"
planted=$(( $(violations comm "$tmp/comm" | wc -l) + $(violations trainer/config "$tmp/trainer/config" | wc -l) ))
if [ "$planted" -ne 4 ]; then
  echo "FAIL: the layering check missed planted violations ($planted of 4 found)"
  exit 1
fi

# 2. Every package of the source tree (a folder with a BUILD file) that holds C++
# sources is a layer above, or a folder that is no layer: tests, tools, third_party.
# The test's data lists the layers' files only, so the tree is found through them: a
# runfile is a link into the sources (tests/BUILD tags the test "external" so a new
# folder is never hidden behind a cached pass).
layers="base comm chunkmem optim models data tokenizer chat trainer/config trainer/engine trainer/io trainer/logging trainer"
root=$(dirname "$(dirname "$(readlink -f trainer/BUILD)")")
if [ ! -L trainer/BUILD ] || [ ! -f "$root/WORKSPACE" ]; then
  echo "FAIL: cannot find the source tree through trainer/BUILD (not a link into a workspace: $root)"
  exit 1
fi
packages=$(cd "$root" && find . \( -path ./tests -o -path ./tools -o -path ./third_party -o -path './bazel-*' \
             -o -path './.*' \) -prune -o -name BUILD -print | sed -E 's#^\./##; s#/?BUILD$##')
unlisted=""
for d in $packages; do
  [ -n "$d" ] || continue
  ls "$root/$d" | grep -qE '\.(cc|h|cpp|hpp|cu|cuh)$' || continue
  case " $layers " in *" $d "*) ;; *) unlisted+="$d " ;; esac
done
if [ -n "$unlisted" ]; then
  echo "FAIL: packages with sources that are no layer of tests/layering_test.sh (add them to allowed_for, \$layers and the test's data): $unlisted"
  exit 1
fi

# 3. The real tree.
status=0
checked=0
for layer in $layers; do
  [ -d "$layer" ] || { echo "FAIL: folder $layer missing from test data"; exit 1; }
  out=$(violations "$layer" "$layer")
  checked=$((checked + $(ls -p "$layer" | grep -vc /)))
  if [ -n "$out" ]; then
    echo "$out"
    status=1
  fi
done
echo "layering: checked $checked files"
[ $status -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $status
