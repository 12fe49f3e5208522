#include "trainer/train_loop.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/trainable.h"
#include "optim/lr_schedule.h"
#include "trainer/checkpointer.h"
#include "trainer/chunk_setup.h"
#include "trainer/config_loader.h"
#include "trainer/engine.h"
#include "trainer/file_io.h"
#include "trainer/hf_io.h"
#include "trainer/host_memory.h"
#include "trainer/metrics.h"
#include "trainer/model_factory.h"
#include "trainer/model_shape.h"
#include "trainer/rng_state.h"
#include "trainer/rank_agreement.h"
#include "trainer/run_data.h"
#include "trainer/run_folder.h"
#include "trainer/run_lock.h"
#include "trainer/tensorboard_writer.h"
#include "trainer/version.h"

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

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Sums of a model's prediction counts (LossOutput::correct / counted) over micro-batches.
struct AccuracyCounts {
  at::Tensor correct, counted;  // undefined until a model reports them
  void Add(const models::LossOutput& out) {
    if (!out.correct.defined()) return;
    correct = correct.defined() ? correct + out.correct : out.correct;
    counted = counted.defined() ? counted + out.counted : out.counted;
  }
  // Summed over the ranks too (every rank reports counts or none does).
  double Share(comm::Communicator* comm) const {
    if (!correct.defined()) return std::numeric_limits<double>::quiet_NaN();
    at::Tensor both = at::stack({correct, counted}).to(at::kDouble);
    if (comm) comm->AllReduce(both, comm::ReduceOp::kSum)->Wait();
    const double n = both[1].item<double>();
    return n > 0 ? both[0].item<double>() / n : std::numeric_limits<double>::quiet_NaN();
  }
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = std::numeric_limits<double>::quiet_NaN();
};

// Mean loss over train.eval_steps micro-batches from the start of the validation data
// (the same batches every time, masked the same way).
EvalResult Evaluate(TrainingEngine& engine, const RunData& data, const Config& c) {
  const std::unique_ptr<BatchSource> batches = data.Valid();
  engine.BeginEval();
  struct EndEval {  // also when a batch throws
    TrainingEngine& e;
    ~EndEval() { e.EndEval(); }
  } end{engine};
  // Token data: train.eval_steps micro-batches. Labelled examples: each once (the
  // last micro-batch may be smaller), so the accuracy is the validation set's.
  const bool whole_set = c.data.format == data::DataFormat::kClassification;
  const int64_t examples = whole_set ? batches->samples_per_epoch() : c.train.eval_steps * c.train.micro_batch_size;
  double sum = 0.0;
  AccuracyCounts counts;
  for (int64_t done = 0; done < examples;) {
    const int64_t n = std::min(c.train.micro_batch_size, examples - done);
    const models::Batch batch = batches->Next(n).To(engine.device());
    const models::LossOutput out = engine.EvalLoss(batch);
    sum += out.loss.item<double>() * static_cast<double>(n);  // a mean over the batch's examples
    counts.Add(out);
    done += n;
  }
  return {sum / static_cast<double>(examples), counts.Share(nullptr)};
}

// Counts consecutive fp16 steps skipped at the minimum loss scale; throws when the run
// can only skip from here on.
class DivergenceGuard {
 public:
  explicit DivergenceGuard(const optim::PrecisionConfig& p) : limit_(p.max_skips_at_min_scale), min_(p.min_loss_scale) {}
  int64_t run() const { return run_; }  // consecutive skips at the minimum so far (checkpointed)
  void set_run(int64_t n) { run_ = n; }
  void Check(const StepOutcome& o, int64_t step) {
    run_ = o.skipped && o.at_min_loss_scale ? run_ + 1 : 0;
    if (limit_ > 0 && run_ >= limit_) {
      throw std::runtime_error("fp16 training diverged: the last " + std::to_string(run_) + " steps (to step " +
                               std::to_string(step) + ") all overflowed at the minimum loss scale " +
                               std::to_string(min_) + " (precision.min_loss_scale), so every step is skipped; "
                               "lower optimizer.lr, set train.grad_clip, use precision.dtype: bf16, or resume from an "
                               "earlier checkpoint (precision.max_skips_at_min_scale sets this limit)");
    }
  }

 private:
  int64_t limit_;
  double min_;
  int64_t run_ = 0;
};

CheckpointContents Contents(const TrainingEngine& engine, const Config& c, int64_t step, int64_t consumed,
                            int64_t tokens, int64_t min_scale_skips, const SampleSchedule& samples,
                            at::Device device) {
  CheckpointContents out;
  out.step = step;
  out.samples = samples;
  const RunIdentity run = IdentityOf(c);
  out.run_name = run.name;
  out.run_output_dir = run.output_dir;
  out.min_scale_skips = min_scale_skips;
  out.consumed_samples = consumed;
  out.tokens_seen = tokens;
  out.engine = engine.Save();
  out.rng = SaveRngStates(device);
  out.fingerprint = RunFingerprint(c);
  out.config_yaml = ConfigToYaml(c);
  out.version = std::string("ps_train ") + kVersion;
  return out;
}

void WriteSaveRecords(Checkpointer& checkpointer, MetricsWriter* metrics) {
  for (const auto& r : checkpointer.TakeFinished()) {
    if (!metrics) continue;
    metrics->Write(JsonLine()
                       .Add("checkpoint_step", r.step)
                       .Add("checkpoint_path", r.path)
                       .Add("checkpoint_bytes", r.bytes)
                       .Add("save_snapshot_s", r.snapshot_s)
                       .Add("save_write_s", r.write_s)
                       .Add("save_background", r.background));
  }
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

// Event files of earlier runs in `dir` (a run that starts afresh starts a fresh tb/, as
// it does metrics.jsonl; a continued run adds a file beside its earlier ones, and
// TensorBoard drops their steps after the resumed one when it reads the new file's).
void RemoveEventFiles(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) std::filesystem::remove(entry.path());
  }
}

// `writer`: rank 0 (or the only rank) claims the folder and opens the sinks; the other
// ranks of a data-parallel run only find the checkpoint to resume.
RunStart StartRun(const Config& c, bool writer) {
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
  if (!writer) return s;
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
  if (!continue_metrics) RemoveEventFiles(tb_dir);
  if (c.logging.tensorboard) s.tensorboard = std::make_unique<TensorBoardWriter>(tb_dir.string());
  return s;
}

// The TensorBoard tag of a numeric field of a step's metrics line: grouped by concern,
// so TensorBoard shows one section each; engine fields (chunk counters) under engine/.
std::string TensorBoardTag(const std::string& key) {
  for (const char* k : {"loss", "lr", "grad_norm", "tokens"}) {
    if (key == k) return "train/" + key;
  }
  for (const char* k : {"tokens_per_s", "tflops", "step_ms", "forward_ms", "backward_ms", "optimizer_ms"}) {
    if (key == k) return "perf/" + key;
  }
  for (const char* k : {"loss_scale", "skipped_steps"}) {
    if (key == k) return "precision/" + key;
  }
  return "engine/" + key;
}

// Where the figures of a logged step or an evaluation go.
struct LogSinks {
  MetricsWriter* metrics = nullptr;
  TensorBoardWriter* tensorboard = nullptr;
};

// One optimizer step's figures.
struct StepRecord {
  double loss = 0, lr = 0;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // BERT: share of predictions right
  StepOutcome outcome;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, step_s = 0;
};

// Runs optimizer step `step` (from 1): micro-batches with accumulation, then the update.
StepRecord RunStep(TrainingEngine& engine, BatchSource& batches, const Config& c, int64_t accum, double lr,
                   int64_t step, comm::Communicator* comm) {
  const at::Device device = engine.device();
  // logging.step_breakdown: phase boundaries wait for the device so each phase's time is its own.
  auto phase_end = [&]() {
    if (c.logging.step_breakdown && device.is_cuda()) torch::cuda::synchronize(device.index());
    return Clock::now();
  };
  const auto t0 = Clock::now();
  StepRecord r;
  r.lr = lr;
  engine.BeginStep(lr);
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device));
  AccuracyCounts counts;
  std::vector<models::LossOutput> outs;  // every micro-batch's loss and accuracy counts
  if (VerticalAccumulation(c.train, comm ? comm->world_size() : 1)) {  // each block over every micro-batch, one backward
    std::vector<models::Batch> micro_batches;
    for (int64_t micro = 0; micro < accum; ++micro) micro_batches.push_back(batches.Next(c.train.micro_batch_size).To(device));
    const auto forward_start = phase_end();
    outs = engine.ForwardMany(micro_batches, accum);
    at::Tensor loss = outs.front().loss;
    for (size_t m = 1; m < outs.size(); ++m) loss = loss + outs[m].loss;
    const auto backward_start = phase_end();
    r.forward_ms += MsBetween(forward_start, backward_start);
    engine.Backward(loss);
    r.backward_ms += MsBetween(backward_start, phase_end());
  } else {
    for (int64_t micro = 0; micro < accum; ++micro) {
      const models::Batch batch = batches.Next(c.train.micro_batch_size).To(device);
      const auto forward_start = phase_end();
      outs.push_back(engine.Forward(batch, accum));
      const auto backward_start = phase_end();
      r.forward_ms += MsBetween(forward_start, backward_start);
      engine.Backward(outs.back().loss);
      r.backward_ms += MsBetween(backward_start, phase_end());
      outs.back().loss = outs.back().loss.detach();  // the graph is not kept past its backward
    }
  }
  for (const auto& out : outs) {
    loss_sum += out.loss.detach();
    counts.Add(out);
  }
  engine.SyncGradients();
  if (comm) comm->AllReduce(loss_sum, comm::ReduceOp::kAvg)->Wait();  // the loss of the global batch
  const double max_norm = c.train.grad_clip > 0 ? c.train.grad_clip : std::numeric_limits<double>::infinity();
  const auto optimizer_start = phase_end();
  r.outcome = engine.OptimizerStep(lr, max_norm);
  r.optimizer_ms = MsBetween(optimizer_start, phase_end());
  if (r.outcome.skipped && !r.outcome.overflow_tolerated) {
    throw std::runtime_error("gradient norm became " + std::to_string(r.outcome.grad_norm) + " at step " +
                             std::to_string(step) + " (lower optimizer.lr or set train.grad_clip)");
  }
  engine.EndStep(step);
  r.loss = loss_sum.item<double>();  // host sync: the step is done
  r.accuracy = counts.Share(comm);
  r.step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!std::isfinite(r.loss) && !r.outcome.overflow_tolerated) {
    throw std::runtime_error("training loss became " + std::to_string(r.loss) + " at step " + std::to_string(step) +
                             " (lower optimizer.lr or set train.grad_clip)");
  }
  return r;
}

void LogStep(const StepRecord& r, int64_t step, int64_t tokens_seen, double tokens_per_s, double tflops, double eta_s,
             const Config& c, TrainingEngine& engine, const std::string& accuracy_name, const LogSinks& sinks) {
  StepLine console;
  console.step = step;
  console.max_steps = c.train.max_steps;
  console.loss = r.loss;
  console.lr = r.lr;
  console.grad_norm = r.outcome.grad_norm;
  console.step_ms = r.step_s * 1e3;
  console.tokens_per_s = tokens_per_s;
  console.tflops = tflops;
  console.eta_s = eta_s;
  spdlog::info("{}", FormatStepLine(console));
  JsonLine line;
  line.Add("step", step)
      .Add("loss", r.loss)
      .Add("lr", r.lr)
      .Add("grad_norm", r.outcome.grad_norm)
      .Add("step_ms", r.step_s * 1e3)
      .Add("tokens_per_s", tokens_per_s)
      .Add("tflops", tflops)
      .Add("tokens", tokens_seen);
  if (!accuracy_name.empty()) line.Add(accuracy_name, r.accuracy);
  if (c.logging.step_breakdown) {
    line.Add("forward_ms", r.forward_ms).Add("backward_ms", r.backward_ms).Add("optimizer_ms", r.optimizer_ms);
  }
  engine.AddStepMetrics(line, r.outcome);
  if (const auto host = ReadHostMemory()) {  // resident memory now and its peak so far (issue #9 §3)
    line.Add("host_rss_bytes", host->rss_bytes)
        .Add("host_peak_rss_bytes", host->peak_rss_bytes)
        .Add("host_anon_bytes", host->anon_bytes)
        .Add("host_file_bytes", host->file_bytes);
  }
  if (sinks.metrics) sinks.metrics->Write(line);
  if (sinks.tensorboard) {
    std::vector<std::pair<std::string, double>> scalars;
    for (const auto& [key, value] : line.numeric_fields()) {
      if (key != "step") scalars.emplace_back(TensorBoardTag(key), value);
    }
    sinks.tensorboard->WriteScalars(step, scalars);
  }
}

// A language model's evaluation has a perplexity; a classifier's has none.
void LogEval(const EvalResult& eval, int64_t step, const std::string& accuracy_name, bool classifier,
             const LogSinks& sinks) {
  const double perplexity = Perplexity(eval.loss);
  const bool accuracy = !accuracy_name.empty();
  spdlog::info("eval  {:>5} | loss {:.4f}{}{}", step, eval.loss,
               classifier ? std::string() : fmt::format(" | perplexity {:.3f}", perplexity),
               accuracy ? fmt::format(" | {} {:.4f}", accuracy_name, eval.accuracy) : std::string());
  std::vector<std::pair<std::string, double>> scalars = {{"eval/loss", eval.loss}};
  if (!classifier) scalars.emplace_back("eval/perplexity", perplexity);
  if (accuracy) scalars.emplace_back("eval/" + accuracy_name, eval.accuracy);
  if (sinks.metrics) {
    JsonLine line;
    line.Add("step", step);
    for (const auto& [tag, value] : scalars) line.Add("eval_" + tag.substr(5), value);
    sinks.metrics->Write(line);
  }
  if (sinks.tensorboard) sinks.tensorboard->WriteScalars(step, scalars);
}

void WriteSummary(MetricsWriter& metrics, const TrainResult& result, const Config& c, double elapsed_s,
                  double flops_per_token, int64_t params, at::Device device, int threads) {
  JsonLine line;
  line.Add("summary", true)
      .Add("steps", c.train.max_steps)
      .Add("start_step", result.start_step)
      .Add("first_loss", result.losses.front())
      .Add("final_loss", result.losses.back())
      .Add("final_eval_loss", result.final_eval_loss)
      .Add("final_eval_perplexity", Perplexity(result.final_eval_loss))
      .Add("tokens_per_s", result.tokens_per_s)
      .Add("tflops", flops_per_token * result.tokens_per_s / 1e12)
      .Add("elapsed_s", elapsed_s)
      .Add("startup_s", result.startup_s)
      .Add("startup_peak_rss_bytes", result.startup_peak_rss_bytes)
      .Add("peak_rss_bytes", result.peak_rss_bytes)
      .Add("params", params)
      .Add("device", device.str())
      .Add("threads", static_cast<int64_t>(threads));
  if (!result.accuracies.empty()) {
    line.Add("final_accuracy", result.accuracies.back()).Add("final_eval_accuracy", result.final_eval_accuracy);
  }
  if (result.model_data_bytes > 0) {  // chunk runs: this rank's chunks (ZeRO: the ones it owns), and the host pool
    line.Add("model_data_bytes", result.model_data_bytes)
        .Add("host_pool_bytes", result.host_pool_bytes)
        .Add("peak_host_pool_used_bytes", result.peak_host_pool_used_bytes);
  }
  metrics.Write(line);
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

// What the loop carries from step to step besides the engine and the sampler.
struct RunProgress {
  int64_t start_step = 0;   // optimizer steps done before this process started
  int64_t tokens_seen = 0;
  DivergenceGuard divergence;
  SampleSchedule samples;   // how consumed_samples grows in this run's segment
};

// Restores a checkpoint's state into the engine, the sampler, the generators and `progress`.
void ResumeFrom(const CheckpointContents& r, const std::string& path, const Config& c, at::Device device,
                TrainingEngine& engine, BatchSource& batches, RunProgress& progress, MetricsWriter* metrics) {
  LogConfigChanges(r.config_yaml, ConfigToYaml(c));
  engine.Load(r.engine);
  batches.set_consumed_samples(r.consumed_samples);
  RestoreRngStates(r.rng, device);
  progress.start_step = r.step;
  progress.divergence.set_run(r.min_scale_skips);
  progress.tokens_seen = r.tokens_seen;
  // The sampler's schedule goes on, or a new segment starts where the batch size changed.
  if (r.samples.global_batch_size != c.train.global_batch_size) {
    progress.samples = {r.step, r.consumed_samples, c.train.global_batch_size};
  } else {
    progress.samples = r.samples;
  }
  spdlog::info("resumed from {} (step {}, {} samples consumed, written by {})", path, r.step, r.consumed_samples,
               r.version);
  if (metrics) metrics->Write(JsonLine().Add("resumed_from_step", r.step).Add("checkpoint_path", path));
}

// The stop signal this step acts on: this process's, or with several ranks the largest
// any rank got, so that every rank stops at the same step.
int AgreedStopSignal(const TrainOptions& options, at::Device device) {
  int signal = options.stop_requested ? options.stop_requested->load() : 0;
  if (options.comm) {
    at::Tensor flag = at::full({1}, static_cast<int64_t>(signal), at::TensorOptions().dtype(at::kLong).device(device));
    options.comm->AllReduce(flag, comm::ReduceOp::kMax)->Wait();
    signal = static_cast<int>(flag.item<int64_t>());
  }
  return signal;
}

// Whether to save at this step: `due` as this rank sees it, agreed over the ranks when
// Save is collective (a time-based interval may fall due on one rank first).
bool SaveDue(bool due, const TrainingEngine& engine, const TrainOptions& options, at::Device device) {
  if (!engine.collective_save() || options.comm == nullptr) return due;
  at::Tensor flag = at::full({1}, static_cast<int64_t>(due), at::TensorOptions().dtype(at::kLong).device(device));
  options.comm->AllReduce(flag, comm::ReduceOp::kMax)->Wait();
  return flag.item<int64_t>() != 0;
}

// checkpoint.export_hf: from the checkpoint just written at the end when there is one.
void ExportAtEndOfRun(TrainingEngine& engine, const Config& c, MetricsWriter* metrics) {
  const std::string final_checkpoint =
      c.checkpoint.at_end ? CheckpointDir(c) + "/step_" + std::to_string(c.train.max_steps) : std::string();
  const HfExportReport exported = ExportAtEnd(engine, c, final_checkpoint);
  if (metrics) metrics->Write(JsonLine().Add("hf_export", exported.folder).Add("hf_export_bytes", exported.bytes));
}

// The "done" console line and the metrics summary.
void ReportDone(const TrainResult& result, const Config& c, double elapsed_s, double flops_per_token, int64_t params,
                at::Device device, int threads, MetricsWriter* metrics) {
  if (result.losses.empty()) {
    spdlog::info("done: nothing to train (the checkpoint is at step {} = train.max_steps)", result.start_step);
    return;
  }
  // The evaluation's figure: perplexity for a language model, accuracy for a classifier.
  const std::string eval_figure = c.bert.num_labels > 0
                                      ? fmt::format("accuracy {:.4f}", result.final_eval_accuracy)
                                      : fmt::format("perplexity {:.3f}", Perplexity(result.final_eval_loss));
  spdlog::info("done: steps {} to {} in {:.1f} s (start-up {:.1f} s) | loss {:.4f} -> {:.4f} | eval {:.4f} ({}) | {} "
               "tok/s | {:.3f} TFLOPS",
               result.start_step + 1, c.train.max_steps, elapsed_s, result.startup_s, result.losses.front(),
               result.losses.back(),
               result.final_eval_loss, eval_figure, FormatThousands(result.tokens_per_s),
               flops_per_token * result.tokens_per_s / 1e12);
  if (metrics) WriteSummary(*metrics, result, c, elapsed_s, flops_per_token, params, device, threads);
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

}  // namespace

TrainResult Train(const Config& c, const TrainOptions& options) {
  const auto launch = Clock::now();  // start-up: from here to the first step
  if (c.precision.dtype == optim::Dtype::kFp16 && !c.chunk.enabled) {
    throw ConfigError("precision.dtype: fp16 needs chunk.enabled: true (the chunk optimizer owns the loss scaler); "
                      "use bf16 or fp32 without chunks");
  }
  CheckAccumulationSchedule(c, options.comm ? options.comm->world_size() : 1);
  if (c.distributed.force_collectives && options.comm == nullptr) {
    throw ConfigError("distributed.force_collectives: the run has no communicator (ps_train's main builds one)");
  }
  const int world = options.comm ? options.comm->world_size() : 1;
  const int rank = options.comm ? options.comm->rank() : 0;
  const bool writer = rank == 0;
  const int64_t accum = GradAccumSteps(c.train, world);
  const int threads = CpuThreads(c.run);
  at::set_num_threads(threads);
  const at::Device device = RankDevice(c, world, options.local_rank);
  if (options.comm && world > 1) CheckRanksAgree(*options.comm, c, device);  // before any sized collective
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  StartupPhases phases(launch);  // where start-up goes (issue #9 §4), logged before the first step
  phases.Mark("setup");
  RunData data(c, rank, world);  // every input is checked before a file is written
  phases.Mark("data");
  if (c.checkpoint.export_hf) {  // a missing tokenizer or a folder that is not ours fails now, not at the end
    TokenizerFiles(TokenizerSource(c));
    if (writer) CheckExportDestination(HfExportFolder(c), /*replace=*/true, {CheckpointDir(c)}, "checkpoint.export_hf");
  }
  // model.init_from's weights mapped and checked before anything is written (unused on resume).
  std::optional<InitialWeights> initial_weights;
  if (!c.model.init_from.empty()) initial_weights = ReadInitialWeights(c);
  RunStart start = StartRun(c, writer);
  MetricsWriter* metrics = start.metrics.get();
  const LogSinks sinks{metrics, start.tensorboard.get()};
  phases.Mark(start.resume ? "run folder and checkpoint read" : "run folder");

  // Parameters get their initial values in the engine (in place, or in their chunk
  // slots), each from a generator of its own (models/param_init.h); those model.init_from
  // provides, or a resumed checkpoint (all of them), are not randomly initialised at all.
  models::InitPlan init{static_cast<uint64_t>(c.run.seed), {}};
  init.all_provided = start.resume.has_value();
  if (start.resume) initial_weights.reset();
  for (const auto& [name, tensor] : initial_weights ? initial_weights->params : models::TensorMap{}) {
    init.provided.insert(name);
  }
  std::unique_ptr<models::TrainableModel> model = MakeModel(c);  // uninitialised
  phases.Mark("model built");
  const auto counts = model->CountParameters();  // before an engine takes the storage
  const std::string accuracy_name = model->accuracy_name();
  std::unique_ptr<TrainingEngine> engine = MakeEngine(std::move(model), c, device, init, options.comm);
  phases.Mark(c.chunk.enabled ? "chunks placed and initialised" : "parameters initialised");
  if (initial_weights) {
    LoadInitialWeights(*engine, c, std::move(*initial_weights));
    phases.Mark("model.init_from loaded");
  }
  const optim::LrSchedule schedule(c.optimizer.lr, c.lr_schedule, c.train.max_steps);
  // ZeRO: every rank writes its share of each checkpoint (sharded saves).
  Checkpointer checkpointer(c.checkpoint, CheckpointDir(c), IdentityOf(c),
                            engine->collective_save() ? options.comm : nullptr, device);
  TrainResult result;
  result.final_eval_loss = std::numeric_limits<double>::quiet_NaN();
  result.final_eval_accuracy = std::numeric_limits<double>::quiet_NaN();
  const int64_t tokens_per_step = c.train.global_batch_size * c.data.seq_len;
  RunProgress progress{0, 0, DivergenceGuard(c.precision), SampleSchedule{0, 0, c.train.global_batch_size}};
  if (start.resume) {
    ResumeFrom(*start.resume, start.resume_path, c, device, *engine, data.train(), progress, metrics);
    start.resume.reset();  // frees the loaded tensors
    phases.Mark("resumed");
  }
  result.start_step = progress.start_step;
  const double flops_per_token = TrainingFlopsPerToken(counts.total_numel, c.model.n_layer, c.model.n_embd, c.data.seq_len);
  spdlog::info("run '{}': {} {} layers x {} wide, {} heads; {:.2f}M parameters ({:.2f}M non-embedding)", c.run.name,
               ModelKindName(c),
               c.model.n_layer, c.model.n_embd, c.model.n_head, counts.total_numel / 1e6, counts.non_embedding_numel / 1e6);
  spdlog::info("device {}, {} CPU threads, {}; data {} ({} tokens, {} samples/epoch)", device.str(), threads,
               optim::ToString(c.precision.dtype), data.description(), data.num_tokens(),
               data.train().samples_per_epoch());
  spdlog::info("batch: {} micro x {} accumulation x {} ranks = {} sequences = {} tokens per step; steps {} to {}",
               c.train.micro_batch_size, accum, world, c.train.global_batch_size, tokens_per_step,
               result.start_step + 1, c.train.max_steps);

  double timed_s = 0.0;
  int64_t timed_tokens = 0;
  const auto run_start = Clock::now();
  Clock::time_point first_step_end;  // the ETA's pace: wall time per step after the first
  result.startup_s = std::chrono::duration<double>(run_start - launch).count();
  if (const auto host = ReadHostMemory()) {
    result.startup_peak_rss_bytes = host->peak_rss_bytes;
    spdlog::info("start-up {:.1f} s ({}); host memory resident {:.2f} GiB, peak {:.2f} GiB (now {:.2f} GiB anonymous, "
                 "{:.2f} GiB mapped files)", result.startup_s, phases.Describe(run_start), host->rss_bytes / 1073741824.0,
                 host->peak_rss_bytes / 1073741824.0, host->anon_bytes / 1073741824.0,
                 host->file_bytes / 1073741824.0);
  } else {  // no /proc (not Linux): the phases without the memory figures
    spdlog::info("start-up {:.1f} s ({})", result.startup_s, phases.Describe(run_start));
  }
  for (int64_t step = result.start_step + 1; step <= c.train.max_steps; ++step) {
    const StepRecord r = RunStep(*engine, data.train(), c, accum, schedule.LrAt(step - 1), step, options.comm);
    progress.divergence.Check(r.outcome, step);
    progress.tokens_seen += tokens_per_step;
    result.losses.push_back(r.loss);
    if (!accuracy_name.empty()) result.accuracies.push_back(r.accuracy);
    result.lrs.push_back(r.lr);
    result.loss_scales.push_back(r.outcome.loss_scale);
    result.skipped.push_back(r.outcome.skipped);
    const bool first = step == result.start_step + 1, last = step == c.train.max_steps;
    const auto step_end = Clock::now();
    if (first) first_step_end = step_end;
    if (!first || last) {  // the first step (warm-up, allocations) is not timed unless it is the only one
      timed_s += r.step_s;
      timed_tokens += tokens_per_step;
    }
    if (step % c.logging.log_every == 0 || first || last) {
      const double tokens_per_s = tokens_per_step / r.step_s;
      // Wall time, evaluations and checkpoints included; the first step (warm-up) only
      // until there is another.
      const int64_t paced_steps = step - (result.start_step + 1);
      const double s_per_step =
          paced_steps > 0 ? std::chrono::duration<double>(step_end - first_step_end).count() / paced_steps : r.step_s;
      LogStep(r, step, progress.tokens_seen, tokens_per_s, flops_per_token * tokens_per_s / 1e12,
              s_per_step * static_cast<double>(c.train.max_steps - step), c, *engine, accuracy_name, sinks);
    }
    if (options.abort_after_step == step) return result;  // tests: as if killed here
    if (data.has_valid() && (last || (c.train.eval_every > 0 && step % c.train.eval_every == 0))) {
      const EvalResult eval = Evaluate(*engine, data, c);
      result.final_eval_loss = eval.loss;
      result.final_eval_accuracy = eval.accuracy;
      LogEval(eval, step, accuracy_name, c.bert.num_labels > 0, sinks);
    }
    const int signal = AgreedStopSignal(options, device);
    if (SaveDue(signal != 0 || (last && c.checkpoint.at_end) || checkpointer.Due(step), *engine, options, device) &&
        (writer || engine->collective_save())) {
      if (signal != 0) spdlog::warn("signal {} received: saving a checkpoint at step {} and stopping", signal, step);
      // A collective Save (ZeRO) runs on every rank, and each writes its share.
      checkpointer.Save(Contents(*engine, c, step, data.train().consumed_samples(), progress.tokens_seen,
                                 progress.divergence.run(), progress.samples, device));
    }
    if (signal != 0) checkpointer.Wait();
    WriteSaveRecords(checkpointer, metrics);
    if (signal != 0) {
      if (metrics) metrics->Write(JsonLine().Add("stopped_by_signal", static_cast<int64_t>(signal)).Add("step", step));
      result.stop_signal = signal;
      return result;
    }
  }
  checkpointer.Wait();
  WriteSaveRecords(checkpointer, metrics);
  if (c.checkpoint.export_hf && writer) {
    ExportAtEndOfRun(*engine, c, metrics);
  } else if (c.checkpoint.export_hf && engine->collective_save() && !c.checkpoint.at_end) {
    engine->GatherParams();  // rank 0's export gathers the weights from every rank
  }
  result.tokens_per_s = timed_s > 0 ? timed_tokens / timed_s : 0.0;
  engine->FillResult(result);
  if (const auto host = ReadHostMemory()) result.peak_rss_bytes = host->peak_rss_bytes;
  ReportDone(result, c, std::chrono::duration<double>(Clock::now() - run_start).count(), flops_per_token,
             counts.total_numel, device, threads, metrics);
  return result;
}

}  // namespace ps::trainer
