#include "trainer/train_loop.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/trainable.h"
#include "optim/lr_schedule.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/model_shape.h"
#include "trainer/engine/chunk_setup.h"
#include "trainer/engine/engine.h"
#include "trainer/engine/engine_factory.h"
#include "trainer/engine/model_factory.h"
#include "trainer/evaluator.h"
#include "trainer/io/checkpointer.h"
#include "trainer/io/file_io.h"
#include "trainer/io/hf_io.h"
#include "trainer/io/lora_io.h"
#include "trainer/io/rng_state.h"
#include "trainer/io/run_folder.h"
#include "trainer/io/run_lock.h"
#include "trainer/io/version.h"
#include "trainer/logging/host_memory.h"
#include "trainer/logging/metrics.h"
#include "trainer/logging/step_logger.h"
#include "trainer/logging/tensorboard_writer.h"
#include "trainer/rank_agreement.h"
#include "trainer/run_data.h"
#include "trainer/run_preflight.h"
#include "trainer/trainer.h"

namespace ps::trainer {
namespace {

using Clock = std::chrono::steady_clock;

at::Device ChooseDevice(DeviceKind kind) {
  const bool cuda = torch::cuda::is_available();
  switch (kind) {
    case DeviceKind::kCpu:
      return at::kCPU;
    case DeviceKind::kCuda:
      if (!cuda) throw ConfigError("run.device: cuda requested but this build or machine has no CUDA device");
      return at::kCUDA;
    case DeviceKind::kAuto:
      return cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  }
  return at::kCPU;
}

// The checkpoint to resume (if any) and the output folder, resolved before anything is
// written; then config.resolved.yaml, metrics.jsonl and the TensorBoard file opened.
struct RunStart {
  // One owner per folder (rank 0): run.output_dir and checkpoint.dir (each its own lock,
  // also when one lies in the other); held until the run ends.
  std::unique_ptr<FolderLock> output_lock, checkpoint_lock;
  std::optional<CheckpointContents> resume;
  std::string resume_path;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<TensorBoardWriter> tensorboard;
};

// `writer`: rank 0 (or the only rank) claims the folder and opens the sinks; the other
// ranks of a data-parallel run only find the checkpoint to resume. `agree` (several
// ranks): called by every rank with the step it found (-1: none), before rank 0 sets
// aside, moves or deletes anything (CheckRanksResumeOneStep; only the folder locks exist).
RunStart StartRun(const Config& c, bool writer, const std::function<void(int64_t)>& agree) {
  RunStart s;
  const std::string ckpt_dir = CheckpointDir(c);
  const bool resume_auto = c.checkpoint.resume == "auto";
  const bool explicit_path = !resume_auto && c.checkpoint.resume != "never";
  if (c.run.overwrite && explicit_path && CheckpointIsIn(c.checkpoint.resume, ckpt_dir)) {
    throw ConfigError("run.overwrite: true deletes " + ckpt_dir + ", which holds checkpoint.resume " +
                      c.checkpoint.resume + " (drop one of them)");
  }
  if (writer) {  // before anything in the folders is read: a second start stops here
    s.output_lock = std::make_unique<FolderLock>(c.run.output_dir, "run.output_dir");
    // Its own lock even inside the output folder: another run may name it as its checkpoint.dir.
    s.checkpoint_lock = std::make_unique<FolderLock>(ckpt_dir, "checkpoint.dir");
  }
  std::vector<std::string> unusable;
  if (!c.run.overwrite || explicit_path) {
    s.resume = FindResumeCheckpoint(c.checkpoint, ckpt_dir, IdentityOf(c), &s.resume_path, &unusable);
  }
  if (s.resume) CheckFingerprint(s.resume->fingerprint, RunFingerprint(c), s.resume_path);
  if (agree) agree(s.resume ? s.resume->step : -1);
  if (!writer) return s;
  RefuseIncompleteCheckpointFolders(ckpt_dir, s.resume ? s.resume->step : 0);  // before anything is moved
  const bool resume_here = s.resume && CheckpointIsIn(s.resume_path, ckpt_dir);
  const bool continue_metrics = ClaimOutputDir(c, resume_here, resume_auto ? static_cast<int>(unusable.size()) : 0);
  if (resume_here) SetAsideNewerCheckpoints(ckpt_dir, s.resume->step, resume_auto, unusable);
  std::filesystem::create_directories(c.run.output_dir);
  WriteFileAtomically((std::filesystem::path(c.run.output_dir) / "config.resolved.yaml").string(), ConfigToYaml(c));
  if (c.logging.jsonl) {
    const auto path = (std::filesystem::path(c.run.output_dir) / "metrics.jsonl").string();
    if (continue_metrics) {
      DropPartialLastLine(path);
    } else {
      std::filesystem::remove(path);  // one run per file
    }
    s.metrics = std::make_unique<MetricsWriter>(path);
  }
  const auto tb_dir = std::filesystem::path(c.run.output_dir) / "tb";
  if (!continue_metrics) RemoveEventFiles(tb_dir.string());
  if (c.logging.tensorboard) s.tensorboard = std::make_unique<TensorBoardWriter>(tb_dir.string());
  return s;
}

// The device of this rank: run.device, and with several ranks on CUDA the GPU of its
// local rank.
at::Device RankDevice(const Config& c, int world, int local_rank) {
  const at::Device device = ChooseDevice(c.run.device);
  if (device.is_cuda() && world > 1) {
    return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(local_rank % torch::cuda::device_count()));
  }
  return device;
}

// checkpoint.export_hf, after the last step: rank 0 exports (from the checkpoint just
// written at the end when there is one); with a collective save the other ranks take
// part in gathering the weights.
void ExportAtEndOfRun(TrainingEngine& engine, const Config& c, bool writer, StepLogger& logger) {
  if (!c.checkpoint.export_hf) return;
  if (c.lora.enabled) {  // the adapter folder; under ZeRO the adapters are gathered from every rank
    if (!writer && !engine.collective_save()) return;
    const models::TensorMap adapters = engine.GatherTrainableParams();
    if (writer) {
      const HfExportReport exported = ExportLoraAtEnd(adapters, c);
      logger.Record(JsonLine().Add("hf_export", exported.folder).Add("hf_export_bytes", exported.bytes));
    }
    return;
  }
  if (writer) {
    const std::string final_checkpoint =
        c.checkpoint.at_end ? CheckpointDir(c) + "/step_" + std::to_string(c.train.max_steps) : std::string();
    const HfExportReport exported = ExportAtEnd(engine, c, final_checkpoint);
    logger.Record(JsonLine().Add("hf_export", exported.folder).Add("hf_export_bytes", exported.bytes));
  } else if (engine.collective_save() && !c.checkpoint.at_end) {
    engine.GatherParams();  // rank 0's export gathers the weights from every rank
  }
}

// Start-up's phases and their seconds, from the launch, for the start-up log line.
class StartupPhases {
 public:
  explicit StartupPhases(Clock::time_point launch) : last_(launch) {}
  void Mark(const std::string& phase) {
    const auto now = Clock::now();
    phases_.emplace_back(phase, std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  // "data 0.1 s, model built 0.2 s, ...", the rest up to `end` as "other".
  std::string Describe(Clock::time_point end) const {
    std::string out;
    for (const auto& [phase, s] : phases_) out += fmt::format("{}{} {:.1f} s", out.empty() ? "" : ", ", phase, s);
    return out + fmt::format(", other {:.1f} s", std::chrono::duration<double>(end - last_).count());
  }

 private:
  Clock::time_point last_;
  std::vector<std::pair<std::string, double>> phases_;
};

// Settings that only make sense together, checked before anything is read or written.
void CheckRunSettings(const Config& c, const TrainOptions& options) {
  if (c.precision.dtype == optim::Dtype::kFp16 && !c.chunk.enabled) {
    throw ConfigError("precision.dtype: fp16 needs chunk.enabled: true (the chunk optimizer owns the loss scaler); "
                      "use bf16 or fp32 without chunks");
  }
  CheckAccumulationSchedule(c, options.comm ? options.comm->world_size() : 1);
  if (c.distributed.force_collectives && options.comm == nullptr) {
    throw ConfigError("distributed.force_collectives: the run has no communicator (ps_train's main builds one)");
  }
}

// This process's place in the run.
struct RankSetup {
  int world = 1, rank = 0;
  bool writer = true;  // rank 0: writes the output folder, metrics and (unsharded) checkpoints
  int threads = 1;
  at::Device device = at::kCPU;
};

RankSetup SetUpRank(const Config& c, const TrainOptions& options) {
  RankSetup r;
  r.world = options.comm ? options.comm->world_size() : 1;
  r.rank = options.comm ? options.comm->rank() : 0;
  r.writer = r.rank == 0;
  r.threads = CpuThreads(c.run);
  at::set_num_threads(r.threads);
  r.device = RankDevice(c, r.world, options.local_rank);
  if (options.comm && r.world > 1) CheckRanksAgree(*options.comm, c, r.device);  // before any sized collective
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  return r;
}

// The engine over the model, its parameters initialised: each from a generator of its
// own (models/param_init.h), except those model.init_from provides or a resumed
// checkpoint restores (then none is drawn).
struct BuiltEngine {
  std::unique_ptr<TrainingEngine> engine;
  models::ParameterCounts counts;
  int64_t trainable_numel = 0;  // all but a frozen base (LoRA)
  std::string accuracy_name;
};

// LoRA: a checkpoint holds only the adapters, so a resumed run builds its frozen base
// as a fresh one does (model.init_from or the seed) and checks it against the
// checkpoint's fingerprint of it (the engine's Load).
BuiltEngine BuildEngine(const Config& c, const RankSetup& rank, comm::Communicator* comm, bool resuming,
                        std::optional<InitialWeights> initial_weights, StartupPhases& phases) {
  models::InitPlan init{static_cast<uint64_t>(c.run.seed), {}};
  const bool restores_all = resuming && !c.lora.enabled;
  init.all_provided = restores_all;
  if (restores_all) initial_weights.reset();
  for (const auto& [name, tensor] : initial_weights ? initial_weights->params : models::TensorMap{}) {
    init.provided.insert(name);
  }
  std::unique_ptr<models::TrainableModel> model = MakeModel(c);  // uninitialised
  phases.Mark("model built");
  BuiltEngine built;
  built.counts = model->CountParameters();  // before an engine takes the storage
  for (const auto& p : model->BlockParameters()) built.trainable_numel += p.tensor.requires_grad() ? p.tensor.numel() : 0;
  built.accuracy_name = model->accuracy_name();
  built.engine = MakeEngine(std::move(model), c, rank.device, init, comm);
  phases.Mark(c.chunk.enabled ? "chunks placed and initialised" : "parameters initialised");
  if (initial_weights) {
    LoadInitialWeights(*built.engine, c, std::move(*initial_weights));
    phases.Mark("model.init_from loaded");
  }
  if (!c.lora.init_from.empty() && !resuming) {
    LoadInitialAdapters(*built.engine, c);
    phases.Mark("lora.init_from loaded");
  }
  return built;
}

LogFacts FactsOf(const Config& c, const BuiltEngine& built, const RankSetup& rank) {
  LogFacts f;
  f.max_steps = c.train.max_steps;
  f.tokens_per_step = c.train.global_batch_size * c.data.seq_len;
  const int64_t frozen = c.lora.enabled ? built.counts.total_numel - built.trainable_numel : 0;
  f.flops_per_token = TrainingFlopsPerToken(built.counts.total_numel, frozen, c.model.n_layer, AttentionWidthOf(c),
                                            c.data.seq_len);
  f.accuracy_name = built.accuracy_name;
  f.classifier = c.bert.num_labels > 0;
  f.params = built.counts.total_numel;
  f.device = rank.device.str();
  f.threads = rank.threads;
  return f;
}

TrainerSettings SettingsOf(const Config& c, const TrainOptions& options, const RankSetup& rank,
                           const LogFacts& facts) {
  TrainerSettings s;
  s.max_steps = c.train.max_steps;
  s.micro_batch_size = c.train.micro_batch_size;
  s.accumulation_steps = GradAccumSteps(c.train, rank.world);
  s.global_batch_size = c.train.global_batch_size;
  s.tokens_per_step = facts.tokens_per_step;
  s.grad_clip = c.train.grad_clip;
  s.records_accuracy = !facts.accuracy_name.empty();
  s.target_weighted_loss = c.data.format == data::DataFormat::kSft;  // the mean over the global batch's targets
  s.stop_requested = options.stop_requested;
  s.comm = options.comm;
  s.device = rank.device;
  s.run = IdentityOf(c);
  s.config_yaml = ConfigToYaml(c);
  s.version = std::string("ps_train ") + kVersion;
  return s;
}

void LogRunHeader(const Config& c, const BuiltEngine& built, const RankSetup& rank, RunData& data,
                  int64_t start_step) {
  const auto& n = built.counts;
  spdlog::info("run '{}': {} {} layers x {} wide, {} heads; {:.2f}M parameters ({:.2f}M non-embedding)", c.run.name,
               ModelKindName(c), c.model.n_layer, c.model.n_embd, c.model.n_head, n.total_numel / 1e6,
               n.non_embedding_numel / 1e6);
  if (c.lora.enabled) {
    spdlog::info("lora: rank {} adapters, {:.3f}M trainable parameters ({:.2f}% of the model); the base is frozen",
                 c.lora.r, built.trainable_numel / 1e6, 100.0 * built.trainable_numel / std::max<int64_t>(1, n.total_numel));
  }
  spdlog::info("device {}, {} CPU threads, {}; data {} ({} tokens, {} samples/epoch)", rank.device.str(), rank.threads,
               optim::ToString(c.precision.dtype), data.description(), data.num_tokens(),
               data.train().samples_per_epoch());
  spdlog::info("batch: {} micro x {} accumulation x {} ranks = {} sequences = {} tokens per step; steps {} to {}",
               c.train.micro_batch_size, GradAccumSteps(c.train, rank.world), rank.world, c.train.global_batch_size,
               c.train.global_batch_size * c.data.seq_len, start_step + 1, c.train.max_steps);
}

// Start-up's seconds and peak host memory, logged with where the time went.
struct StartupReport {
  double seconds = 0;
  int64_t peak_rss_bytes = 0;
};

StartupReport ReportStartup(const StartupPhases& phases, Clock::time_point launch, Clock::time_point run_start) {
  StartupReport r;
  r.seconds = std::chrono::duration<double>(run_start - launch).count();
  if (const auto host = ReadHostMemory()) {
    r.peak_rss_bytes = host->peak_rss_bytes;
    spdlog::info("start-up {:.1f} s ({}); host memory resident {:.2f} GiB, peak {:.2f} GiB (now {:.2f} GiB anonymous, "
                 "{:.2f} GiB mapped files)", r.seconds, phases.Describe(run_start), host->rss_bytes / 1073741824.0,
                 host->peak_rss_bytes / 1073741824.0, host->anon_bytes / 1073741824.0,
                 host->file_bytes / 1073741824.0);
  } else {  // no /proc (not Linux): the phases without the memory figures
    spdlog::info("start-up {:.1f} s ({})", r.seconds, phases.Describe(run_start));
  }
  return r;
}

// Every input checked and the run folder claimed, before any weights are read.
struct OpenedRun {
  std::optional<InitialWeights> initial_weights;  // model.init_from, mapped and checked
  RunStart start;
};

OpenedRun OpenRun(const Config& c, bool writer, const std::function<void(int64_t)>& agree, StartupPhases& phases) {
  if (c.checkpoint.export_hf) {  // a missing tokenizer or a folder that is not ours fails now, not at the end
    TokenizerFiles(TokenizerSource(c));
    if (writer) CheckExportDestination(HfExportFolder(c), /*replace=*/true, {CheckpointDir(c)}, "checkpoint.export_hf");
  }
  OpenedRun run;
  if (!c.model.init_from.empty()) run.initial_weights = ReadInitialWeights(c);  // unused on resume
  run.start = StartRun(c, writer, agree);
  phases.Mark(run.start.resume ? "run folder and checkpoint read" : "run folder");
  return run;
}

}  // namespace

TrainResult Train(const Config& c, const TrainOptions& options) {
  const auto launch = Clock::now();  // start-up: from here to the first step
  CheckRunSettings(c, options);
  const RankSetup rank = SetUpRank(c, options);
  StartupPhases phases(launch);  // where start-up goes, logged before the first step
  phases.Mark("setup");
  RunData data(c, rank.rank, rank.world);  // every input is checked before a file is written
  phases.Mark("data");
  CheckRunCanStart(c, rank.device, options.comm);  // a refused plan claims no folder (run.overwrite deletes)
  std::function<void(int64_t)> agree;  // every rank resumes the same step (or none)
  if (options.comm && rank.world > 1) {
    agree = [&](int64_t step) { CheckRanksResumeOneStep(*options.comm, step, rank.device); };
  }
  OpenedRun run = OpenRun(c, rank.writer, agree, phases);
  const BuiltEngine built =
      BuildEngine(c, rank, options.comm, run.start.resume.has_value(), std::move(run.initial_weights), phases);
  TrainingEngine& engine = *built.engine;
  const optim::LrSchedule schedule(c.optimizer.lr, c.lr_schedule, c.train.max_steps);
  // ZeRO: every rank writes its share of each checkpoint (sharded saves).
  Checkpointer checkpointer(c.checkpoint, CheckpointDir(c), IdentityOf(c),
                            engine.collective_save() ? options.comm : nullptr, rank.device);
  const LogFacts facts = FactsOf(c, built, rank);
  StepLogger logger(c.logging, facts, {run.start.metrics.get(), run.start.tensorboard.get()});
  const bool whole_set = c.data.format == data::DataFormat::kClassification;
  const EvalMean mean = c.data.format == data::DataFormat::kSft ? EvalMean::kTargets : EvalMean::kExamples;
  Evaluator evaluator(c.train, whole_set, mean, data.has_valid() ? ValidBatches([&data] { return data.Valid(); }) : nullptr,
                      engine, logger);
  CheckpointPolicy checkpoints(c.checkpoint, c.train.max_steps, {options.comm, engine.collective_save(), rank.device},
                               checkpointer, logger);
  Trainer trainer({engine, data.train(), logger, evaluator, checkpoints}, schedule, c.precision,
                  SettingsOf(c, options, rank, facts));
  if (run.start.resume) {
    trainer.Resume(*run.start.resume, run.start.resume_path);
    run.start.resume.reset();  // frees the loaded tensors
    phases.Mark("resumed");
  }
  LogRunHeader(c, built, rank, data, trainer.start_step());
  const auto run_start = Clock::now();
  const StartupReport startup = ReportStartup(phases, launch, run_start);
  TrainResult result = trainer.Run();
  result.startup_s = startup.seconds;
  result.startup_peak_rss_bytes = startup.peak_rss_bytes;
  if (!trainer.completed()) return result;  // a stop signal
  ExportAtEndOfRun(engine, c, rank.writer, logger);
  engine.FillResult(result);
  result.packing_efficiency = data.train().handed_out().packing_efficiency();
  if (const auto host = ReadHostMemory()) result.peak_rss_bytes = host->peak_rss_bytes;
  logger.LogDone(result, std::chrono::duration<double>(Clock::now() - run_start).count());
  return result;
}

}  // namespace ps::trainer
