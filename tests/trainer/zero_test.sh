#!/usr/bin/env bash
# ZeRO over chunk groups through the real binary on Gloo (CPU, simulated device tier):
# 2 and 4 ranks at micro-batch b give the per-step losses of one process at p x b
# (fp32: 1e-6 relative), with chunks evicted under a device budget and with gradient
# accumulation; the next block's groups gathered ahead and reductions left in flight while
# backward goes on; bf16 with activation checkpointing and CPU embeddings to bf16 rounding;
# bf16 without accumulation reduces into the compute slots (14/p bytes per parameter);
# bf16 without an fp32 master reduces into bf16 grad chunks, and its sharded checkpoint
# resumes on 2 ranks bitwise and on 1 and 4 within 3e-4, its export equal to ps_export's;
# one process with distributed.force_collectives runs the same path over one rank;
# a traced budget with hybrid Adam on the device; fp16 overflow skips on every rank;
# BERT as plain data parallel does;
# each rank holds 1/p of the model data; a 2-rank checkpoint is sharded (each rank
# writes the parameters it owns, by name, once) and resumes on 1 and on 4 ranks with
# the losses of the run that was not interrupted; a shard that cannot be written fails
# the save on every rank and leaves the earlier checkpoint the newest, still resumable;
# the NVMe tier over 2 ranks (one file per rank) gives the same losses and export bitwise.
set -euo pipefail
source "$TEST_SRCDIR/ps_train/tests/trainer/zero_lib.sh"  # $bin, $tmp, tiny.yaml, run, compare, summary, metric
export_bin="$TEST_SRCDIR/ps_train/tools/ps_export"

echo "== fp32: 2 and 4 ranks match one process at 2x and 4x the micro-batch"
run one4 --set train.micro_batch_size=4
run one8 --set train.micro_batch_size=8
run zero2 --nproc 2
run zero4 --nproc 4
grep -q "2 micro x 1 accumulation x 4 ranks" "$tmp/zero4.log"
compare zero2 one4 1e-6
compare zero4 one8 1e-6
[ "$(metric zero2 group_gathers)" -gt 0 ] && [ "$(metric zero2 group_reductions)" -gt 0 ]
# The next block's groups were gathered ahead (chunk.prefetch_depth 1, the default).
[ "$(metric zero2 group_prefetches)" -gt 0 ] || { echo "no group was gathered ahead"; exit 1; }
# Gradient reductions ran while backward went on (one left in flight at a time).
[ "$(metric zero2 reductions_overlapped)" -gt 0 ] || { echo "no reduction overlapped backward"; exit 1; }

echo "== model data per rank is 1/p of one process's"
one=$(summary one4 model_data_bytes)
two=$(summary zero2 model_data_bytes)
four=$(summary zero4 model_data_bytes)
echo "model data bytes: one process $one, rank 0 of 2 $two, rank 0 of 4 $four"
[ "$((one / 2))" -eq "$two" ] && [ "$((one / 4))" -eq "$four" ]

echo "== one process with distributed.force_collectives runs the collectives (ZeRO groups of one chunk)"
# The path the NCCL world-size-1 check takes on a GPU (tools/gpu_checks.sh nccl1), here on
# Gloo: the same losses as the run without collectives, with gathers and reductions,
# the checkpoint written by the sharded save, and it resumes in a run without them.
run force1 --set train.micro_batch_size=8 --set distributed.force_collectives=true --set checkpoint.every_steps=3
grep -q "rank 0/1 .*connecting (Gloo)" "$tmp/force1.log" || { cat "$tmp/force1.log"; exit 1; }
compare force1 one8 1e-6
[ "$(metric force1 group_gathers)" -gt 0 ] && [ "$(metric force1 group_reductions)" -gt 0 ] ||
  { echo "FAILED: force_collectives gathered or reduced nothing"; exit 1; }
[ "$(summary force1 model_data_bytes)" -eq "$one" ] || { echo "FAILED: one rank holds all the model data"; exit 1; }
"$bin" -c "$tmp/tiny.yaml" --plan --set distributed.force_collectives=true > "$tmp/plan1.txt"
grep -q "ZeRO              rank 0 of 1 holds 8 of 8 chunks" "$tmp/plan1.txt" || { cat "$tmp/plan1.txt"; exit 1; }
run force1_resume --set train.micro_batch_size=8 --set checkpoint.resume="$tmp/force1/checkpoints/step_3"
compare force1_resume one8 1e-6 4
run force1_plain --set train.micro_batch_size=8 --set distributed.force_collectives=true --set chunk.enabled=false
run plain8 --set train.micro_batch_size=8 --set chunk.enabled=false
compare force1_plain plain8 1e-6

echo "== --plan --nproc 2 prints rank 0's share"
"$bin" -c "$tmp/tiny.yaml" --plan --nproc 2 > "$tmp/plan.txt"
grep -q "ZeRO              rank 0 of 2 holds 4 of 8 chunks" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; exit 1; }
# With the NVMe tier the directory must hold both ranks' files (one machine's ranks share it).
rc=0
"$bin" -c "$tmp/tiny.yaml" --plan --nproc 2 --set optimizer.hybrid_adam=false --set chunk.nvme_host_budget_bytes=0 \
  --set chunk.nvme_dir="$tmp/no_such_dir" > "$tmp/plan_nvme.txt" || rc=$?
[ "$rc" -eq 3 ] && grep -q "bytes for the 2 ranks of this machine sharing the directory" "$tmp/plan_nvme.txt" ||
  { cat "$tmp/plan_nvme.txt"; echo "FAILED: --plan --nproc 2 with an unusable nvme_dir: rc $rc"; exit 1; }

echo "== the vertical accumulation schedule is refused for ZeRO before training, naming the key"
if "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/zero_vertical" --nproc 2 --set train.global_batch_size=16 \
    --set train.accumulation_schedule=vertical --set model.activation_checkpointing=true > "$tmp/zero_vertical.log" 2>&1; then
  cat "$tmp/zero_vertical.log"; echo "FAILED: vertical ZeRO ran"; exit 1
fi
grep -q "train.accumulation_schedule: vertical is not built for chunk runs over ranks" "$tmp/zero_vertical.log" ||
  { cat "$tmp/zero_vertical.log"; exit 1; }
if "$bin" -c "$tmp/tiny.yaml" --plan --nproc 2 --set train.global_batch_size=16 \
    --set train.accumulation_schedule=vertical --set model.activation_checkpointing=true > "$tmp/zero_vertical_plan.txt" 2>&1; then
  cat "$tmp/zero_vertical_plan.txt"; echo "FAILED: --plan admitted vertical ZeRO"; exit 1
fi
grep -q "vertical is not built for chunk runs over ranks" "$tmp/zero_vertical_plan.txt" ||
  { cat "$tmp/zero_vertical_plan.txt"; exit 1; }

echo "== evicting under a device budget, with gradient accumulation"
# (No prefetch here: with gathers ahead the plan counts two blocks' groups, which a
# budget this tight refuses, and a budget it admits evicts nothing at this size.)
budget=(--set chunk.device_budget_bytes=1200000 --set train.global_batch_size=16 --set model.n_layer=6
        --set chunk.prefetch_depth=0)
run one_acc "${budget[@]}" --set train.micro_batch_size=4
run zero_acc "${budget[@]}" --nproc 2
grep -q "2 micro x 4 accumulation x 2 ranks" "$tmp/zero_acc.log"
compare zero_acc one_acc 1e-6
[ "$(metric zero_acc evictions)" -gt 0 ] || { echo "rank 0 evicted nothing"; exit 1; }


echo "== a traced device budget (warm-up, then the plan's placement) with hybrid Adam updating on the device"
traced=(--set chunk.device_memory_bytes=9000000 --set model.n_layer=4)
run one_traced "${traced[@]}" --set train.micro_batch_size=4
run zero_traced "${traced[@]}" --nproc 2
compare zero_traced one_traced 1e-6
[ "$(metric zero_traced evictions)" -gt 0 ] && [ "$(metric zero_traced adam_device_chunks)" -gt 0 ] ||
  { echo "FAILED: the traced ZeRO run evicted nothing or updated nothing on the device"; exit 1; }

echo "== bf16, activation checkpointing, CPU embeddings"
mixed=(--set precision.dtype=bf16 --set model.activation_checkpointing=true --set chunk.cpu_embedding=true
       --set model.tie_word_embeddings=false)
run one_mixed "${mixed[@]}" --set train.micro_batch_size=4
run zero_mixed "${mixed[@]}" --nproc 2
compare zero_mixed one_mixed 1e-4

echo "== bf16, one micro-batch per step: gradients reduced into the compute slots (14/p bytes per parameter)"
run one_bf16 --set precision.dtype=bf16 --set train.micro_batch_size=8
run zero_bf16 --set precision.dtype=bf16 --set train.micro_batch_size=4 --nproc 2
grep -q "1 accumulation x 2 ranks" "$tmp/zero_bf16.log"
compare zero_bf16 one_bf16 1e-4
one=$(summary one_bf16 model_data_bytes)
two=$(summary zero_bf16 model_data_bytes)
echo "bf16 model data bytes: one process $one (14 bytes per element), rank 0 of 2 $two"
[ "$((one / 2))" -eq "$two" ] || { echo "FAILED: ZeRO bf16 holds more than half of one process's model data"; exit 1; }
[ "$(metric zero_bf16 group_reductions)" -gt 0 ]

echo "== bf16 weights without an fp32 master: the fp32 reductions added into bf16 grad chunks, 6.03/p bytes"
none=(--set precision.dtype=bf16 --set optimizer.state_dtype=int8 --set optimizer.master_weights=none)
run one_none "${none[@]}" --set train.micro_batch_size=8
run zero_none "${none[@]}" --set train.micro_batch_size=4 --nproc 2 \
  --set checkpoint.every_steps=3 --set checkpoint.export_hf=true
compare zero_none one_none 3e-4
one_n=$(summary one_none model_data_bytes)
two_n=$(summary zero_none model_data_bytes)
echo "no-master model data bytes: one process $one_n, rank 0 of 2 $two_n"
[ "$((one_n / 2))" -eq "$two_n" ] || { echo "FAILED: ZeRO without a master holds more than half of one process's"; exit 1; }
echo "== ... its sharded checkpoint resumes on 2 ranks bitwise, on 1 and 4 ranks within 3e-4; its export is the checkpoint's"
# Rounding noise is a function of run.seed, the chunk and the update count, not of the
# ranks, so other rank counts differ only by the fp32 reduction order.
ckpt_n="$tmp/zero_none/checkpoints/step_3"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["saved_by_ranks"] == 2, s["saved_by_ranks"]' \
  "$ckpt_n/state.json"
run none_resume2 "${none[@]}" --set train.micro_batch_size=4 --nproc 2 --set checkpoint.resume="$ckpt_n"
compare none_resume2 zero_none 0 4
run none_resume1 "${none[@]}" --set train.micro_batch_size=8 --set checkpoint.resume="$ckpt_n"
compare none_resume1 zero_none 3e-4 4
run none_resume4 "${none[@]}" --set train.micro_batch_size=2 --nproc 4 --set checkpoint.resume="$ckpt_n"
compare none_resume4 zero_none 3e-4 4
# The run's export gathers the bf16 weights over the ranks (GatherGroups: at_end is off,
# so the export does not read a final checkpoint); ps_export reads step 6's shards (a
# periodic checkpoint) from disk. The two folders' weights are the same bytes.
"$export_bin" --checkpoint "$tmp/zero_none/checkpoints/step_6" --out "$tmp/none_export" > "$tmp/none_export.log" 2>&1 ||
  { cat "$tmp/none_export.log"; exit 1; }
cmp "$tmp/zero_none/hf/model.safetensors" "$tmp/none_export/model.safetensors" ||
  { echo "FAILED: the 2-rank export without a master differs from its checkpoint's"; exit 1; }

echo "== bf16 moments (optimizer.state_dtype): sharded like fp32 ones, 10/p bytes per parameter"
run one_bf16s --set precision.dtype=bf16 --set optimizer.state_dtype=bf16 --set train.micro_batch_size=8
run zero_bf16s --set precision.dtype=bf16 --set optimizer.state_dtype=bf16 --set train.micro_batch_size=4 --nproc 2
compare zero_bf16s one_bf16s 1e-4
[ "$(( $(summary one_bf16s model_data_bytes) * 14 ))" -eq "$(( one * 10 ))" ] &&
  [ "$(( $(summary one_bf16s model_data_bytes) / 2 ))" -eq "$(summary zero_bf16s model_data_bytes)" ] ||
  { echo "FAILED: bf16 moments are not 10 bytes per element, or ZeRO holds more than half of them"; exit 1; }

echo "== int8 moments: sharded too (codes and block scales per owned chunk)"
run one_i8 --set precision.dtype=bf16 --set optimizer.state_dtype=int8 --set train.micro_batch_size=8
run zero_i8 --set precision.dtype=bf16 --set optimizer.state_dtype=int8 --set train.micro_batch_size=4 --nproc 2
compare zero_i8 one_i8 1e-4
[ "$(( $(summary one_i8 model_data_bytes) / 2 ))" -eq "$(summary zero_i8 model_data_bytes)" ] ||
  { echo "FAILED: ZeRO holds more than half of the int8 run's model data"; exit 1; }

echo "== fp16: overflowing steps are skipped on every rank, the compute slots restored from the masters"
# A loss scale of 2^24 overflows in the first 5 steps of both runs (2^24 down to 2^20);
# step 6's loss is that of the initial weights, restored after every skip.
fp16=(--set precision.dtype=fp16 --set precision.initial_scale_power=24 --set precision.hysteresis=1)
run one_fp16 "${fp16[@]}" --set train.micro_batch_size=8
run zero_fp16 "${fp16[@]}" --set train.micro_batch_size=4 --nproc 2
compare zero_fp16 one_fp16 1e-5
[ "$(metric zero_fp16 skipped_steps)" -ge 5 ] && grep -q "rank 1\] gradient overflow" "$tmp/zero_fp16.log" ||
  { echo "FAILED: the fp16 ZeRO run did not skip on every rank"; exit 1; }

echo "== BERT (masked LM): ZeRO chunks give the losses of plain data parallel on the same ranks"
# (Each rank averages over its own masked tokens, so p ranks are compared with p ranks.)
bert=(--set model.type=bert --set model.vocab_size=260 --nproc 2)
run plain_bert "${bert[@]}" --set chunk.enabled=false
run zero_bert "${bert[@]}"
compare zero_bert plain_bert 1e-6
[ "$(metric zero_bert group_reductions)" -gt 0 ]

echo "== a 2-rank checkpoint is sharded and resumes on 1 and on 4 ranks"
run zero_ckpt --nproc 2 --set checkpoint.every_steps=3
ckpt="$tmp/zero_ckpt/checkpoints/step_3"
[ -f "$ckpt/state.json" ]
compare zero_ckpt zero2 1e-6
python3 - "$ckpt" <<'PY'
import json, os, struct, sys
folder = sys.argv[1]
state = json.load(open(os.path.join(folder, "state.json")))
assert state["saved_by_ranks"] == 2, state["saved_by_ranks"]
expected = {"model.rank0.safetensors", "model.rank1.safetensors", "optimizer.rank0.safetensors",
            "optimizer.rank1.safetensors", "rng.safetensors"}
assert set(state["files"]) == expected, sorted(state["files"])
assert not os.path.exists(os.path.join(folder, "model.safetensors"))
def names(f):
    with open(os.path.join(folder, f), "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        return {k for k in json.loads(h.read(n)) if k != "__metadata__"}
m0, m1 = names("model.rank0.safetensors"), names("model.rank1.safetensors")
assert m0 and m1 and not (m0 & m1), (m0 & m1)
assert m0 | m1 == set(state["adam_steps"]), sorted(set(state["adam_steps"]) ^ (m0 | m1))
o = names("optimizer.rank0.safetensors") | names("optimizer.rank1.safetensors")
assert o == {f"optimizer.{k}.{n}" for k in ("exp_avg", "exp_avg_sq") for n in m0 | m1}
print(f"shards: rank 0 {len(m0)} tensors, rank 1 {len(m1)}, disjoint, together every parameter")
PY
run resume1 --set train.micro_batch_size=4 --set checkpoint.resume="$ckpt"
run resume4 --set train.micro_batch_size=1 --set checkpoint.resume="$ckpt" --nproc 4
grep -q "resumed from" "$tmp/resume4.log"
compare resume1 zero_ckpt 1e-6 4
compare resume4 zero_ckpt 1e-6 4

echo "== a shard that cannot be written: the save fails on every rank, the earlier checkpoint stays"
cp -r "$tmp/zero_ckpt" "$tmp/zero_fail"
rm -rf "$tmp/zero_fail/checkpoints/step_6"
# A 100 KiB file-size limit (SIGXFSZ ignored, so writes fail with EFBIG) for the
# resumed run: the shards of step 6 are larger, the logs are not.
if (ulimit -f 100; trap '' XFSZ; exec "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/zero_fail" --nproc 2 \
      --set checkpoint.every_steps=3 --set checkpoint.resume=auto) > "$tmp/zero_fail.log" 2>&1; then
  cat "$tmp/zero_fail.log"; echo "FAILED: the save past the file-size limit succeeded"; exit 1
fi
grep -q "checkpoint step 6 (2 ranks) failed: rank" "$tmp/zero_fail.log" || { cat "$tmp/zero_fail.log"; exit 1; }
[ ! -e "$tmp/zero_fail/checkpoints/step_6" ] && [ ! -e "$tmp/zero_fail/checkpoints/.tmp_step_6" ] ||
  { ls -la "$tmp/zero_fail/checkpoints"; echo "FAILED: a partial step 6 is left"; exit 1; }
run zero_fail --nproc 2 --set checkpoint.every_steps=3 --set checkpoint.resume=auto
grep -q "resumed from .*step_3" "$tmp/zero_fail.log"
compare zero_fail zero_ckpt 1e-6 4

echo "== the NVMe tier over 2 ranks: each rank's own file in one directory, the same losses bitwise, the HF export equal"
mkdir -p "$tmp/nvme"
run zero2_ram --nproc 2 --set optimizer.hybrid_adam=false --set checkpoint.export_hf=true
run zero2_nvme --nproc 2 --set optimizer.hybrid_adam=false --set checkpoint.export_hf=true \
  --set chunk.nvme_dir="$tmp/nvme" --set chunk.nvme_host_budget_bytes=0
compare zero2_nvme zero2_ram 0
[ "$(metric zero2_nvme nvme_written_bytes)" -gt 0 ] || { echo "FAILED: the tier was not used"; exit 1; }
cmp "$tmp/zero2_nvme/hf/model.safetensors" "$tmp/zero2_ram/hf/model.safetensors" ||
  { echo "FAILED: the export's gather differs with the tier"; exit 1; }
[ -z "$(ls -A "$tmp/nvme")" ] || { ls -la "$tmp/nvme"; echo "FAILED: the tier's files outlived the run"; exit 1; }
echo PASS
