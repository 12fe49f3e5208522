// Chunk runtime vs plain LibTorch training (docs/chunkmem.md, invariant 6): the same
// losses with every chunk resident, with a simulated device so small that chunks are
// evicted and fetched every step (Belady and LRU), with gradient accumulation and with
// evaluation; a model whose data is many times the device budget trains while the
// device chunk bytes stay within it; bf16 chunks track fp32 within a stated tolerance.
#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <iterator>

#include "chunkmem/chunk_store.h"
#include "optim/cpu_adam.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/chunk_setup.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

using testing::TempDir;

std::string WriteCorpus() { return testing::WriteRepeatedText("corpus.txt", 400); }

// 5 blocks of n_embd 64: a block is ~50k parameters; chunks of 20k elements split it in 3,
// so there are 16 compute chunks of 80 kB.
Config Tiny(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"data.train_path=" + WriteCorpus(), "data.valid_path=" + WriteCorpus(),
                                        "run.output_dir=" + TempDir() + "/" + name, "run.threads=1",
                                        "run.overwrite=true", "checkpoint.resume=never", "checkpoint.at_end=false"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {n_layer: 5, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256}\n"
      "data: {format: text, seq_len: 32}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 20, eval_steps: 2, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.1}\n"
      "lr_schedule: {type: cosine, warmup_steps: 4, min_lr: 3.0e-4}\n"
      "logging: {level: warn, log_every: 1}\n",
      "test.yaml", overrides, ProcessEnv());
}

Config Chunked(const std::string& name, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"chunk.enabled=true", "chunk.size_elements=20000"});
  return Tiny(name, extra);
}

void CheckSameLosses(const TrainResult& a, const TrainResult& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i]);
    CHECK(std::abs(a.losses[i] - b.losses[i]) <= 1e-6 * std::abs(a.losses[i]));
  }
}

TEST_CASE("fp32, every chunk resident: same losses as plain LibTorch", "[chunk][parity]") {
  const TrainResult plain = Train(Tiny("plain"));
  const TrainResult chunked = Train(Chunked("resident"));
  CheckSameLosses(plain, chunked);
  CHECK(chunked.evictions == 0);
  // Unlimited simulated device: after warm-up every chunk updates on the device path.
  CHECK(chunked.adam_device_chunks == 16);
  CHECK(chunked.adam_host_chunks == 0);
  CHECK(std::abs(plain.final_eval_loss - chunked.final_eval_loss) <= 1e-6 * plain.final_eval_loss);
  CHECK(plain.losses.back() < 0.6 * plain.losses.front());
}

TEST_CASE("fp32, device budget below 1/3 of the compute chunks: evicted every step, same losses", "[chunk][parity]") {
  const TrainResult plain = Train(Tiny("plain_e"));
  // Compute chunks are 20000 x 4 bytes; 4 fit: a block (3 chunks) plus the tied
  // embedding's chunk, which stays in use through backward.
  for (const char* policy : {"opt", "lru"}) {
    INFO("eviction " << policy);
    const TrainResult evicted = Train(Chunked(std::string("evict_") + policy,
                                              {"chunk.device_budget_bytes=320000", std::string("chunk.eviction=") + policy}));
    CheckSameLosses(plain, evicted);
    CHECK(3 * evicted.device_budget_bytes < evicted.compute_chunk_bytes);
    CHECK(evicted.evictions >= 20 * 5);  // several per step
    CHECK(evicted.peak_device_chunk_bytes <= evicted.device_budget_bytes);
    CHECK(evicted.peak_device_chunk_bytes == 320000);
    if (std::string(policy) == "opt") CHECK(evicted.prefetch_hits > 0);  // prefetch needs the trace
  }
  // The device tier as a pre-reserved arena (chunk.device_arena): same losses, same
  // budget, with the hybrid optimizer's chunks placed in it too when there is margin.
  const TrainResult arena = Train(Chunked("evict_arena", {"chunk.device_budget_bytes=320000", "chunk.device_arena=true"}));
  CheckSameLosses(plain, arena);
  CHECK(arena.peak_device_chunk_bytes <= 320000);
  CHECK(arena.evictions >= 20 * 5);
  const TrainResult arena_split =
      Train(Chunked("split_arena", {"chunk.device_budget_bytes=1200000", "chunk.device_arena=true"}));
  CheckSameLosses(plain, arena_split);
  CHECK(arena_split.adam_device_chunks > 0);
  // Prefetch copies on a worker thread, overlapping compute: same losses.
  const TrainResult async = Train(Chunked("evict_async", {"chunk.device_budget_bytes=320000", "chunk.async_prefetch=true"}));
  CheckSameLosses(plain, async);
  CHECK(async.prefetch_hits > 0);
  CHECK(async.peak_device_chunk_bytes <= 320000);
  const TrainResult async_arena = Train(Chunked(
      "evict_async_arena", {"chunk.device_budget_bytes=320000", "chunk.async_prefetch=true", "chunk.device_arena=true"}));
  CheckSameLosses(plain, async_arena);
  // Prefetch off: same losses, no hits.
  const TrainResult no_prefetch = Train(Chunked("evict_noprefetch", {"chunk.device_budget_bytes=320000",
                                                                      "chunk.prefetch_depth=0"}));
  CheckSameLosses(plain, no_prefetch);
  CHECK(no_prefetch.prefetch_hits == 0);
}

TEST_CASE("activation checkpointing through evicting chunks: same losses as plain", "[chunk][parity][checkpoint]") {
  const TrainResult plain = Train(Tiny("ckpt_plain"));
  const TrainResult chunked =
      Train(Chunked("ckpt_chunk", {"model.activation_checkpointing=true", "chunk.device_budget_bytes=320000"}));
  CheckSameLosses(plain, chunked);
  CHECK(chunked.evictions > 0);
  CHECK(chunked.peak_device_chunk_bytes <= chunked.device_budget_bytes);
}

// Per-step deltas of a cumulative counter in metrics.jsonl (chunk runs log every step).
std::vector<double> StepDeltas(const std::string& metrics_path, const std::string& key);
double JsonNumber(const std::string& line, const std::string& key);

TEST_CASE("gradient accumulation through chunks matches plain accumulation: resident, evicting, traced",
          "[chunk][parity][accum]") {
  const std::vector<std::string> accum = {"train.micro_batch_size=1", "train.global_batch_size=4",
                                          "train.max_steps=8"};
  const TrainResult plain = Train(Tiny("accum_plain", accum));
  const std::vector<std::pair<std::string, std::vector<std::string>>> budgets = {
      {"resident", {}},
      {"evicting", {"chunk.device_budget_bytes=320000"}},  // only the chunks in use fit: per-parameter fallback
      {"evicting_room", {"chunk.device_budget_bytes=560000"}},  // room for staging slots
      {"evicting_async", {"chunk.device_budget_bytes=560000", "chunk.async_prefetch=true"}},
      {"traced", {"chunk.device_memory_bytes=3800000", "chunk.device_mem_ratio=1.0"}}};
  for (const auto& [name, extra] : budgets) {
    INFO(name);
    auto args = accum;
    args.insert(args.end(), extra.begin(), extra.end());
    const Config c = Chunked("accum_" + name, args);
    const TrainResult r = Train(c);
    CheckSameLosses(plain, r);
    const std::string metrics = c.run.output_dir + "/metrics.jsonl";
    const auto flushes = StepDeltas(metrics, "grad_flushes");
    const auto fallbacks = StepDeltas(metrics, "grad_host_fallbacks");
    const auto copies = StepDeltas(metrics, "d2h_copies");
    const auto evictions = StepDeltas(metrics, "evictions");
    REQUIRE(flushes.size() == 8);
    for (size_t s = 0; s < flushes.size(); ++s) {
      INFO("step " << s + 1 << ": " << copies[s] << " device-to-host copies, " << evictions[s] << " evictions, "
                   << flushes[s] << " grad flushes, " << fallbacks[s] << " per-parameter grad copies");
      // Every device-to-host copy is an eviction, a flush (at most one per chunk and
      // micro-batch: 4 x 16) or a fallback.
      CHECK(copies[s] == evictions[s] + flushes[s] + fallbacks[s]);
      CHECK(flushes[s] <= 4 * 16);
      if (name == "resident" && s >= 1) CHECK(copies[s] == 0);  // grads pinned with device-updated Adam state
      if (name == "evicting_room" || name == "evicting_async") CHECK(fallbacks[s] == 0);
    }
    if (name == "resident") CHECK(r.adam_device_chunks == 16);
    if (name == "evicting") CHECK(fallbacks[1] > 0);  // the budget-starved path is exercised too
    CHECK(r.peak_device_chunk_bytes <= r.device_budget_bytes);
  }
}

// Sum of a per-step series from step `from` (0-based) on.
double SumFrom(const std::vector<double>& v, size_t from) {
  double sum = 0.0;
  for (size_t s = from; s < v.size(); ++s) sum += v[s];
  return sum;
}

TEST_CASE("vertical accumulation: each chunk fetched and flushed once per step, losses as plain vertical and "
          "horizontal", "[chunk][parity][accum][vertical]") {
  const std::vector<std::string> accum = {"train.micro_batch_size=1", "train.global_batch_size=4", "train.max_steps=6",
                                          "model.activation_checkpointing=true"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), accum.begin(), accum.end());
    return extra;
  };
  const std::string vertical = "train.accumulation_schedule=vertical";
  // 11 of the 16 compute chunks' bytes: room for a block's chunks, their staging slots
  // and the tied embedding's; the other compute chunks are evicted within a step.
  const std::string budget = "chunk.device_budget_bytes=880000";
  const TrainResult plain_h = Train(Tiny("vert_plain_h", accum));
  const TrainResult plain_v = Train(Tiny("vert_plain_v", with({vertical})));
  const Config hc = Chunked("vert_chunk_h", with({budget}));
  const Config vc = Chunked("vert_chunk_v", with({budget, vertical}));
  const TrainResult chunk_h = Train(hc), chunk_v = Train(vc);
  // The same sums as plain vertical training; horizontal adds the micro-batches'
  // gradients in another order, equal to fp32 rounding (compounded over the steps).
  CheckSameLosses(plain_v, chunk_v);
  REQUIRE(plain_h.losses.size() == chunk_v.losses.size());
  for (size_t i = 0; i < plain_h.losses.size(); ++i) {
    INFO("step " << i + 1 << ": horizontal " << plain_h.losses[i] << ", vertical " << chunk_v.losses[i]);
    CHECK(std::abs(plain_h.losses[i] - chunk_v.losses[i]) <= 1e-4 * plain_h.losses[i]);
  }
  CHECK(chunk_v.peak_device_chunk_bytes <= chunk_v.device_budget_bytes);
  // After warm-up: horizontally each compute chunk comes back once per micro-batch
  // (and the gradients leave once per chunk and micro-batch); vertically once per step.
  auto per_step = [](const Config& c, const char* key) {
    return SumFrom(StepDeltas(c.run.output_dir + "/metrics.jsonl", key), 2) / 4.0;  // steps 3-6
  };
  const double fetches_h = per_step(hc, "fetches"), fetches_v = per_step(vc, "fetches");
  const double flushes_h = per_step(hc, "grad_flushes"), flushes_v = per_step(vc, "grad_flushes");
  INFO("fetches per step: horizontal " << fetches_h << ", vertical " << fetches_v << "; grad flushes: horizontal "
                                       << flushes_h << ", vertical " << flushes_v);
  CHECK(fetches_h > 16);          // evicted: chunks come back within the step
  CHECK(fetches_v * 2.5 < fetches_h);
  CHECK(fetches_v <= 2 * 16);     // at most once in forward and once in backward
  CHECK(flushes_h >= 3 * 16);     // 16 chunks x 4 micro-batches, less what stays pinned
  CHECK(flushes_v == 16);         // once per chunk
  CHECK(per_step(vc, "grad_host_fallbacks") == 0);
  // Dropout (masks drawn block-major, restored in each recompute) and an untied LM head:
  // chunks equal plain vertical training still.
  const std::vector<std::string> untied = {vertical, "model.dropout=0.1", "model.tie_word_embeddings=false"};
  CheckSameLosses(Train(Tiny("vert_plain_drop", with(untied))), Train(Chunked("vert_chunk_drop", with({budget, untied[0],
                                                                                                    untied[1], untied[2]}))));
  // Embeddings on the host outside the chunks (fp32 leaves, as in the plain run).
  CheckSameLosses(Train(Tiny("vert_plain_untied", with({vertical, "model.tie_word_embeddings=false"}))),
                  Train(Chunked("vert_cpu_emb", with({budget, vertical, "model.tie_word_embeddings=false",
                                                      "chunk.cpu_embedding=true"}))));
  // fp16 with the loss scaler (the scaled sum of the micro-batches' losses): no overflow
  // at a moderate scale, within fp16's tolerance of fp32 (the fp16 test's 5%).
  const TrainResult fp16 = Train(Chunked("vert_fp16", with({budget, vertical, "precision.dtype=fp16",
                                                            "precision.initial_scale_power=8"})));
  CHECK(fp16.skipped_steps == 0);
  REQUIRE(fp16.losses.size() == plain_v.losses.size());
  for (size_t i = 0; i < fp16.losses.size(); ++i) {
    INFO("step " << i + 1 << ": fp32 " << plain_v.losses[i] << ", fp16 " << fp16.losses[i]);
    CHECK(std::abs(fp16.losses[i] - plain_v.losses[i]) <= 0.05 * plain_v.losses[i]);
  }
  // bf16 chunks (fp32 gradient chunks, as with any accumulation): within bf16's
  // tolerance of fp32 (the bf16 test's 5% per step).
  const TrainResult bf16 = Train(Chunked("vert_bf16", with({budget, vertical, "precision.dtype=bf16"})));
  REQUIRE(bf16.losses.size() == plain_v.losses.size());
  for (size_t i = 0; i < bf16.losses.size(); ++i) {
    INFO("step " << i + 1 << ": fp32 " << plain_v.losses[i] << ", bf16 " << bf16.losses[i]);
    CHECK(std::abs(bf16.losses[i] - plain_v.losses[i]) <= 0.05 * plain_v.losses[i]);
  }
}

TEST_CASE("vertical accumulation: what it refuses", "[chunk][vertical]") {
  // A block's chunks keep their fp32 staging slots open through its micro-batches: the
  // plan counts them in the working set (320000 bytes of compute chunks, as many of
  // slots), and the run refuses before training what the plan refuses.
  const std::vector<std::string> vertical = {"train.micro_batch_size=1", "train.global_batch_size=4",
                                             "model.activation_checkpointing=true",
                                             "train.accumulation_schedule=vertical", "chunk.device_budget_bytes=560000"};
  CHECK(PlanRun(Chunked("vert_plan_h", {vertical[0], vertical[1], vertical[2], vertical[4]}), at::kCPU).plan.fits);
  const Config refused = Chunked("vert_plan_v", vertical);
  CHECK_FALSE(PlanRun(refused, at::kCPU).plan.fits);
  CHECK_THROWS_WITH(Train(refused), Catch::Contains("80000 bytes (0.08 MiB) short of the largest block working set of "
                                                    "640000 bytes"));
  CHECK_THROWS_WITH(Tiny("vert_no_ckpt", {"train.accumulation_schedule=vertical"}),
                    Catch::Contains("train.accumulation_schedule: vertical needs model.activation_checkpointing"));
  CHECK_THROWS_WITH(Tiny("vert_bert", {"train.accumulation_schedule=vertical", "model.activation_checkpointing=true",
                                       "model.type=bert", "model.vocab_size=300"}),
                    Catch::Contains("use horizontal with BERT"));
}

TEST_CASE("host pool: reserved once at the plan's host figure, used within it; same losses", "[chunk][pool]") {
  // Accumulating and evicting: fp32 grad chunks on the host, gradient landing buffers
  // borrowed from the pool, compute chunks leaving and coming back every step.
  const std::vector<std::string> accum = {"train.micro_batch_size=1", "train.global_batch_size=4",
                                          "train.max_steps=6"};
  auto args = accum;
  args.push_back("chunk.device_budget_bytes=560000");
  const Config c = Chunked("pool", args);
  const TrainResult r = Train(c);
  CheckSameLosses(Train(Tiny("pool_plain", accum)), r);
  const RunPlan run_plan = PlanRun(c, at::kCPU);
  const chunkmem::TierPlan& plan = run_plan.plan.tiers;
  // The plan's host figure (less parameters outside the chunks), plus the arena's
  // 64-byte rounding of each payload the pool may hold.
  CHECK(r.host_pool_bytes >= plan.host_chunk_bytes);
  CHECK(r.host_pool_bytes <= plan.host_chunk_bytes + chunkmem::HostPoolSlackBytes(run_plan.plan.layout.num_chunks()));
  // Every chunk's slot from start-up on, and landing buffers in the scratch room.
  const int64_t slots = plan.host_chunk_bytes - plan.host_scratch_bytes;
  CHECK(plan.host_scratch_bytes > 0);
  CHECK(r.peak_host_pool_used_bytes > slots);
  CHECK(r.peak_host_pool_used_bytes <= plan.host_chunk_bytes);
  std::ifstream metrics(c.run.output_dir + "/metrics.jsonl");
  int steps = 0;
  double last_peak = 0.0;
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"evictions\"") == std::string::npos) continue;
    ++steps;
    CHECK(JsonNumber(line, "host_pool_bytes") == r.host_pool_bytes);  // never grows
    CHECK(JsonNumber(line, "peak_host_pool_used_bytes") <= r.peak_host_pool_used_bytes);
    // Resident memory: a peak that only grows (the kernel's high-water mark), within
    // the call's, and resident = anonymous + file-backed (this process maps no shared
    // memory). With slack: the kernel's RSS counters are approximate (host_memory_test).
    const double rss = JsonNumber(line, "host_rss_bytes"), peak = JsonNumber(line, "host_peak_rss_bytes");
    const double anon = JsonNumber(line, "host_anon_bytes"), file = JsonNumber(line, "host_file_bytes");
    const double slack = 4 << 20;
    CHECK(peak >= rss);
    CHECK(peak >= last_peak - slack);
    CHECK(peak <= r.peak_rss_bytes + slack);
    CHECK(anon > 0);
    CHECK(file > 0);  // the binary and its libraries
    CHECK(std::abs(anon + file - rss) <= 4 * slack);
    last_peak = peak;
  }
  CHECK(steps == 6);
  CHECK(r.startup_peak_rss_bytes > 0);
  CHECK(r.startup_peak_rss_bytes <= r.peak_rss_bytes + (4 << 20));
  CHECK(r.evictions > 0);
}

// #25 §3 on the simulated tier: a scaled-down run in each mode of the gaming-PC table
// (fp32, bf16 and int8 moments; int8 without an fp32 master; fp32 state through the NVMe
// tier) keeps to the device budget and to the host figure its plan reserved, evicting
// and with part of its optimizer state on the device; the smaller state shows in the
// bytes. Without a master the device update's scratch (its rounding temporaries) leaves
// this toy no budget that both evicts and holds state: one run of each. (LoRA's:
// lora_train_test.)
TEST_CASE("every optimizer state mode keeps to its device budget and its plan's host figure",
          "[chunk][state_dtype][pool]") {
  const std::string nvme_dir = TempDir() + "/budget_nvme_dir";
  std::filesystem::create_directories(nvme_dir);
  struct Mode {
    std::string name;
    std::vector<std::string> overrides;
    int64_t device_budget_bytes;
    bool evicts, state_on_device, smaller_than_last;  // model data below the mode before it
  };
  const std::vector<Mode> modes = {
      {"fp32", {"optimizer.state_dtype=fp32"}, 760000, true, true, false},
      {"bf16", {"optimizer.state_dtype=bf16"}, 760000, true, true, true},
      {"int8", {"optimizer.state_dtype=int8"}, 760000, true, true, true},
      {"none_evicting", {"optimizer.state_dtype=int8", "optimizer.master_weights=none"}, 500000, true, false, true},
      {"none_device_state", {"optimizer.state_dtype=int8", "optimizer.master_weights=none"}, 2000000, false, true, false},
      {"nvme", {"chunk.nvme_dir=" + nvme_dir, "chunk.nvme_host_budget_bytes=0"}, 760000, true, true, false},
  };
  int64_t last_model_bytes = std::numeric_limits<int64_t>::max();
  for (const Mode& m : modes) {
    INFO("mode " << m.name);
    std::vector<std::string> overrides = {"precision.dtype=bf16", "train.max_steps=6",
                                          "chunk.device_budget_bytes=" + std::to_string(m.device_budget_bytes)};
    overrides.insert(overrides.end(), m.overrides.begin(), m.overrides.end());
    const Config c = Chunked("budget_" + m.name, overrides);
    const RunPlan plan = PlanRun(c, at::kCPU);
    REQUIRE(plan.plan.fits);
    if (m.name == "nvme") CHECK(plan.plan.tiers.nvme_chunks > 0);
    const TrainResult r = Train(c);
    CHECK((r.evictions > 0) == m.evicts);
    if (m.state_on_device) {
      CHECK(plan.plan.tiers.device_optimizer_chunks > 0);  // the margin holds some state: both paths run
      CHECK(r.adam_device_chunks > 0);
    }
    CHECK(r.peak_device_chunk_bytes <= m.device_budget_bytes);
    CHECK(r.peak_host_pool_used_bytes <= plan.plan.tiers.host_chunk_bytes);
    CHECK(r.host_pool_bytes <= plan.plan.tiers.host_chunk_bytes + chunkmem::HostPoolSlackBytes(plan.plan.layout.num_chunks()));
    if (m.smaller_than_last) CHECK(r.model_data_bytes < last_model_bytes);
    last_model_bytes = r.model_data_bytes;
    CHECK(r.losses.back() < r.losses.front());
  }
}

// Without a master the gradients are chunks of their own. The plan's count of the chunks
// updated on the device whose gradient chunk stays there matches what the run pins
// (GradSink::PinToDevice), within the chunks the run keeps room to prefetch; at the
// default margin ratio fewer than all of them keep it, at 0.5 all do. (48 blocks of
// width 64 in 289 chunks of 16,384 elements: many small chunks, so the update's scratch
// leaves the margin room for state.)
TEST_CASE("no master: the plan's device gradient chunks are the ones the run keeps there", "[chunk][master_none][pool]") {
  for (const double ratio : {0.8, 0.5}) {
    INFO("chunk.margin_use_ratio " << ratio);
    const std::string name = ratio > 0.6 ? "grads_pinned_08" : "grads_pinned_05";
    Config c = Chunked(name, {"model.n_layer=48", "model.vocab_size=64", "data.format=synthetic",
                              "data.train_path=", "data.valid_path=", "chunk.size_elements=16384",
                              "precision.dtype=bf16", "optimizer.state_dtype=int8", "optimizer.master_weights=none",
                              "chunk.device_budget_bytes=8000000", "train.max_steps=3", "train.eval_every=0",
                              "chunk.margin_use_ratio=" + std::to_string(ratio)});
    const RunPlan plan = PlanRun(c, at::kCPU);
    const int on_device = plan.plan.tiers.device_optimizer_chunks, planned = plan.plan.tiers.device_grad_chunks;
    REQUIRE(on_device > 50);
    Train(c);
    std::ifstream metrics(c.run.output_dir + "/metrics.jsonl");
    double pinned = -1;
    for (std::string line; std::getline(metrics, line);) {
      if (line.find("\"grad_chunks_on_device\"") != std::string::npos) pinned = JsonNumber(line, "grad_chunks_on_device");
    }
    CAPTURE(on_device, planned, pinned);
    CHECK(pinned <= planned);
    CHECK(planned - pinned <= 0.1 * on_device);
    if (ratio > 0.6) CHECK(planned < on_device);
    if (ratio < 0.6) CHECK(pinned == on_device);
  }
}

// The number after "key": in a metrics.jsonl line (NaN when absent).
double JsonNumber(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\": ");
  return at == std::string::npos ? std::nan("") : std::stod(line.substr(at + key.size() + 4));
}

std::vector<double> StepDeltas(const std::string& metrics_path, const std::string& key) {
  std::ifstream in(metrics_path);
  std::vector<double> out;
  double last = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"evictions\"") == std::string::npos || line.find("\"step\"") == std::string::npos) continue;
    const double now = JsonNumber(line, key);
    out.push_back(now - last);
    last = now;
  }
  return out;
}

TEST_CASE("model data many times the device budget trains, within budget", "[chunk]") {
  // Compute + grad + m + v chunks: 4 kinds x all chunks; the device holds 4 compute chunks.
  const TrainResult r = Train(Chunked("big", {"chunk.device_budget_bytes=320000", "train.max_steps=30",
                                              "logging.step_breakdown=true"}));
  CHECK(r.losses.back() < 0.6 * r.losses.front());
  CHECK(r.model_data_bytes >= 4 * r.device_budget_bytes);
  CHECK(r.peak_device_chunk_bytes <= r.device_budget_bytes);
  // Per-step telemetry: chunks move every step (the cumulative counters rise each
  // step), the device never holds more than the budget, and the step's phases are timed.
  std::ifstream metrics(TempDir() + "/big/metrics.jsonl");
  double last_evictions = 0, last_h2d = 0, last_d2h = 0, last_hits = 0;
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"evictions\"") == std::string::npos) continue;
    INFO(line);
    ++steps;
    CHECK(JsonNumber(line, "evictions") > last_evictions);
    CHECK(JsonNumber(line, "h2d_bytes") > last_h2d);
    CHECK(JsonNumber(line, "d2h_bytes") > last_d2h);
    last_evictions = JsonNumber(line, "evictions");
    last_h2d = JsonNumber(line, "h2d_bytes");
    last_d2h = JsonNumber(line, "d2h_bytes");
    CHECK(JsonNumber(line, "peak_device_chunk_bytes") <= 320000);
    CHECK(JsonNumber(line, "device_chunk_bytes") + JsonNumber(line, "host_chunk_bytes") >= r.model_data_bytes);
    // After the warm-up step, every step's prefetches (from the trace) are found in use.
    if (steps >= 3) CHECK(JsonNumber(line, "prefetch_hits") > last_hits);
    last_hits = JsonNumber(line, "prefetch_hits");
    for (const char* phase : {"forward_ms", "backward_ms", "optimizer_ms", "chunk_move_ms"}) {
      CAPTURE(phase);
      CHECK(JsonNumber(line, phase) > 0);
    }
  }
  CHECK(steps == 30);
  CHECK(last_evictions <= r.evictions);  // the final evaluation moves chunks too
  // The first chunk.timeline_steps (default 2) steps are in a Chrome trace.
  std::ifstream timeline(TempDir() + "/big/chunk_timeline.json");
  REQUIRE(timeline.good());
  const std::string text((std::istreambuf_iterator<char>(timeline)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"fetch chunk ") != std::string::npos);
  CHECK(text.find("\"evict chunk ") != std::string::npos);
  CHECK(text.find("\"backward 1\"") != std::string::npos);
}

TEST_CASE("chunk.size_elements: auto picks a size that trains the same", "[chunk][parity]") {
  const Config c = Chunked("auto_size", {"chunk.size_elements=auto", "chunk.device_budget_bytes=600000"});
  CHECK(c.chunk.size_elements == 0);
  CheckSameLosses(Train(Tiny("auto_plain")), Train(c));
  bool fits = false;
  const std::string plan = PlanReport(c, at::kCPU, &fits);
  INFO(plan);
  CHECK(plan.find("hint") == std::string::npos);  // auto is never mostly padding
}

TEST_CASE("--plan: model data per tier, the largest model, whether it fits; nothing allocated", "[chunk][plan]") {
  bool fits = false;
  const std::string ok = PlanReport(Chunked("plan_ok", {"chunk.device_budget_bytes=320000",
                                                        "chunk.host_budget_bytes=100000000"}), at::kCPU, &fits);
  INFO(ok);
  CHECK(fits);
  CHECK(ok.find("fits              yes") != std::string::npos);
  CHECK(ok.find("device            0.31 MiB of budget 0.31 MiB") != std::string::npos);
  CHECK(ok.find("largest model") != std::string::npos);
  CHECK(ok.find("hint") == std::string::npos);  // 20,000-element chunks suit this model
  // The default 32M-element chunks would be almost all padding here: the plan says so.
  const std::string padded = PlanReport(Chunked("plan_padded", {"chunk.size_elements=33554432"}), at::kCPU, &fits);
  CHECK(padded.find("hint              most chunk capacity is padding") != std::string::npos);
  // The same run trains (the plan's "yes" is true) ...
  CHECK_NOTHROW(Train(Chunked("plan_ok_run", {"chunk.device_budget_bytes=320000", "train.max_steps=2"})));
  // ... and a budget below a block's working set is a "NO" with the reason, as training fails.
  const std::string no = PlanReport(Chunked("plan_no", {"chunk.device_budget_bytes=200000"}), at::kCPU, &fits);
  INFO(no);
  CHECK_FALSE(fits);
  CHECK(no.find("fits              NO: the device budget") != std::string::npos);
  const std::string host_no = PlanReport(Chunked("plan_host_no", {"chunk.device_budget_bytes=320000",
                                                                  "chunk.host_budget_bytes=1000000"}), at::kCPU, &fits);
  INFO(host_no);
  CHECK_FALSE(fits);
  CHECK(host_no.find("fits              NO: the host budget of 1000000 bytes (0.95 MiB) is ") != std::string::npos);
  // A traced budget: the estimated activations come off the device capacity first.
  // 3.8 MB leaves the chunks about 0.5 MB: enough for a block's working set (0.32 MB).
  const std::string traced = PlanReport(Chunked("plan_traced", {"chunk.device_memory_bytes=3800000",
                                                                "chunk.device_mem_ratio=1.0"}), at::kCPU, &fits);
  INFO(traced);
  CHECK(fits);
  CHECK(traced.find("taken off the traced device capacity") != std::string::npos);
  CHECK(ok.find("besides the fixed chunk budget") != std::string::npos);
  // 3.4 MB would leave the chunks less than a block: NO, as the warm-up check would say.
  PlanReport(Chunked("plan_traced_no", {"chunk.device_memory_bytes=3400000", "chunk.device_mem_ratio=1.0"}), at::kCPU,
             &fits);
  CHECK_FALSE(fits);
}

TEST_CASE("a budget below one block's chunks fails before training, with the plan's reason", "[chunk]") {
  // (tests/trainer/capacity_test.cc sweeps this.)
  CHECK_THROWS_WITH(Train(Chunked("too_small", {"chunk.device_budget_bytes=200000"})),
                    Catch::Contains("this run does not fit its memory budgets: the device budget of 200000 bytes "
                                    "(chunk.device_budget_bytes) leaves 200000 bytes (0.19 MiB) for chunks, 120000 "
                                    "bytes (0.11 MiB) short of the largest block working set of 320000 bytes"));
}

TEST_CASE("bf16 chunks track fp32 training within 5% per step", "[chunk][bf16]") {
  // bf16 compute chunks with fp32 master/m/v vs plain fp32: bf16 has an 8-bit mantissa,
  // so the tolerance is loose; the curves must still agree in shape and trend.
  const TrainResult fp32 = Train(Tiny("fp32_ref"));
  const TrainResult bf16 = Train(Chunked("bf16", {"precision.dtype=bf16", "chunk.device_budget_bytes=160000"}));
  REQUIRE(bf16.losses.size() == fp32.losses.size());
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(bf16.losses[i] == Approx(fp32.losses[i]).epsilon(0.05));
  }
  CHECK(bf16.peak_device_chunk_bytes <= 160000);
  CHECK(bf16.evictions > 0);
  // Moving chunks changes no bit: bf16 with every chunk resident gives the same losses
  // (both update in the CPU kernels; LibTorch's fused op on the device path rounds
  // differently, which bf16 makes visible).
  REQUIRE(bf16.adam_device_chunks == 0);
  const TrainResult resident = Train(Chunked("bf16_resident", {"precision.dtype=bf16", "optimizer.hybrid_adam=false"}));
  CHECK(resident.evictions == 0);
  CHECK(resident.losses == bf16.losses);
  // One backward per step: gradients reuse the compute slots, 14 bytes per element of
  // chunk capacity (bf16 param/grad 2 + fp32 master, m, v 12).
  CHECK(bf16.model_data_bytes * 2 == bf16.compute_chunk_bytes * 14);

  // With accumulation, fp32 grad chunks return (18 bytes/element) and training still tracks fp32.
  const std::vector<std::string> accum = {"train.micro_batch_size=2", "train.global_batch_size=4"};
  const TrainResult fp32_accum = Train(Tiny("fp32_accum", accum));
  auto bf16_accum_args = accum;
  bf16_accum_args.push_back("precision.dtype=bf16");
  const TrainResult bf16_accum = Train(Chunked("bf16_accum", bf16_accum_args));
  CHECK(bf16_accum.model_data_bytes * 2 == bf16_accum.compute_chunk_bytes * 18);
  for (size_t i = 0; i < fp32_accum.losses.size(); ++i) {
    INFO("accumulating, step " << i + 1);
    CHECK(bf16_accum.losses[i] == Approx(fp32_accum.losses[i]).epsilon(0.05));
  }
}

TEST_CASE("optimizer.state_dtype bf16: losses within 1% of fp32 moments per step; m and v at 2 bytes", "[chunk][state_dtype]") {
  for (const char* dtype : {"fp32", "bf16"}) {
    INFO("precision.dtype " << dtype);
    const std::string p = std::string("precision.dtype=") + dtype;
    const TrainResult wide = Train(Chunked(std::string("state_fp32_") + dtype, {p}));
    const TrainResult narrow = Train(Chunked(std::string("state_bf16_") + dtype, {p, "optimizer.state_dtype=bf16"}));
    REQUIRE(narrow.losses.size() == wide.losses.size());
    CHECK(narrow.losses != wide.losses);  // the moments are rounded: not the same run
    for (size_t i = 0; i < wide.losses.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(narrow.losses[i] == Approx(wide.losses[i]).epsilon(0.01));
    }
    // Per element of chunk capacity: fp32 compute 4 + grad 4 + m, v 2 each = 12 (16 with
    // fp32 moments); bf16 compute with gradients in its slots 2 + master 4 + m, v 2 each = 10 (14).
    const int64_t fp32 = std::string(dtype) == "fp32";
    CHECK(narrow.model_data_bytes * (fp32 ? 4 : 2) == narrow.compute_chunk_bytes * (fp32 ? 12 : 10));
    CHECK(wide.model_data_bytes - narrow.model_data_bytes == narrow.compute_chunk_bytes / (fp32 ? 4 : 2) * 4);
  }
}

TEST_CASE("optimizer.state_dtype int8: losses within 2% of fp32 moments per step; 8-bit codes and block scales",
          "[chunk][state_dtype][int8]") {
  const TrainResult wide = Train(Chunked("state_fp32_int8ref", {"precision.dtype=bf16"}));
  const TrainResult narrow = Train(Chunked("state_int8", {"precision.dtype=bf16", "optimizer.state_dtype=int8"}));
  REQUIRE(narrow.losses.size() == wide.losses.size());
  for (size_t i = 0; i < wide.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(narrow.losses[i] == Approx(wide.losses[i]).epsilon(0.02));
  }
  CHECK(narrow.adam_device_chunks > 0);  // the device path (every chunk resident) and its quantisation
  // Per element of capacity: compute 2 + master 4 + m and v 1 and their scales (4 bytes
  // per 256 elements, rounded up to 64 per chunk) each: 8.03 and a little.
  CHECK(narrow.model_data_bytes * 2 * 256 >= narrow.compute_chunk_bytes * (8 * 256 + 8));
  CHECK(narrow.model_data_bytes * 2 * 100 <= narrow.compute_chunk_bytes * 805);
}

TEST_CASE("traced budget: chunks get what activations leave, per moment (or the warm-up share, static); same losses",
          "[chunk][parity][tracer]") {
  const TrainResult plain = Train(Tiny("traced_plain"));
  // Activations and other non-model memory of this model peak near 3.1 MB (CPU probe);
  // 3.8 MB of "device" leaves the chunks about 0.7 MB at the peak moment, less than the
  // 1.28 MB of compute chunks, so they are evicted and fetched every step.
  const TrainResult traced = Train(Chunked("traced", {"chunk.device_memory_bytes=3800000",
                                                      "chunk.device_mem_ratio=1.0"}));
  INFO("non-model peak " << traced.peak_non_model_bytes << ", min chunk budget " << traced.min_chunk_budget_bytes
                         << ", peak total " << traced.peak_device_total_bytes << ", evictions " << traced.evictions);
  CheckSameLosses(plain, traced);
  CHECK(traced.traced_capacity_bytes == 3800000);
  CHECK(traced.peak_non_model_bytes > 1000000);  // the probe sees the activations
  // --plan's estimate of the activations is close to what the probe measured.
  const Config shape = Tiny("traced_shape");
  const double estimate = static_cast<double>(
      models::EstimateActivationBytes(shape.model, shape.train.micro_batch_size * shape.data.seq_len, 4));
  CHECK(estimate > 0.7 * static_cast<double>(traced.peak_non_model_bytes));
  CHECK(estimate < 1.5 * static_cast<double>(traced.peak_non_model_bytes));
  CHECK(traced.min_chunk_budget_bytes < traced.compute_chunk_bytes);  // not all compute chunks fit
  CHECK(traced.evictions > 20);
  // After warm-up, chunk bytes plus non-model bytes never exceeded the device.
  CHECK(traced.peak_device_total_bytes > 0);
  CHECK(traced.peak_device_total_bytes <= traced.traced_capacity_bytes);
  // Static placement (PatrickStar's with_static_partition): the warm-up share, 10% of
  // the device, for good. Fewer chunks stay, so more moves; the same losses.
  const TrainResult fixed = Train(Chunked("traced_static", {"chunk.device_memory_bytes=3800000",
                                                            "chunk.device_mem_ratio=1.0", "chunk.placement=static"}));
  CheckSameLosses(plain, fixed);
  CHECK(fixed.min_chunk_budget_bytes == 380000);
  CHECK(fixed.peak_device_chunk_bytes <= 380000);
  CHECK(fixed.evictions > traced.evictions);
  CHECK(fixed.peak_device_total_bytes <= fixed.traced_capacity_bytes);
  // Static placement with a fixed budget is refused (a fixed budget is static already).
  CHECK_THROWS_WITH(Train(Chunked("static_fixed", {"chunk.placement=static", "chunk.device_budget_bytes=320000"})),
                    Catch::Contains("chunk.placement: static needs a traced budget"));
  // Too little device memory for the activations themselves: refused before training,
  // with --plan's reason.
  CHECK_THROWS_WITH(Train(Chunked("traced_small", {"chunk.device_memory_bytes=2000000", "chunk.device_mem_ratio=1.0"})),
                    Catch::Contains("this run does not fit its memory budgets: the activations (~3 MiB, estimated) "
                                    "fill the traced device capacity"));
  // A fixed and a traced budget together are refused.
  CHECK_THROWS_WITH(Train(Chunked("traced_both", {"chunk.device_memory_bytes=3800000",
                                                  "chunk.device_budget_bytes=320000"})),
                    Catch::Contains("not both"));
}

TEST_CASE("--plan's activation estimate is near the probe's measurement: bf16, big vocabulary, checkpointing, "
          "vertical", "[chunk][plan][tracer]") {
  // A 4096-token vocabulary makes the logits about half of the activations.
  struct Case {
    const char* name;
    bool checkpointing;
    int64_t kept;  // micro-batches whose block inputs live at once (vertical: 4 of 4)
  };
  for (const Case& k : {Case{"estimate", false, 1}, Case{"estimate_ckpt", true, 1}, Case{"estimate_vertical", true, 4}}) {
    INFO(k.name);
    std::vector<std::string> settings = {"precision.dtype=bf16", "model.vocab_size=4096",
                                         "chunk.device_memory_bytes=200000000", "chunk.device_mem_ratio=1.0",
                                         "train.max_steps=3",
                                         std::string("model.activation_checkpointing=") +
                                             (k.checkpointing ? "true" : "false")};
    if (k.kept > 1) {
      settings.push_back("train.global_batch_size=" + std::to_string(4 * k.kept));
      settings.push_back("train.accumulation_schedule=vertical");
    }
    const Config c = Chunked(k.name, settings);
    const TrainResult r = Train(c);
    const double estimate = static_cast<double>(
        models::EstimateActivationBytes(c.model, c.train.micro_batch_size * c.data.seq_len, 2, k.kept));
    INFO("estimate " << estimate << ", probe " << r.peak_non_model_bytes);
    CHECK(estimate > 0.7 * static_cast<double>(r.peak_non_model_bytes));
    CHECK(estimate < 1.5 * static_cast<double>(r.peak_non_model_bytes));
  }
}

TEST_CASE("cpu embedding: embeddings on the host in fp32, same losses as plain (untied)", "[chunk][parity][cpu_embedding]") {
  const TrainResult plain = Train(Tiny("emb_plain", {"model.tie_word_embeddings=false"}));
  const TrainResult host = Train(Chunked("emb_host", {"model.tie_word_embeddings=false", "chunk.cpu_embedding=true",
                                                      "chunk.device_budget_bytes=320000"}));
  CheckSameLosses(plain, host);
  CHECK(host.evictions > 0);
  // bf16 chunks with fp32 host embeddings track fp32 like bf16 does.
  const TrainResult bf16 = Train(Chunked("emb_host_bf16", {"model.tie_word_embeddings=false", "chunk.cpu_embedding=true",
                                                           "precision.dtype=bf16"}));
  for (size_t i = 0; i < plain.losses.size(); ++i) CHECK(bf16.losses[i] == Approx(plain.losses[i]).epsilon(0.05));
  // Tied: the token embedding is the LM head too and stays in chunks; wpe moves.
  const TrainResult tied_plain = Train(Tiny("emb_tied_plain"));
  CheckSameLosses(tied_plain, Train(Chunked("emb_tied", {"chunk.cpu_embedding=true", "chunk.device_budget_bytes=320000"})));
}

TEST_CASE("hybrid Adam: all-CPU and a partial device split give the same losses as plain", "[chunk][parity][hybrid]") {
  const TrainResult plain = Train(Tiny("hyb_plain"));
  const TrainResult off = Train(Chunked("hyb_off", {"optimizer.hybrid_adam=false"}));
  CheckSameLosses(plain, off);
  CHECK(off.adam_device_chunks == 0);
  CHECK(off.adam_host_chunks == 16);
  // A budget with some margin over the compute chunks' working set: some chunks keep
  // m and v on the device and update there, the others on the host.
  const TrainResult split = Train(Chunked("hyb_split", {"chunk.device_budget_bytes=1200000"}));
  CheckSameLosses(plain, split);
  CHECK(split.adam_device_chunks > 0);
  CHECK(split.adam_host_chunks > 0);
  CHECK(split.adam_device_chunks + split.adam_host_chunks == 16);
  CHECK(split.peak_device_chunk_bytes <= split.device_budget_bytes);
  // Every kernel variant this CPU has, forced, trains the same.
  for (const auto& [isa, cpu] : std::vector<std::pair<const char*, optim::CpuIsa>>{
           {"scalar", optim::CpuIsa::kScalar}, {"avx2", optim::CpuIsa::kAvx2}, {"avx512", optim::CpuIsa::kAvx512}}) {
    if (!optim::CpuSupports(cpu)) {
      WARN("this CPU lacks " << isa << ": not trained with it");
      continue;
    }
    INFO("cpu_adam " << isa);
    CheckSameLosses(plain, Train(Chunked(std::string("hyb_isa_") + isa,
                                         {"optimizer.hybrid_adam=false", std::string("optimizer.cpu_adam=") + isa})));
  }
}

TEST_CASE("Adam (L2 decay): device and host paths match plain torch::optim::Adam", "[chunk][parity][hybrid][adam]") {
  const TrainResult adamw = Train(Tiny("l2_adamw"));
  const TrainResult plain = Train(Tiny("l2_plain", {"optimizer.type=adam"}));
  // The decay rule matters at weight_decay 0.1, so a run that ignored the type would fail.
  CHECK(std::abs(plain.losses.back() - adamw.losses.back()) > 1e-4 * plain.losses.back());
  // Unlimited simulated device: after warm-up every chunk updates on the device path
  // (LibTorch's _fused_adam_); hybrid off: every chunk in the CPU kernels.
  const TrainResult device = Train(Chunked("l2_device", {"optimizer.type=adam"}));
  CheckSameLosses(plain, device);
  CHECK(device.adam_device_chunks == 16);
  const TrainResult host = Train(Chunked("l2_host", {"optimizer.type=adam", "optimizer.hybrid_adam=false"}));
  CheckSameLosses(plain, host);
  CHECK(host.adam_host_chunks == 16);
}

TEST_CASE("fp16 with a static loss scale: overflowing steps are caught and skipped", "[chunk][fp16][static_scale]") {
  // A moderate static scale trains; the scale never moves.
  const TrainResult ok = Train(Chunked("fp16_static", {"precision.dtype=fp16", "precision.loss_scale=256",
                                                       "chunk.device_budget_bytes=320000"}));
  CHECK(ok.skipped_steps == 0);
  for (double s : ok.loss_scales) CHECK(s == 256);
  CHECK(ok.losses.back() < 0.8 * ok.losses.front());
  // A static scale so large every fp16 gradient overflows: every step is skipped (PatrickStar
  // would apply inf/NaN here), so the parameters never change: after 5 steps the model
  // evaluates exactly as the untrained one (a run at learning rate 0: nothing moves).
  const TrainResult hot = Train(Chunked("fp16_static_hot", {"precision.dtype=fp16", "precision.loss_scale=1e30",
                                                            "train.max_steps=5"}));
  const TrainResult frozen = Train(Chunked("fp16_static_lr0", {"precision.dtype=fp16", "precision.loss_scale=256",
                                                               "optimizer.lr=0", "lr_schedule.min_lr=0",
                                                               "train.max_steps=5"}));
  CHECK(hot.skipped_steps == 5);
  CHECK(frozen.skipped_steps == 0);
  REQUIRE(std::isfinite(hot.final_eval_loss));
  CHECK(hot.final_eval_loss == frozen.final_eval_loss);
  CHECK(ok.final_eval_loss < hot.final_eval_loss);  // the trained model did move
}

TEST_CASE("hybrid Adam: accumulation of 4 x 2 equals one batch of 8 (fp32)", "[chunk][hybrid][accum]") {
  const TrainResult big = Train(Chunked("acc_big", {"train.micro_batch_size=8", "train.global_batch_size=8",
                                                     "train.max_steps=6"}));
  const TrainResult accum = Train(Chunked("acc_small", {"train.micro_batch_size=2", "train.global_batch_size=8",
                                                         "train.max_steps=6", "chunk.device_budget_bytes=320000"}));
  REQUIRE(big.losses.size() == accum.losses.size());
  for (size_t i = 0; i < big.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(accum.losses[i] == Approx(big.losses[i]).epsilon(1e-5));
  }
}

TEST_CASE("the LR in metrics.jsonl follows the schedule (wsd) under the chunk optimizer", "[chunk][lr]") {
  const Config c = Chunked("lr_wsd", {"lr_schedule.type=wsd", "lr_schedule.warmup_steps=3",
                                      "lr_schedule.decay_steps=5", "train.max_steps=12"});
  Train(c);
  const optim::LrSchedule schedule(c.optimizer.lr, c.lr_schedule, c.train.max_steps);
  std::ifstream in(c.run.output_dir + "/metrics.jsonl");
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("\"lr\": ");
    if (at == std::string::npos) continue;
    const int64_t step = std::stoll(line.substr(line.find("\"step\": ") + 8));
    INFO(line);
    CHECK(std::stod(line.substr(at + 6)) == Approx(schedule.LrAt(step - 1)).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked == 12);
  CHECK(schedule.LrAt(5) == Approx(c.optimizer.lr));      // stable phase
  CHECK(schedule.LrAt(11) == Approx(c.lr_schedule.min_lr));  // decayed by the last step
}

TEST_CASE("fp16 chunks with the dynamic loss scaler", "[chunk][fp16]") {
  // A moderate initial scale: no overflow, and training tracks fp32 like bf16 does.
  const TrainResult fp32 = Train(Tiny("fp16_ref"));
  const TrainResult fp16 = Train(Chunked("fp16", {"precision.dtype=fp16", "precision.initial_scale_power=8",
                                                  "chunk.device_budget_bytes=160000"}));
  CHECK(fp16.skipped_steps == 0);
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(fp16.losses[i] == Approx(fp32.losses[i]).epsilon(0.05));
  }
  // A huge initial scale overflows fp16 gradients: the first steps are skipped while the
  // scale comes down, exactly as the scaler's rules say, and training still learns.
  const TrainResult hot = Train(Chunked("fp16_hot", {"precision.dtype=fp16", "precision.initial_scale_power=30",
                                                     "precision.hysteresis=1", "train.max_steps=40"}));
  REQUIRE(hot.skipped.size() == 40);
  CHECK(hot.skipped_steps > 0);
  CHECK(hot.skipped.front());
  CHECK(hot.losses.back() < 0.7 * hot.losses.front());
  optim::PrecisionConfig pc;
  pc.dtype = optim::Dtype::kFp16;
  pc.initial_scale_power = 30;
  pc.hysteresis = 1;
  optim::LossScaler replay(pc);
  for (size_t i = 0; i < hot.skipped.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(hot.loss_scales[i] == replay.scale());
    replay.Update(hot.skipped[i]);
  }
}

}  // namespace
}  // namespace ps::trainer
