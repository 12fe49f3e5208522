#include "trainer/train_loop.h"

#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>

#include "chunkmem/chunk_store.h"
#include "data/batch_sampler.h"
#include "data/token_source.h"
#include "models/gpt.h"
#include "optim/lr_schedule.h"
#include "trainer/chunk_setup.h"
#include "trainer/config_loader.h"
#include "trainer/metrics.h"

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

// Enables autocast to `dtype` on `device` for its lifetime (bf16 compute, fp32 weights).
class AutocastScope {
 public:
  AutocastScope(at::Device device, optim::Dtype dtype) : type_(device.type()) {
    enabled_ = dtype == optim::Dtype::kBf16;
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, false);
    at::autocast::clear_cache();
  }

 private:
  at::DeviceType type_;
  bool enabled_ = false;
};

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(models::Gpt& model, const optim::OptimizerConfig& c) {
  // Weight decay on matrices only (nanoGPT/Megatron convention): biases and norm
  // weights are 1-D and never decayed.
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : model->BlockParameters()) (p.tensor.dim() >= 2 ? decay : no_decay).push_back(p.tensor);
  const auto betas = std::make_tuple(c.betas[0], c.betas[1]);
  if (c.type == optim::OptimizerType::kAdamW) {
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(c.lr).betas(betas).eps(c.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, opts(c.weight_decay));
    groups.emplace_back(no_decay, opts(0.0));
    return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
  }
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(c.lr).betas(betas).eps(c.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, opts(c.weight_decay));
  groups.emplace_back(no_decay, opts(0.0));
  return std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(c.lr));
}

void SetLr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

// Mean loss over `steps` micro-batches from the start of `source` (same batches every time).
double Evaluate(models::Gpt& model, const data::TokenSource& source, const Config& c, at::Device device,
                ChunkSetup& chunks) {
  torch::NoGradGuard no_grad;
  model->eval();
  struct PauseTrace {  // evaluation neither advances nor records moments, even if it throws
    chunkmem::ChunkRuntime* rt;
    explicit PauseTrace(chunkmem::ChunkRuntime* r) : rt(r) {
      if (rt) rt->set_trace_paused(true);
    }
    ~PauseTrace() {
      if (rt) rt->set_trace_paused(false);
    }
  } pause(chunks.runtime.get());
  data::BatchSampler sampler(source, c.data.seq_len, /*shuffle=*/false, 0);
  AutocastScope autocast(device, c.precision.dtype);
  double sum = 0.0;
  for (int64_t i = 0; i < c.train.eval_steps; ++i) {
    auto batch = sampler.Next(c.train.micro_batch_size).to(device);
    auto x = batch.narrow(1, 0, c.data.seq_len), y = batch.narrow(1, 1, c.data.seq_len);
    sum += model->Loss(x, y, chunks.hooks.get()).item<double>();
  }
  model->train();
  return sum / static_cast<double>(c.train.eval_steps);
}

}  // namespace

TrainResult Train(const Config& c) {
  if (c.precision.dtype == optim::Dtype::kFp16 && !c.chunk.enabled) {
    throw ConfigError("precision.dtype: fp16 needs chunk.enabled: true (the chunk optimizer owns the loss scaler); "
                      "use bf16 or fp32 without chunks");
  }
  const int64_t accum = GradAccumSteps(c.train, /*world_size=*/1);
  const int threads = CpuThreads(c.run);
  at::set_num_threads(threads);
  const at::Device device = ChooseDevice(c.run.device);
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));

  std::filesystem::create_directories(c.run.output_dir);
  {
    std::ofstream resolved(std::filesystem::path(c.run.output_dir) / "config.resolved.yaml");
    resolved << ConfigToYaml(c);
  }
  std::unique_ptr<MetricsWriter> metrics;
  if (c.logging.jsonl) {
    const auto path = std::filesystem::path(c.run.output_dir) / "metrics.jsonl";
    std::filesystem::remove(path);  // one run per file
    metrics = std::make_unique<MetricsWriter>(path.string());
  }

  auto train_source = data::OpenTokenSource(c.data.format, c.data.train_path, c.model.vocab_size,
                                            static_cast<uint64_t>(c.run.seed), c.data.synthetic_tokens);
  std::unique_ptr<data::TokenSource> valid_source;
  if (c.data.format == data::DataFormat::kSynthetic) {
    valid_source = data::OpenTokenSource(c.data.format, "", c.model.vocab_size,
                                         static_cast<uint64_t>(c.run.seed) + 1, c.data.synthetic_tokens);
  } else if (!c.data.valid_path.empty()) {
    valid_source = data::OpenTokenSource(c.data.format, c.data.valid_path, c.model.vocab_size, 0, 0);
  }
  data::BatchSampler sampler(*train_source, c.data.seq_len, c.data.shuffle, static_cast<uint64_t>(c.run.seed));

  models::Gpt model(c.model);
  // A chunk run leaves the freshly initialised model on the host: the chunk runtime copies
  // each parameter into the (host) chunks and releases it, so a model larger than the
  // device never has to fit there whole.
  if (!c.chunk.enabled) model->to(device);
  model->train();
  const auto counts = model->CountParameters();  // before the chunk runtime takes the storage
  ChunkSetup chunks;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (c.chunk.enabled) {
    chunks = MakeChunkSetup(model, c, device);
    spdlog::info("chunks: {}", chunks.runtime->layout().Summary());
    if (chunks.runtime->layout().utilization_ratio() < 0.5) {
      spdlog::warn("chunks are {:.0f}% padding: chunk.size_elements {} is large for this model; "
                   "chunk.size_elements: auto picks the size with the least padding",
                   100.0 * (1.0 - chunks.runtime->layout().utilization_ratio()), c.chunk.size_elements);
    }
    if (c.chunk.cpu_embedding) {
      std::string names;
      for (const auto& n : chunks.host_param_names) names += (names.empty() ? "" : ", ") + n;
      spdlog::info("chunk.cpu_embedding: {} on the host in fp32, updated by the CPU Adam kernels{}", names,
                   c.model.tie_word_embeddings ? " (wte is tied to the LM head on the device, so it stays in chunks)"
                                               : "");
    }
    if (chunks.probe) {
      spdlog::info("traced device budget: chunks + non-model memory within {} bytes; warm-up chunk share {}",
                   chunks.store->Budget(chunkmem::Tier::kDevice), c.chunk.warmup_device_chunk_ratio);
    }
    spdlog::info("optimizer: hybrid {} (device chunks after warm-up: {}), CPU kernels: {}, loss scale: {}",
                 optim::ToString(c.optimizer.type), c.optimizer.hybrid_adam ? "by margin" : "none (all on the CPU)",
                 optim::ToString(chunks.adam->cpu_isa()),
                 chunks.scaler->enabled() ? fmt::format("{:g}", chunks.scaler->scale()) : std::string("none"));
  } else {
    optimizer = MakeOptimizer(model, c.optimizer);
  }
  optim::LrSchedule schedule(c.optimizer.lr, c.lr_schedule, c.train.max_steps);
  std::vector<at::Tensor> params;
  for (const auto& p : model->BlockParameters()) params.push_back(p.tensor);

  const int64_t tokens_per_step = c.train.global_batch_size * c.data.seq_len;
  const double flops_per_token =
      TrainingFlopsPerToken(counts.total_numel, c.model.n_layer, c.model.n_embd, c.data.seq_len);
  spdlog::info("run '{}': GPT {} layers x {} wide, {} heads; {:.2f}M parameters ({:.2f}M non-embedding)",
               c.run.name, c.model.n_layer, c.model.n_embd, c.model.n_head, counts.total_numel / 1e6,
               counts.non_embedding_numel / 1e6);
  spdlog::info("device {}, {} CPU threads, {}; data {} ({} tokens, {} samples/epoch)", device.str(), threads,
               optim::ToString(c.precision.dtype), train_source->description(), train_source->num_tokens(),
               sampler.samples_per_epoch());
  spdlog::info("batch: {} micro x {} accumulation = {} sequences = {} tokens per step; {} steps",
               c.train.micro_batch_size, accum, c.train.global_batch_size, tokens_per_step, c.train.max_steps);

  TrainResult result;
  result.final_eval_loss = std::numeric_limits<double>::quiet_NaN();
  double timed_s = 0.0;
  int64_t timed_tokens = 0;
  const auto run_start = Clock::now();
  // logging.step_breakdown: phase boundaries wait for the device so each phase's time is its own.
  auto phase_end = [&]() {
    if (c.logging.step_breakdown && device.is_cuda()) torch::cuda::synchronize(device.index());
    return Clock::now();
  };
  auto ms_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  for (int64_t step = 0; step < c.train.max_steps; ++step) {
    const auto t0 = Clock::now();
    double forward_ms = 0, backward_ms = 0;
    const double move_ms_before = chunks.runtime ? chunks.runtime->stats().move_ms : 0.0;
    const double lr = schedule.LrAt(step);
    if (optimizer) {
      SetLr(*optimizer, lr);
      optimizer->zero_grad(/*set_to_none=*/true);
    } else {
      chunks.runtime->ZeroGrads();
    }
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device));
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto batch = sampler.Next(c.train.micro_batch_size).to(device);
      auto x = batch.narrow(1, 0, c.data.seq_len), y = batch.narrow(1, 1, c.data.seq_len);
      at::Tensor loss;
      const auto forward_start = phase_end();
      {
        // Chunk mode computes in the chunks' dtype directly; plain bf16 uses autocast.
        AutocastScope autocast(device, chunks.runtime ? optim::Dtype::kFp32 : c.precision.dtype);
        loss = model->Loss(x, y, chunks.hooks.get()) / static_cast<double>(accum);
      }
      const auto backward_start = phase_end();
      forward_ms += ms_between(forward_start, backward_start);
      if (chunks.scaler && chunks.scaler->enabled()) {
        (loss * chunks.scaler->scale()).backward();  // fp16: the optimizer divides it out
      } else {
        loss.backward();
      }
      if (chunks.runtime) chunks.runtime->AfterBackward();
      backward_ms += ms_between(backward_start, phase_end());
      loss_sum += loss.detach();
    }
    const double max_norm = c.train.grad_clip > 0 ? c.train.grad_clip : std::numeric_limits<double>::infinity();
    double grad_norm = 0.0;
    optim::StepReport adam_report;
    const auto optimizer_start = phase_end();
    Clock::time_point optimizer_end;
    if (optimizer) {
      grad_norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
      optimizer->step();
      optimizer_end = phase_end();
    } else {
      adam_report = chunks.adam->Step(lr, max_norm, *chunks.scaler);
      grad_norm = adam_report.grad_norm;
      chunks.runtime->EndIteration();
      optimizer_end = phase_end();
      if (adam_report.skipped) {
        if (!chunks.scaler->enabled()) {
          throw std::runtime_error("gradient norm became " + std::to_string(grad_norm) + " at step " +
                                   std::to_string(step + 1) + " (lower optimizer.lr or set train.grad_clip)");
        }
        spdlog::warn("step {}: gradient overflow at loss scale {}; step skipped, scale now {}", step + 1,
                     adam_report.loss_scale, chunks.scaler->scale());
      }
      if (chunks.timeline && step + 1 == std::min(c.chunk.timeline_steps, c.train.max_steps)) {
        const auto path = std::filesystem::path(c.run.output_dir) / "chunk_timeline.json";
        chunks.timeline->WriteChromeTrace(path.string());
        chunks.runtime->set_timeline(nullptr);
        chunks.timeline.reset();
        spdlog::info("chunk timeline of the first {} steps: {}", step + 1, path.string());
      }
    }
    const double optimizer_ms = ms_between(optimizer_start, optimizer_end);
    const double loss = loss_sum.item<double>();  // host sync: the step is done
    const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!std::isfinite(loss) && !(chunks.scaler && chunks.scaler->enabled() && adam_report.skipped)) {
      throw std::runtime_error("training loss became " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                               " (lower optimizer.lr or set train.grad_clip)");
    }
    result.losses.push_back(loss);
    if (chunks.runtime) {
      result.loss_scales.push_back(adam_report.loss_scale);
      result.skipped.push_back(adam_report.skipped);
      result.adam_device_chunks = adam_report.device_chunks;
      result.adam_host_chunks = adam_report.host_chunks;
    }
    result.lrs.push_back(lr);
    if (step > 0 || c.train.max_steps == 1) {
      timed_s += step_s;
      timed_tokens += tokens_per_step;
    }
    const double tokens_per_s = tokens_per_step / step_s;
    const double tflops = flops_per_token * tokens_per_s / 1e12;
    const bool last = step + 1 == c.train.max_steps;
    if ((step + 1) % c.logging.log_every == 0 || step == 0 || last) {
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.3e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | {:.3f} TFLOPS",
                   step + 1, c.train.max_steps, loss, lr, grad_norm, step_s * 1e3, tokens_per_s, tflops);
      JsonLine line;
      line.Add("step", step + 1)
          .Add("loss", loss)
          .Add("lr", lr)
          .Add("grad_norm", grad_norm)
          .Add("step_ms", step_s * 1e3)
          .Add("tokens_per_s", tokens_per_s)
          .Add("tflops", tflops)
          .Add("tokens", (step + 1) * tokens_per_step);
      if (c.logging.step_breakdown) {
        line.Add("forward_ms", forward_ms).Add("backward_ms", backward_ms).Add("optimizer_ms", optimizer_ms);
      }
      if (chunks.runtime) {
        const auto& ss = chunks.store->stats();
        const auto& rs = chunks.runtime->stats();
        line.Add("device_chunk_bytes", ss.device_bytes)
            .Add("host_chunk_bytes", ss.host_bytes)
            .Add("peak_device_chunk_bytes", ss.peak_device_bytes)
            .Add("h2d_bytes", ss.h2d_bytes)
            .Add("d2h_bytes", ss.d2h_bytes)
            .Add("evictions", rs.evictions)
            .Add("fetches", rs.fetches)
            .Add("prefetches", rs.prefetches)
            .Add("prefetch_hits", rs.prefetch_hits)
            .Add("chunk_budget_bytes", chunks.runtime->MinChunkBudgetBytes())
            .Add("non_model_peak_bytes", rs.peak_non_model_bytes)
            .Add("peak_device_total_bytes", rs.peak_device_total_bytes)
            .Add("budget_overruns", rs.budget_overruns)
            .Add("loss_scale", adam_report.loss_scale)
            .Add("skipped_steps", chunks.scaler->state().overflows)
            .Add("adam_device_chunks", static_cast<int64_t>(adam_report.device_chunks))
            .Add("adam_host_chunks", static_cast<int64_t>(adam_report.host_chunks))
            .Add("adam_host_ms", adam_report.host_ms)
            .Add("adam_device_ms", adam_report.device_ms)
            .Add("chunk_move_ms", rs.move_ms - move_ms_before);
        result.peak_device_chunk_bytes = std::max(result.peak_device_chunk_bytes, ss.peak_device_bytes);
        chunks.store->ResetPeaks();
      }
      if (metrics) metrics->Write(line);
    }
    const bool eval_now = valid_source && (last || (c.train.eval_every > 0 && (step + 1) % c.train.eval_every == 0));
    if (eval_now) {
      result.final_eval_loss = Evaluate(model, *valid_source, c, device, chunks);
      spdlog::info("eval  {:>5} | loss {:.4f}", step + 1, result.final_eval_loss);
      if (metrics) metrics->Write(JsonLine().Add("step", step + 1).Add("eval_loss", result.final_eval_loss));
    }
  }
  result.tokens_per_s = timed_s > 0 ? timed_tokens / timed_s : 0.0;
  if (chunks.runtime) {
    result.peak_device_chunk_bytes = std::max(result.peak_device_chunk_bytes, chunks.store->stats().peak_device_bytes);
    result.device_budget_bytes = chunks.store->Budget(chunkmem::Tier::kDevice);
    result.evictions = chunks.runtime->stats().evictions;
    result.prefetch_hits = chunks.runtime->stats().prefetch_hits;
    result.skipped_steps = chunks.scaler->state().overflows;
    if (chunks.probe) {
      result.traced_capacity_bytes = chunks.store->Budget(chunkmem::Tier::kDevice);
      result.peak_non_model_bytes = chunks.runtime->stats().peak_non_model_bytes;
      result.peak_device_total_bytes = chunks.runtime->stats().peak_device_total_bytes;
      result.min_chunk_budget_bytes = chunks.runtime->MinChunkBudgetBytes();
    }
    const auto& rt = *chunks.runtime;
    for (int chunk = 0; chunk < rt.layout().num_chunks(); ++chunk) {
      result.compute_chunk_bytes += chunks.store->chunk_bytes(rt.chunk_id(chunkmem::ChunkKind::kCompute, chunk));
    }
    for (int id = 0; id < chunks.store->num_chunks(); ++id) result.model_data_bytes += chunks.store->chunk_bytes(id);
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  spdlog::info("done: {} steps in {:.1f} s | loss {:.4f} -> {:.4f} | eval {:.4f} | {:.0f} tok/s | {:.3f} TFLOPS",
               c.train.max_steps, elapsed_s, result.losses.front(), result.losses.back(), result.final_eval_loss,
               result.tokens_per_s, flops_per_token * result.tokens_per_s / 1e12);
  if (metrics) {
    metrics->Write(JsonLine()
                       .Add("summary", true)
                       .Add("steps", c.train.max_steps)
                       .Add("first_loss", result.losses.front())
                       .Add("final_loss", result.losses.back())
                       .Add("final_eval_loss", result.final_eval_loss)
                       .Add("tokens_per_s", result.tokens_per_s)
                       .Add("tflops", flops_per_token * result.tokens_per_s / 1e12)
                       .Add("elapsed_s", elapsed_s)
                       .Add("params", counts.total_numel)
                       .Add("device", device.str())
                       .Add("threads", static_cast<int64_t>(threads)));
  }
  return result;
}

}  // namespace ps::trainer
