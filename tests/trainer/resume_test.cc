// Checkpoint and resume, end to end through Train(): a run interrupted after a
// checkpoint (TrainKilledAfter, killed_run.h: what a killed process leaves, the steps
// after its last checkpoint lost) and resumed logs bitwise the losses of an
// uninterrupted run, for plain runs, chunk runs evicting on the simulated tier, fp16
// with the dynamic scaler mid-hysteresis, gradient accumulation, CPU embeddings and
// bf16 with gradients in the compute slots. Checkpoints are layout independent (plain
// <-> chunks, another chunk size), pruned to checkpoint.keep, a corrupt newest one is
// skipped by resume: auto; moments saved in one state dtype load into another converted
// exactly. (Stop signals: trainer_test's fake engine and signal_test.sh.)
#include <filesystem>
#include <fstream>
#include <iterator>

#include <ATen/ATen.h>

#include <tuple>

#include "optim/block_quant.h"
#include "optim/int8_moments.h"
#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/engine_factory.h"
#include "trainer/engine/model_factory.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string WriteCorpus() { return testing::WriteRepeatedText("resume_corpus.txt", 300); }

// 3 blocks of n_embd 64, dropout on (the RNG state must be restored too), 16 steps.
Config Tiny(const std::string& name, std::vector<std::string> extra = {}) {
  const std::string dir = TempDir() + "/" + name;
  std::vector<std::string> overrides = {"data.train_path=" + WriteCorpus(), "run.output_dir=" + dir, "run.threads=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {n_layer: 3, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256, dropout: 0.1}\n"
      "data: {format: text, seq_len: 32, shuffle: true}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 16, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.1}\n"
      "lr_schedule: {type: cosine, warmup_steps: 3, min_lr: 3.0e-4}\n"
      "logging: {level: warn}\n"
      "checkpoint: {at_end: false}\n",
      "test.yaml", overrides, ProcessEnv());
}

// Runs `extra` uninterrupted, then interrupted after `kill_at` (checkpoints every
// `every` steps) and resumed; the resumed steps must log the very same losses.
void CheckExactResume(const std::string& name, std::vector<std::string> extra, int64_t every = 4, int64_t kill_at = 10) {
  const TrainResult whole = Train(Tiny(name + "_whole", extra));
  std::vector<std::string> interrupted = extra;
  interrupted.push_back("checkpoint.every_steps=" + std::to_string(every));
  const Config c = Tiny(name + "_cut", interrupted);
  testing::TrainKilledAfter(c, kill_at);
  const TrainResult resumed = Train(c);
  const int64_t saved = kill_at / every * every;
  REQUIRE(resumed.start_step == saved);
  REQUIRE(resumed.losses.size() == whole.losses.size() - saved);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    INFO(name << ": step " << saved + 1 + i);
    CHECK(resumed.losses[i] == whole.losses[saved + i]);  // bitwise
    CHECK(resumed.lrs[i] == whole.lrs[saved + i]);
    CHECK(resumed.loss_scales[i] == whole.loss_scales[saved + i]);
  }
  // The resume is on record in metrics.jsonl.
  std::ifstream in(c.run.output_dir + "/metrics.jsonl");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"resumed_from_step\": " + std::to_string(saved)) != std::string::npos);
}

TEST_CASE("plain fp32: killed and resumed, the same losses bitwise", "[resume][plain]") {
  CheckExactResume("plain", {});
}

TEST_CASE("plain bf16 with gradient accumulation: the same losses bitwise", "[resume][plain][accum]") {
  CheckExactResume("plain_accum", {"precision.dtype=bf16", "train.micro_batch_size=2"});
}

TEST_CASE("chunks evicting on the simulated tier (fp32): the same losses bitwise", "[resume][chunk]") {
  CheckExactResume("chunk_evict", {"chunk.enabled=true", "chunk.size_elements=20000", "chunk.device_budget_bytes=320000"});
}

TEST_CASE("chunks, every chunk resident (hybrid Adam on the device path): the same losses bitwise", "[resume][chunk]") {
  CheckExactResume("chunk_resident", {"chunk.enabled=true", "chunk.size_elements=20000"});
}

TEST_CASE("chunks with gradient accumulation: the same losses bitwise", "[resume][chunk][accum]") {
  CheckExactResume("chunk_accum", {"chunk.enabled=true", "chunk.size_elements=20000", "train.micro_batch_size=2",
                                   "chunk.device_budget_bytes=320000"});
}

TEST_CASE("bf16 chunks, gradients in the compute slots: the same losses bitwise", "[resume][chunk][bf16]") {
  CheckExactResume("chunk_bf16", {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=bf16",
                                  "chunk.device_budget_bytes=160000"});
}

TEST_CASE("bf16 moments (optimizer.state_dtype): evicting, speculating, and the device path; bitwise",
          "[resume][chunk][state_dtype]") {
  CheckExactResume("state_bf16_evict", {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=bf16",
                                        "chunk.device_budget_bytes=160000", "optimizer.state_dtype=bf16"});
  CheckExactResume("state_bf16_spec", {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=bf16",
                                       "optimizer.hybrid_adam=false", "optimizer.state_dtype=bf16",
                                       "optimizer.speculation_slots=2", "train.grad_clip=1000"});  // kept: not clipped
  CheckExactResume("state_bf16_device", {"chunk.enabled=true", "chunk.size_elements=20000", "optimizer.state_dtype=bf16"});
  // The checkpoint keeps the moments as the run stores them (bf16), so resuming restores them bitwise.
  const CheckpointContents saved = ReadCheckpoint(ListCheckpoints(TempDir() + "/state_bf16_device_cut/checkpoints").front());
  REQUIRE(!saved.engine.exp_avg.empty());
  CHECK(saved.engine.exp_avg.begin()->second.scalar_type() == at::kBFloat16);
  CHECK(saved.engine.exp_avg_sq.begin()->second.scalar_type() == at::kBFloat16);
}

TEST_CASE("int8 moments (optimizer.state_dtype): bf16 and fp32 compute, speculating; bitwise; across modes",
          "[resume][chunk][state_dtype][int8]") {
  CheckExactResume("state_int8", {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=bf16",
                                  "optimizer.state_dtype=int8"});
  CheckExactResume("state_int8_spec", {"chunk.enabled=true", "chunk.size_elements=20000", "optimizer.state_dtype=int8",
                                       "optimizer.speculation_slots=2", "train.grad_clip=1000"});
  // The checkpoint keeps the codes and block scales (bytes), not fp32 moments.
  const std::string dir = TempDir() + "/state_int8_cut/checkpoints";
  REQUIRE(!ListCheckpoints(dir).empty());
  const CheckpointContents saved = ReadCheckpoint(ListCheckpoints(dir).front());
  REQUIRE(!saved.engine.exp_avg.empty());
  CHECK(saved.engine.exp_avg.begin()->second.scalar_type() == at::kByte);
  // Another mode resumes from it (dequantised), and an int8 run from an fp32 one
  // (quantised): the losses go on within 2% of the run that was not interrupted.
  const TrainResult whole = Train(Tiny("state_int8_whole", {"chunk.enabled=true", "chunk.size_elements=20000",
                                                            "precision.dtype=bf16", "optimizer.state_dtype=int8"}));
  for (const char* mode : {"fp32", "bf16"}) {
    const TrainResult other = Train(Tiny(std::string("state_int8_to_") + mode,
                                         {"chunk.enabled=true", "precision.dtype=bf16",
                                          std::string("optimizer.state_dtype=") + mode,
                                          "checkpoint.resume=" + ListCheckpoints(dir).front()}));
    REQUIRE(other.losses.size() + other.start_step == whole.losses.size());
    for (size_t i = 0; i < other.losses.size(); ++i) {
      CHECK(other.losses[i] == Approx(whole.losses[other.start_step + i]).epsilon(0.02));
    }
  }
  // Without chunks too (LibTorch's fused Adam: fp32 moments, bf16 autocast): 5%.
  const TrainResult plain = Train(Tiny("state_int8_to_plain", {"precision.dtype=bf16",
                                                               "checkpoint.resume=" + ListCheckpoints(dir).front()}));
  REQUIRE(plain.losses.size() + plain.start_step == whole.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    CHECK(plain.losses[i] == Approx(whole.losses[plain.start_step + i]).epsilon(0.05));
  }
  // fp32 moments, checkpoints at steps 4 and 8.
  Train(Tiny("state_fp32_src", {"chunk.enabled=true", "checkpoint.every_steps=4", "train.max_steps=8"}));
  const std::vector<std::string> fp32_saved = ListCheckpoints(TempDir() + "/state_fp32_src/checkpoints");
  REQUIRE(!fp32_saved.empty());
  const TrainResult from_fp32 = Train(Tiny("state_fp32_to_int8", {"chunk.enabled=true", "optimizer.state_dtype=int8",
                                                                  "checkpoint.resume=" + fp32_saved.front()}));
  REQUIRE(from_fp32.start_step > 0);
  REQUIRE(!from_fp32.losses.empty());
  CHECK(from_fp32.losses.back() < from_fp32.losses.front() * 1.1);
}

// The state an engine configured by `c` holds after loading `saved` (read back by Save()).
EngineState LoadedBy(const Config& c, const EngineState& saved) {
  models::InitPlan plan;
  plan.all_provided = true;
  const std::unique_ptr<TrainingEngine> engine = MakeEngine(MakeModel(c), c, at::kCPU, plan);
  engine->Load(saved);
  EngineState loaded = engine->Save();
  for (const auto& [name, m] : loaded.exp_avg) {  // 8-bit moments: read as the writer reads them
    if (m.scalar_type() == at::kByte) CHECK(m.is_meta());  // not packed copies of the whole state
  }
  if (loaded.deferred) CHECK_FALSE(loaded.deferred->reads_tier());  // in memory: may be snapshot
  ReadDeferredValues(loaded);
  return loaded;
}

// A checkpoint's moment `saved` as fp32 (8-bit ones dequantised).
at::Tensor SavedMoment(const at::Tensor& saved, const at::Tensor& param, optim::QuantCode code) {
  if (saved.scalar_type() != at::kByte) return saved.to(at::kFloat);
  return optim::DequantizePackedInt8(saved, param.numel(), code).view(param.sizes());
}

// Loading moments saved in another mode: each one the saved values converted, exactly (a
// run that zeroed them, or read the wrong tensor, would still train on).
TEST_CASE("cross-mode loads: every moment is the saved one dequantised, rounded or quantised",
          "[resume][chunk][state_dtype][int8]") {
  const std::vector<std::string> chunked = {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=bf16",
                                            "train.max_steps=4", "checkpoint.every_steps=4"};
  const auto with = [&](const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(), chunked.begin(), chunked.end());
    return Tiny(name, extra);
  };
  for (const char* source : {"int8", "fp32"}) {
    const Config src = with(std::string("cross_src_") + source, {std::string("optimizer.state_dtype=") + source});
    Train(src);
    const std::vector<std::string> saved_dirs = ListCheckpoints(src.run.output_dir + "/checkpoints");
    REQUIRE(saved_dirs.size() == 1);
    const EngineState saved = ReadCheckpoint(saved_dirs.front()).engine;
    REQUIRE(saved.exp_avg.size() == saved.params.size());
    for (const char* target : {"fp32", "bf16", "int8", "plain"}) {
      INFO(source << " checkpoint loaded by " << target);
      const bool plain = std::string(target) == "plain";
      const Config c = plain ? Tiny("cross_plain", {"precision.dtype=bf16"})
                             : with(std::string("cross_") + target, {std::string("optimizer.state_dtype=") + target});
      const EngineState loaded = LoadedBy(c, saved);
      REQUIRE(loaded.exp_avg.size() == saved.exp_avg.size());
      for (const auto& [name, param] : saved.params) {
        INFO(name);
        CHECK(loaded.adam_steps.at(name) == saved.adam_steps.at(name));
        for (const auto& [map, loaded_map, code] :
             {std::tuple{&saved.exp_avg, &loaded.exp_avg, optim::QuantCode::kSigned},
              std::tuple{&saved.exp_avg_sq, &loaded.exp_avg_sq, optim::QuantCode::kUnsigned}}) {
          const at::Tensor values = SavedMoment(map->at(name), param, code);
          REQUIRE(values.abs().max().item<float>() > 0);
          const at::Tensor got = loaded_map->at(name);
          at::Tensor want = values;
          if (std::string(target) == "bf16") want = values.to(at::kBFloat16);
          if (std::string(target) == "int8") {
            const at::Tensor flat = values.reshape({-1}).contiguous();
            const optim::Int8Moment q{at::empty({flat.numel()}, at::kByte),
                                      at::empty({(flat.numel() + optim::kQuantBlockNumel - 1) / optim::kQuantBlockNumel})};
            optim::QuantizeInt8(flat, code, q);
            want = optim::PackInt8(q);
          }
          REQUIRE(got.scalar_type() == want.scalar_type());
          CHECK(at::equal(got.reshape({-1}), want.reshape({-1})));
        }
      }
    }
  }
}

TEST_CASE("chunks with CPU embeddings (untied): the same losses bitwise", "[resume][chunk][cpu_embedding]") {
  CheckExactResume("chunk_cpu_emb", {"chunk.enabled=true", "chunk.size_elements=20000", "chunk.cpu_embedding=true",
                                     "model.tie_word_embeddings=false"});
}

TEST_CASE("fp16 chunks, dynamic scaler saved mid-hysteresis: the same losses and scales bitwise", "[resume][fp16]") {
  const std::vector<std::string> fp16 = {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=fp16",
                                         "precision.initial_scale_power=24", "precision.hysteresis=3",
                                         "chunk.device_budget_bytes=320000", "checkpoint.keep=10"};
  CheckExactResume("fp16", fp16, /*every=*/5, /*kill_at=*/7);
  // The checkpoint at step 5 was taken while overflows were being tolerated.
  std::ifstream in(TempDir() + "/fp16_cut/checkpoints/step_5/state.json");
  const std::string state((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(state.substr(state.find("loss_scaler"), 120));
  CHECK(state.find("hysteresis_left=3") == std::string::npos);  // some of the hysteresis was used
  CHECK(state.find("overflows=0") == std::string::npos);
}

TEST_CASE("checkpoints are layout independent: chunks <-> plain, another chunk size", "[resume][layout]") {
  const std::vector<std::string> chunked = {"chunk.enabled=true", "chunk.size_elements=20000", "checkpoint.every_steps=8"};
  const Config source = Tiny("layout_src", chunked);
  testing::TrainKilledAfter(source, 9);  // step 8's checkpoint is the last
  const TrainResult whole = Train(Tiny("layout_whole", {"chunk.enabled=true", "chunk.size_elements=20000"}));
  const std::string ckpt = source.run.output_dir + "/checkpoints/step_8";
  for (const auto& target : std::vector<std::vector<std::string>>{
           {},                                                            // plain
           {"chunk.enabled=true", "chunk.size_elements=30000"},           // another layout
           {"chunk.enabled=true", "chunk.size_elements=20000"}}) {        // the same layout
    std::vector<std::string> s = target;
    s.push_back("checkpoint.resume=" + ckpt);
    const std::string name = "layout_dst_" + std::to_string(target.size()) + (target.empty() ? "" : target[1].substr(20));
    const TrainResult r = Train(Tiny(name, s));
    INFO(name);
    REQUIRE(r.start_step == 8);
    REQUIRE(r.losses.size() == 8);
    for (size_t i = 0; i < r.losses.size(); ++i) {
      INFO("step " << 9 + i);
      CHECK(r.losses[i] == Approx(whole.losses[8 + i]).epsilon(1e-5));  // to kernel rounding
    }
  }
}

TEST_CASE("checkpoint.keep prunes old checkpoints; latest names the newest", "[resume][keep]") {
  const Config c = Tiny("keep", {"checkpoint.every_steps=3", "checkpoint.keep=2", "checkpoint.at_end=true"});
  Train(c);
  const auto kept = ListCheckpoints(c.run.output_dir + "/checkpoints");
  REQUIRE(kept.size() == 2);
  CHECK(fs::path(kept[0]).filename() == "step_16");
  CHECK(fs::path(kept[1]).filename() == "step_15");
  std::ifstream latest(c.run.output_dir + "/checkpoints/latest");
  std::string line;
  std::getline(latest, line);
  CHECK(line == "step_16");
}

TEST_CASE("resume: auto skips a corrupt newest checkpoint for the next older valid one", "[resume][corrupt]") {
  const Config c = Tiny("corrupt", {"checkpoint.every_steps=4", "checkpoint.keep=3"});
  testing::TrainKilledAfter(c, 13);  // checkpoints at 4, 8, 12
  {  // flip one byte in the newest checkpoint's optimizer state
    std::fstream f(c.run.output_dir + "/checkpoints/step_12/optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH(ReadCheckpoint(c.run.output_dir + "/checkpoints/step_12"),
                    Catch::Contains("optimizer.safetensors: SHA-256") && Catch::Contains("corrupt"));
  // An explicit path to the corrupt one is an error, not a silent fallback.
  Config explicit_path = c;
  explicit_path.checkpoint.resume = c.run.output_dir + "/checkpoints/step_12";
  CHECK_THROWS_WITH(Train(explicit_path), Catch::Contains("corrupt"));
  const TrainResult r = Train(c);
  CHECK(r.start_step == 8);
  // A folder of checkpoints as the path: its newest valid one, as auto does.
  Config folder = Tiny("corrupt_folder", {"checkpoint.resume=" + c.run.output_dir + "/checkpoints"});
  CHECK(Train(folder).start_step == 16);
  // The corrupt one was set aside (kept, never read) and the resumed run saved step 12 anew.
  CHECK(fs::exists(c.run.output_dir + "/checkpoints/step_12.unusable/state.json"));
  CHECK(ReadCheckpoint(c.run.output_dir + "/checkpoints/step_12").step == 12);
}

TEST_CASE("resume picks no fight with checkpoints it would outrank or overwrite", "[resume][timeline]") {
  const Config c = Tiny("timeline", {"checkpoint.every_steps=4", "checkpoint.keep=5"});
  Train(c);  // checkpoints 4, 8, 12, 16
  // An explicit older checkpoint of this folder: the newer ones would be pruned ahead of
  // this run's own; an error naming them.
  Config rewind = c;
  rewind.checkpoint.resume = c.run.output_dir + "/checkpoints/step_8";
  CHECK_THROWS_WITH(Train(rewind), Catch::Contains("holds step_16, newer than the resumed step 8"));
  // Another run's checkpoint into a folder that holds a run: the output-folder rule holds.
  Config elsewhere = Tiny("timeline_other", {"train.max_steps=2"});
  Train(elsewhere);
  elsewhere.checkpoint.resume = c.run.output_dir + "/checkpoints/step_8";
  CHECK_THROWS_WITH(Train(elsewhere), Catch::Contains("holds another run"));
  // Every checkpoint unusable: said so, not "another run".
  const Config broken = Tiny("all_broken", {"checkpoint.every_steps=2", "train.max_steps=2"});
  Train(broken);
  fs::resize_file(broken.run.output_dir + "/checkpoints/step_2/model.safetensors", 10);
  CHECK_THROWS_WITH(Train(broken), Catch::Contains("none of which verifies"));
}

TEST_CASE("a checkpoint of another model is refused, naming what differs", "[resume][fingerprint]") {
  const Config a = Tiny("fp_a", {"checkpoint.at_end=true", "train.max_steps=2"});
  Train(a);
  Config b = Tiny("fp_b", {"model.n_embd=32", "checkpoint.resume=" + a.run.output_dir + "/checkpoints/step_2"});
  CHECK_THROWS_WITH(Train(b), Catch::Contains("model.n_embd: checkpoint 64, this config 32"));
}

TEST_CASE("an output folder of another run is not overwritten silently", "[resume][output_dir]") {
  const Config first = Tiny("claimed", {"train.max_steps=2"});
  Train(first);
  const auto metrics = first.run.output_dir + "/metrics.jsonl";
  const auto size_before = fs::file_size(metrics);
  // Another config and no checkpoint to resume: starting in that folder is an error,
  // and the earlier run's metrics are untouched.
  Config other = first;
  other.optimizer.lr = 1e-3;
  CHECK_THROWS_WITH(Train(other), Catch::Contains("holds another run") && Catch::Contains("run.overwrite"));
  CHECK(fs::file_size(metrics) == size_before);
  // A run that fails at data loading does not touch them either.
  Config bad_data = other;
  bad_data.data.train_path = TempDir() + "/no_such_file.txt";
  CHECK_THROWS(Train(bad_data));
  CHECK(fs::file_size(metrics) == size_before);
  // The same config again (an attempt killed before its first checkpoint) starts over
  // and appends to the metrics.
  CHECK(Train(first).losses.size() == 2);
  CHECK(fs::file_size(metrics) > size_before);
  other.run.overwrite = true;
  CHECK(Train(other).losses.size() == 2);
  std::ifstream in(metrics);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"summary\"") == text.rfind("\"summary\""));  // replaced: one run's summary, not appended
}

TEST_CASE("fp16 that only overflows at the minimum scale stops with an error", "[resume][fp16][diverge]") {
  // A static-size model whose fp16 gradients always overflow: with the scale floor at its
  // start, every step is skipped at the minimum scale.
  const Config c = Tiny("diverge", {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=fp16",
                                    "precision.initial_scale_power=64", "precision.min_loss_scale=1e19",
                                    "precision.max_skips_at_min_scale=3", "run.overwrite=true"});
  CHECK_THROWS_WITH(Train(c), Catch::Contains("diverged") && Catch::Contains("the last 3 steps"));
}

}  // namespace
}  // namespace ps::trainer
