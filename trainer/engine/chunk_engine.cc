#include "trainer/engine/chunk_engine.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/config/config_loader.h"
#include "trainer/engine/autocast_scope.h"
#include "trainer/engine/engine_state_io.h"
#include "trainer/engine/train_result.h"

namespace ps::trainer {
namespace {

using chunkmem::ChunkKind;

void LogSetup(const ChunkSetup& s, const Config& c) {
  spdlog::info("chunks: {}", s.runtime->layout().Summary());
  if (s.runtime->layout().utilization_ratio() < 0.5) {
    spdlog::warn("chunks are {:.0f}% padding: chunk.size_elements {} is large for this model; "
                 "chunk.size_elements: auto picks the size with the least padding",
                 100.0 * (1.0 - s.runtime->layout().utilization_ratio()), c.chunk.size_elements);
  }
  if (c.chunk.cpu_embedding) {
    std::string names;
    for (const auto& n : s.host_param_names) names += (names.empty() ? "" : ", ") + n;
    const bool gpt = c.model_type != models::ModelType::kBert;  // GPT and Llama: next-token decoders
    const bool tied = gpt ? c.model.tie_word_embeddings : c.bert.num_labels == 0;
    spdlog::info("chunk.cpu_embedding: {} on the host in fp32, updated by the CPU Adam kernels{}", names,
                 !tied ? ""
                 : gpt ? " (the token embedding is tied to the LM head on the device, so it stays in chunks)"
                       : " (the word embedding is tied to the MLM decoder on the device, so it stays in chunks)");
  }
  if (s.probe) {
    spdlog::info("traced device budget: chunks + non-model memory within {} bytes; warm-up chunk share {}",
                 s.store->Budget(chunkmem::Tier::kDevice), c.chunk.warmup_device_chunk_ratio);
  }
  spdlog::info("optimizer: hybrid {} (optimizer state of {} of {} chunks on the device from start-up), CPU kernels: {}, "
               "loss scale: {}",
               optim::ToString(c.optimizer.type), s.adam->device_chunks().size(), s.runtime->layout().num_chunks(),
               optim::ToString(s.adam->cpu_isa()),
               s.scaler->enabled() ? fmt::format("{:g}", s.scaler->scale()) : std::string("none"));
  if (const chunkmem::NvmeState* nvme = s.runtime->nvme()) {
    int on_tier = 0;
    for (int chunk = 0; chunk < s.runtime->layout().num_chunks(); ++chunk) on_tier += nvme->on_nvme(chunk) ? 1 : 0;
    spdlog::info("NVMe tier: the optimizer state of {} chunks in {} ({:.2f} GiB, {}), through {} host slots ({:.1f} MiB)",
                 on_tier, c.chunk.nvme_dir, nvme->file_bytes() / 1073741824.0, nvme->backend(), nvme->ring_slots(),
                 nvme->ring_bytes() / 1048576.0);
  }
}

}  // namespace

ChunkEngine::ChunkEngine(std::unique_ptr<models::TrainableModel> model, const Config& config, at::Device device,
                         const models::InitPlan& init, comm::Communicator* comm)
    : model_(std::move(model)), comm_(comm), config_(config), device_(device) {
  // The model stays on the host: the runtime writes each parameter's initial values
  // into the (host) chunks and releases its storage, so a model larger than the device
  // never has to fit there.
  model_->module().train();
  chunks_ = MakeChunkSetup(*model_, config_, device_, init, comm_);
  LogSetup(chunks_, config_);
}

void ChunkEngine::BeginStep(double lr) {
  step_lr_ = lr;
  micro_batch_ = 0;
  move_ms_at_step_start_ = chunks_.runtime->stats().move_ms;
  comm_bytes_at_step_start_ = chunks_.runtime->stats().comm_bytes;
  chunks_.runtime->ZeroGrads();
}

models::LossOutput ChunkEngine::Forward(const models::Batch& batch, int64_t accum_steps, double loss_divisor) {
  // The last micro-batch's gradients are final: host chunks may update as they complete.
  if (++micro_batch_ == accum_steps) BeginFinalBackward();
  // The chunks hold the compute dtype already: no autocast.
  models::LossOutput out = model_->Loss(batch, chunks_.hooks.get());
  out.loss = out.loss / loss_divisor;
  return out;
}

std::vector<models::LossOutput> ChunkEngine::ForwardMany(const std::vector<models::Batch>& batches,
                                                         const std::vector<double>& loss_divisors) {
  micro_batch_ += static_cast<int64_t>(batches.size());
  BeginFinalBackward();  // the one backward gives every gradient of the step
  std::vector<models::LossOutput> outs = model_->LossMany(batches, chunks_.hooks.get());
  for (size_t m = 0; m < outs.size(); ++m) outs[m].loss = outs[m].loss / loss_divisors[m];
  return outs;
}

void ChunkEngine::BeginFinalBackward() {
  if (config_.optimizer.speculation_slots == 0) return;
  chunks_.runtime->set_final_micro_batch(true);
  chunks_.adam->BeginSpeculation(step_lr_, chunks_.scaler->scale());
}

void ChunkEngine::Backward(const at::Tensor& loss) {
  if (chunks_.scaler->enabled()) {
    (loss * chunks_.scaler->scale()).backward();  // fp16: the optimizer divides it out
  } else {
    loss.backward();
  }
  chunks_.runtime->AfterBackward();
}

void ChunkEngine::SyncGradients() {
  if (comm_ == nullptr) return;  // chunk gradients were reduce-scattered group by group in backward
  // Parameters outside the chunks (chunk.cpu_embedding) are replicated: average their gradients.
  at::NoGradGuard no_grad;
  for (const auto& hp : chunks_.adam->host_param_states()) {
    at::Tensor grad = hp.param.grad();
    if (!grad.defined()) continue;
    if (comm_->backend() == std::string("nccl")) {  // NCCL reduces device tensors only
      at::Tensor on_device = grad.to(device_);
      comm_->AllReduce(on_device, comm::ReduceOp::kAvg)->Wait();
      grad.copy_(on_device);
    } else {
      comm_->AllReduce(grad, comm::ReduceOp::kAvg)->Wait();
    }
  }
}

StepOutcome ChunkEngine::OptimizerStep(double lr, double max_norm) {
  last_report_ = chunks_.adam->Step(lr, max_norm, *chunks_.scaler);
  chunks_.runtime->set_final_micro_batch(false);
  chunks_.runtime->EndIteration();
  StepOutcome out;
  out.grad_norm = last_report_.grad_norm;
  out.skipped = last_report_.skipped;
  out.overflow_tolerated = last_report_.skipped && chunks_.scaler->enabled();
  out.loss_scale = last_report_.loss_scale;
  out.at_min_loss_scale = chunks_.scaler->mode() == optim::LossScaler::Mode::kDynamic &&
                          last_report_.loss_scale <= config_.precision.min_loss_scale;
  if (out.overflow_tolerated) {
    spdlog::warn("gradient overflow at loss scale {}; step skipped, scale now {}", last_report_.loss_scale,
                 chunks_.scaler->scale());
  }
  return out;
}

void ChunkEngine::EndStep(int64_t step) {
  if (chunks_.timeline && step == std::min(config_.chunk.timeline_steps, config_.train.max_steps)) {
    const auto path = std::filesystem::path(config_.run.output_dir) / "chunk_timeline.json";
    chunks_.timeline->WriteChromeTrace(path.string());
    chunks_.runtime->set_timeline(nullptr);
    chunks_.timeline.reset();
    spdlog::info("chunk timeline of the first {} steps: {}", step, path.string());
  }
}

// Evaluation neither advances nor records moments (EndEval always un-pauses).
void ChunkEngine::BeginEval() {
  model_->module().eval();
  chunks_.runtime->set_trace_paused(true);
}

models::LossOutput ChunkEngine::EvalLoss(const models::Batch& batch) {
  at::NoGradGuard no_grad;
  AutocastScope autocast(device_, config_.precision.dtype);
  return model_->Loss(batch, chunks_.hooks.get());
}

void ChunkEngine::EndEval() {
  chunks_.runtime->set_trace_paused(false);
  model_->module().train();
}

void ChunkEngine::AddStepMetrics(MetricFields& fields) {
  const auto& ss = chunks_.store->stats();
  const auto& rs = chunks_.runtime->stats();
  fields.Add("device_chunk_bytes", ss.device_bytes)
      .Add("host_chunk_bytes", ss.host_bytes)
      .Add("host_pool_bytes", ss.host_pool_bytes)
      .Add("peak_host_pool_used_bytes", ss.peak_host_pool_used_bytes)
      .Add("peak_device_chunk_bytes", ss.peak_device_bytes)
      .Add("h2d_bytes", ss.h2d_bytes)
      .Add("d2h_bytes", ss.d2h_bytes)
      .Add("h2d_copies", ss.h2d_copies)
      .Add("d2h_copies", ss.d2h_copies)
      .Add("chunk_syncs", ss.syncs)
      .Add("grad_flushes", rs.grad_flushes)
      .Add("grad_host_fallbacks", rs.grad_host_fallbacks)
      .Add("grad_chunks_on_device", static_cast<int64_t>(rs.grad_chunks_on_device))
      .Add("evictions", rs.evictions)
      .Add("fetches", rs.fetches)
      .Add("prefetches", rs.prefetches)
      .Add("prefetch_hits", rs.prefetch_hits)
      .Add("chunk_budget_bytes", chunks_.runtime->MinChunkBudgetBytes())
      .Add("non_model_peak_bytes", rs.peak_non_model_bytes)
      .Add("peak_device_total_bytes", rs.peak_device_total_bytes)
      .Add("budget_overruns", rs.budget_overruns)
      .Add("loss_scale", last_report_.loss_scale)
      .Add("skipped_steps", chunks_.scaler->state().overflows)
      .Add("adam_device_chunks", static_cast<int64_t>(last_report_.device_chunks))
      .Add("adam_host_chunks", static_cast<int64_t>(last_report_.host_chunks))
      .Add("adam_host_ms", last_report_.host_ms)
      .Add("adam_speculated", static_cast<int64_t>(last_report_.speculated_chunks))
      .Add("adam_rolled_back", static_cast<int64_t>(last_report_.rolled_back_chunks))
      .Add("adam_device_ms", last_report_.device_ms)
      .Add("chunk_move_ms", rs.move_ms - move_ms_at_step_start_);
  if (const chunkmem::NvmeState* nvme = chunks_.runtime->nvme()) {  // cumulative
    const chunkmem::NvmeFileStats fs = nvme->file_stats();
    fields.Add("nvme_read_bytes", fs.read_bytes)
        .Add("nvme_written_bytes", fs.written_bytes)
        .Add("nvme_transient_retries", fs.transient_retries)
        .Add("nvme_wait_ms", nvme->ring_stats().wait_ms);
  }
  if (comm_ != nullptr) {
    fields.Add("group_gathers", rs.group_gathers)
        .Add("group_prefetches", rs.group_prefetches)
        .Add("group_reductions", rs.group_reductions)
        .Add("reductions_overlapped", rs.reductions_overlapped)
        .Add("comm_bytes", rs.comm_bytes - comm_bytes_at_step_start_);
  }
  peak_device_chunk_bytes_ = std::max(peak_device_chunk_bytes_, ss.peak_device_bytes);
  chunks_.store->ResetPeaks();
}

void ChunkEngine::FillResult(TrainResult& result) const {
  const auto& store = *chunks_.store;
  const auto& rt = *chunks_.runtime;
  result.peak_device_chunk_bytes = std::max(peak_device_chunk_bytes_, store.stats().peak_device_bytes);
  result.device_budget_bytes = store.Budget(chunkmem::Tier::kDevice);
  result.host_pool_bytes = store.stats().host_pool_bytes;
  result.peak_host_pool_used_bytes = store.stats().peak_host_pool_used_bytes;
  result.evictions = rt.stats().evictions;
  result.prefetch_hits = rt.stats().prefetch_hits;
  result.skipped_steps = chunks_.scaler->state().overflows;
  result.adam_device_chunks = last_report_.device_chunks;
  result.adam_host_chunks = last_report_.host_chunks;
  if (chunks_.probe) {
    result.traced_capacity_bytes = store.Budget(chunkmem::Tier::kDevice);
    result.peak_non_model_bytes = rt.stats().peak_non_model_bytes;
    result.peak_device_total_bytes = rt.stats().peak_device_total_bytes;
    result.min_chunk_budget_bytes = rt.MinChunkBudgetBytes();
  }
  // This rank's model data: the chunks it owns (all of them with one process).
  for (int chunk = 0; chunk < rt.layout().num_chunks(); ++chunk) {
    if (!rt.owned(chunk)) continue;
    result.compute_chunk_bytes += store.chunk_bytes(rt.chunk_id(ChunkKind::kCompute, chunk));
    std::vector<int> ids;
    for (ChunkKind kind : {ChunkKind::kCompute, ChunkKind::kGrad, ChunkKind::kMaster, ChunkKind::kAdamM,
                           ChunkKind::kAdamV}) {
      const int id = rt.chunk_id(kind, chunk);  // -1: none (a frozen chunk's other kinds)
      if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);  // shared ids count once
    }
    for (int id : ids) result.model_data_bytes += store.chunk_bytes(id);
  }
}

}  // namespace ps::trainer
