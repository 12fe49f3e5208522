#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "data/data_config.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_steps.h"
#include "trainer/config/llama_keys.h"
#include "trainer/config/model_shape.h"

namespace ps::trainer {
namespace {

// The checks over a resolved Config, each error naming where its key was set.
class Validator {
 public:
  Validator(const Config& config, const KeyPlaces& places) : config_(config), places_(places) {}

  // run.output_dir and checkpoint.dir are folders the run creates: an empty output_dir
  // (e.g. from an unset ${VAR:-}) or a path that is, or lies under, an existing
  // non-directory is an error here rather than a file-system error later. Reads the
  // file system (symlinks followed); creates nothing.
  void ValidateOutputDirs() const {
    const auto& c = config_;
    if (c.run.output_dir.empty()) {
      throw ConfigError(At("run.output_dir") + ": run.output_dir is empty (an unset ${VAR:-}?); name the run's folder");
    }
    namespace fs = std::filesystem;
    for (const auto& [key, dir] : {std::pair<std::string, std::string>{"run.output_dir", c.run.output_dir},
                                   {"checkpoint.dir", c.checkpoint.dir}}) {
      if (dir.empty()) continue;
      for (fs::path p = fs::path(dir); !p.empty(); p = p.parent_path()) {
        std::error_code ec;
        const fs::file_status st = fs::status(p, ec);
        if (fs::exists(st) && !fs::is_directory(st)) {
          const bool self = p == fs::path(dir);
          throw ConfigError(At(key) + ": " + key + " '" + dir + "': " +
                            (self ? std::string("is a file, not a folder")
                                  : "'" + p.string() + "' is a file, not a folder, so nothing can be created under it"));
        }
        if (p == p.parent_path()) break;  // the root
      }
    }
  }

  // What model.type: bert needs and refuses.
  void ValidateModelType() const {
    const auto& c = config_;
    const bool classification = c.data.format == data::DataFormat::kClassification;
    if (classification && (c.model_type != models::ModelType::kBert || c.bert.num_labels == 0)) {
      throw ConfigError(At("data.format") + ": data.format classification trains a sequence classifier: it needs "
                        "model.type: bert and model.num_labels > 0");
    }
    if (c.bert.num_labels > 0 && !classification) {
      throw ConfigError(At("model.num_labels") + ": model.num_labels " + std::to_string(c.bert.num_labels) +
                        " fine-tunes a classifier, which reads labelled examples: set data.format: classification");
    }
    // A key at its default is no contradiction (config.resolved.yaml lists every key).
    const bool llama = c.model_type == models::ModelType::kLlama;
    for (const std::string& key : llama ? std::vector<std::string>{} : ChangedLlamaKeys(c)) {
      throw ConfigError(At(key) + ": " + key + " is a Llama key; set model.type: llama, or drop it");
    }
    if (c.model_type != models::ModelType::kBert) {
      const models::BertKeys defaults;
      const std::pair<const char*, bool> bert_keys[] = {
          {"model.intermediate_size", !llama && c.bert.intermediate_size != defaults.intermediate_size},
          {"model.type_vocab_size", c.bert.type_vocab_size != defaults.type_vocab_size},
          {"model.num_labels", c.bert.num_labels != defaults.num_labels}};
      for (const auto& [key, changed] : bert_keys) {
        if (changed) throw ConfigError(At(key) + ": " + std::string(key) + " is a BERT key; set model.type: bert, or drop it");
      }
      return;
    }
    if (!c.model.tie_word_embeddings) {
      throw ConfigError(At("model.tie_word_embeddings") +
                        ": model.tie_word_embeddings is a GPT key (BERT's MLM decoder is always tied to the word "
                        "embeddings); drop it");
    }
    const bool bytes = c.data.format == data::DataFormat::kText ||
                       (classification && c.data.tokenizer.empty() && c.model.init_from.empty());
    if (bytes && c.model.vocab_size < 260) {
      throw ConfigError(At("model.vocab_size") + ": model.vocab_size " + std::to_string(c.model.vocab_size) +
                        " is below 260: BERT on byte-level text (data.format " + data::ToString(c.data.format) +
                        " without a tokenizer) reads bytes 0-255 and needs the ids 256-259 for [PAD], [CLS], [SEP] "
                        "and [MASK]");
    }
    if (c.data.seq_len < 3) {
      throw ConfigError(At("data.seq_len") + ": data.seq_len " + std::to_string(c.data.seq_len) +
                        " leaves no room for tokens between [CLS] and [SEP] (BERT needs at least 3)");
    }
  }

  // What train.accumulation_schedule: vertical needs (the ranks are checked in Train()).
  void ValidateAccumulationSchedule() const {
    const auto& c = config_;
    if (c.train.accumulation_schedule != AccumulationSchedule::kVertical) return;
    if (c.model_type == models::ModelType::kBert) {
      throw ConfigError(At("train.accumulation_schedule") +
                        ": train.accumulation_schedule: vertical is built for GPT and Llama; use horizontal with BERT");
    }
    if (!c.model.activation_checkpointing) {
      throw ConfigError(At("train.accumulation_schedule") +
                        ": train.accumulation_schedule: vertical needs model.activation_checkpointing: true (it keeps "
                        "the block inputs of every micro-batch of the step; without checkpointing it would keep all "
                        "their activations, as one micro-batch k times the size would)");
    }
  }

  // lora.*: what the adapters need, and its keys only with lora.enabled.
  void ValidateLora() const {
    const auto& c = config_;
    const models::LoraConfig defaults;
    if (!c.lora.enabled) {
      const std::pair<const char*, bool> keys[] = {
          {"lora.r", c.lora.r != defaults.r},
          {"lora.alpha", c.lora.alpha != defaults.alpha},
          {"lora.dropout", c.lora.dropout != defaults.dropout},
          {"lora.target_modules", c.lora.target_modules != defaults.target_modules},
          {"lora.use_rslora", c.lora.use_rslora != defaults.use_rslora},
          {"lora.init_from", c.lora.init_from != defaults.init_from}};
      for (const auto& [key, changed] : keys) {
        if (changed) throw ConfigError(At(key) + ": " + key + " is set but lora.enabled is false; enable it, or drop the key");
      }
      return;
    }
    // Checked here as well as when the adapters are attached: before the run folder is touched.
    const std::vector<std::string> names = models::LoraModuleNames(models::LoraFamilyOf(c.model_type));
    for (const std::string& t : c.lora.target_modules) {
      if (std::find(names.begin(), names.end(), t) != names.end()) continue;
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw ConfigError(At("lora.target_modules") + ": lora.target_modules: '" + t +
                        "' names no module of this model; its Linear modules are: " + known);
    }
  }

  // optimizer.state_dtype other than fp32 is a chunk-runtime mode (the plain LibTorch
  // optimizer keeps its moments in the parameters' dtype).
  void ValidateOptimizerState() const {
    const auto& c = config_;
    if (c.optimizer.state_dtype != optim::StateDtype::kFp32 && !c.chunk.enabled) {
      throw ConfigError(At("optimizer.state_dtype") + ": optimizer.state_dtype " +
                        optim::ToString(c.optimizer.state_dtype) +
                        " needs chunk.enabled: true (the chunk optimizer stores the moments; the plain LibTorch "
                        "optimizer keeps them in fp32)");
    }
  }

  // optimizer.master_weights none: bf16 weights updated in place by the chunk runtime's
  // host kernels; the paths that keep or need an fp32 master are refused, naming both keys.
  void ValidateMasterWeights() const {
    const auto& c = config_;
    if (c.optimizer.master_weights != optim::MasterWeights::kNone) return;
    auto refuse = [&](const std::string& other, const std::string& why) {
      throw ConfigError(At("optimizer.master_weights") + ": optimizer.master_weights none and " + other +
                        " cannot be combined (" + why + ")");
    };
    if (!c.chunk.enabled) refuse("chunk.enabled: false", "the chunk runtime updates weights without a master");
    if (c.precision.dtype != optim::Dtype::kBf16) {
      refuse(std::string("precision.dtype ") + optim::ToString(c.precision.dtype),
             "weights without a master are bf16, stochastically rounded; set precision.dtype: bf16");
    }
    if (c.lora.enabled) refuse("lora.enabled: true", "adapters are small: keep their fp32 master");
  }

  // chunk.nvme_dir: a chunk-runtime tier for state the host Adam updates; speculation
  // updates chunks in backward, before the tier's reads in the step's order.
  void ValidateNvme() const {
    const auto& c = config_;
    if (c.chunk.nvme_dir.empty()) {  // the tier's own keys only with a tier
      const chunkmem::ChunkConfig defaults;
      const std::pair<const char*, bool> keys[] = {
          {"chunk.nvme_host_budget_bytes", c.chunk.nvme_host_budget_bytes != defaults.nvme_host_budget_bytes},
          {"chunk.nvme_ring_slots", c.chunk.nvme_ring_slots != defaults.nvme_ring_slots}};
      for (const auto& [key, changed] : keys) {
        if (changed) throw ConfigError(At(key) + ": " + key + " is set but chunk.nvme_dir is empty (no NVMe tier); "
                                       "name the tier's directory, or drop the key");
      }
      return;
    }
    if (!c.chunk.enabled) {
      throw ConfigError(At("chunk.nvme_dir") + ": chunk.nvme_dir needs chunk.enabled: true (the NVMe tier holds "
                        "chunks' optimizer state)");
    }
    if (c.optimizer.speculation_slots > 0) {
      throw ConfigError(At("chunk.nvme_dir") + ": chunk.nvme_dir and optimizer.speculation_slots " +
                        std::to_string(c.optimizer.speculation_slots) + " cannot be combined (the NVMe tier reads "
                        "each chunk's state in the step, in order; set optimizer.speculation_slots: 0)");
    }
  }

  void Validate() const {
    ValidateModelType();
    ValidateLora();
    ValidateOptimizerState();
    ValidateMasterWeights();
    ValidateNvme();
    ValidateAccumulationSchedule();
    const auto& c = config_;
    if (const auto bad = data::ChatKeyProblem(c.data, c.model_type == models::ModelType::kBert))
      throw ConfigError(At(bad->key) + ": " + bad->message);
    // Llama: its own shape checks (model.head_dim may set the head width).
    if (c.model_type != models::ModelType::kLlama && c.model.n_embd % c.model.n_head != 0) {
      throw ConfigError(At("model.n_head") + ": model.n_embd " + std::to_string(c.model.n_embd) +
                        " is not divisible by model.n_head " + std::to_string(c.model.n_head));
    }
    if (c.data.seq_len > c.model.n_positions) {
      throw ConfigError(At("data.seq_len") + ": data.seq_len " + std::to_string(c.data.seq_len) +
                        " exceeds model.n_positions " + std::to_string(c.model.n_positions));
    }
    if (c.data.format != data::DataFormat::kSynthetic && c.data.train_path.empty()) {
      throw ConfigError(At("data.format") + ": data.train_path is required for data.format " +
                        data::ToString(c.data.format));
    }
    if (c.data.format == data::DataFormat::kText && c.model.vocab_size < 256 &&
        c.model_type != models::ModelType::kBert) {
      throw ConfigError(At("model.vocab_size") + ": model.vocab_size " + std::to_string(c.model.vocab_size) +
                        " is below 256, the byte values of data.format text");
    }
    // Sizes derived from the shape must be countable in int64 (the memory plan and the
    // chunk runtime count elements and bytes in it); models/ checks the arithmetic
    // and names the shape.
    try {
      ValidateModelShape(c);
    } catch (const c10::Error& e) {
      throw ConfigError(At("model.n_embd") + ": " + e.what_without_backtrace());
    }
    try {
      // The vertical schedule keeps every micro-batch's block inputs (one rank: the most).
      const bool vertical = c.train.accumulation_schedule == AccumulationSchedule::kVertical &&
                            c.train.global_batch_size % c.train.micro_batch_size == 0;
      const int64_t kept = vertical ? c.train.global_batch_size / c.train.micro_batch_size : 1;
      ActivationBytesOf(c, c.train.micro_batch_size * c.data.seq_len, /*element_bytes=*/4, kept);
    } catch (const c10::Error& e) {
      throw ConfigError(At("train.micro_batch_size") + ": train.micro_batch_size " +
                        std::to_string(c.train.micro_batch_size) + " x data.seq_len " +
                        std::to_string(c.data.seq_len) + ": " + e.what_without_backtrace());
    }
    if (c.lr_schedule.min_lr > c.optimizer.lr) {
      throw ConfigError(At("lr_schedule.min_lr") + ": lr_schedule.min_lr is above optimizer.lr");
    }
    try {
      GradAccumSteps(c.train, 1);
    } catch (const ConfigError& e) {
      throw ConfigError(At("train.global_batch_size") + ": " + e.what());
    }
  }

 private:
  std::string At(const std::string& key) const { return places_.At(key); }

  const Config& config_;
  const KeyPlaces& places_;
};

}  // namespace

void ValidateConfig(const Config& config, const KeyPlaces& places) {
  const Validator v(config, places);
  v.Validate();
  v.ValidateOutputDirs();
}

}  // namespace ps::trainer
