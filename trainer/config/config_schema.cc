#include "trainer/config/config_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace ps::trainer {

const char* ToString(DeviceKind d) {
  switch (d) {
    case DeviceKind::kAuto: return "auto";
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

namespace {

std::string Scalar(const YAML::Node& node, const char* expected) {
  if (!node.IsScalar()) throw std::invalid_argument(std::string("expected ") + expected);
  return node.Scalar();
}

int64_t ToInt(const YAML::Node& node) {
  const std::string s = Scalar(node, "an integer");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) {
    throw std::invalid_argument("expected an integer, got '" + s + "'");
  }
  return v;
}

double ToFloat(const YAML::Node& node) {
  const std::string s = Scalar(node, "a number");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v)) {
    throw std::invalid_argument("expected a number, got '" + s + "'");
  }
  return v;
}

bool ToBool(const YAML::Node& node) {
  std::string s = Scalar(node, "true or false");
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "true") return true;
  if (s == "false") return false;
  throw std::invalid_argument("expected true or false, got '" + node.Scalar() + "'");
}

std::string ToText(const YAML::Node& node) {
  if (node.IsNull()) return "";
  return Scalar(node, "a string");
}

// Shortest decimal text that reads back to the same double.
std::string FormatFloat(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // Keep it a float in YAML's eyes ("1" -> "1.0"), except for exponents.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

using IntCheck = std::function<void(int64_t)>;
using FloatCheck = std::function<void(double)>;

IntCheck MinInt(int64_t lo) {
  return [lo](int64_t v) {
    if (v < lo) throw std::invalid_argument("must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
  };
}

// [lo, hi]: beyond `hi` a value is nonsense (and products of such values could
// overflow int64 downstream), so it is an error rather than a silent truncation.
IntCheck IntRange(int64_t lo, int64_t hi) {
  return [lo, hi](int64_t v) {
    if (v < lo || v > hi) {
      throw std::invalid_argument("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                  std::to_string(v));
    }
  };
}

// [lo, hi], or open at either end: (lo, hi] with lo_open, [lo, hi) with hi_open.
FloatCheck FloatRange(double lo, double hi, bool lo_open = false, bool hi_open = false) {
  return [=](double v) {
    if (v < lo || v > hi || (lo_open && v == lo) || (hi_open && v == hi)) {
      throw std::invalid_argument("must be in " + std::string(lo_open ? "(" : "[") + FormatFloat(lo) + ", " +
                                  FormatFloat(hi) + (hi_open ? ")" : "]") + ", got " + FormatFloat(v));
    }
  };
}

constexpr double kInf = 1e300;

// Upper bounds of integer keys: far above any real run, low enough that the sizes
// derived from them stay countable in int64 (the largest shape has 1.2e15 parameters,
// 2.2e16 bytes of model data; the activation estimate is checked in the loader).
constexpr int64_t kMaxThreads = 4096;
constexpr int64_t kMaxLayers = 10000;                // GPT-3 175B: 96
constexpr int64_t kMaxHeads = 10000;                 // GPT-3 175B: 96
constexpr int64_t kMaxEmbd = 100000;                 // GPT-3 175B: 12288
constexpr int64_t kMaxPositions = 10000000;          // also data.seq_len
constexpr int64_t kMaxVocab = 10000000;              // Llama 3: 128256
constexpr int64_t kMaxMicroBatch = 1000000;
constexpr int64_t kMaxGlobalBatch = 1000000000;
constexpr int64_t kMaxSteps = 1000000000000;         // steps, step intervals, micro-batches per evaluation
constexpr int64_t kMaxTokens = 1000000000000;        // data.synthetic_tokens
constexpr int64_t kMaxChunkNumel = 1000000000000;    // elements per chunk
constexpr int64_t kMaxBytes = 1000000000000000000;   // byte budgets (1 EB)

// Generic accessors: `access` is a lambda `[](auto& c) -> auto& { return c.x.y; }`,
// usable with Config& and const Config&.
template <typename Access>
FieldSpec Int(std::string key, Access access, std::string help, IntCheck check = MinInt(0)) {
  return {std::move(key), "int", std::move(help),
          [=](Config& c, const YAML::Node& n) {
            const int64_t v = ToInt(n);
            check(v);
            access(c) = v;
          },
          [=](const Config& c) { return std::to_string(access(c)); }};
}

// An int in [1, max] where the word "auto" stands for 0.
template <typename Access>
FieldSpec IntOrAuto(std::string key, Access access, std::string help, int64_t max) {
  return {std::move(key), "int or auto", std::move(help),
          [=](Config& c, const YAML::Node& n) {
            if (n.IsScalar() && n.Scalar() == "auto") {
              access(c) = 0;
              return;
            }
            const int64_t v = ToInt(n);
            if (v < 1 || v > max) {
              throw std::invalid_argument("must be in [1, " + std::to_string(max) + "] or auto, got " +
                                          std::to_string(v));
            }
            access(c) = v;
          },
          [=](const Config& c) { return access(c) == 0 ? std::string("auto") : std::to_string(access(c)); }};
}

template <typename Access>
FieldSpec Float(std::string key, Access access, std::string help, FloatCheck check) {
  return {std::move(key), "float", std::move(help),
          [=](Config& c, const YAML::Node& n) {
            const double v = ToFloat(n);
            check(v);
            access(c) = v;
          },
          [=](const Config& c) { return FormatFloat(access(c)); }};
}

template <typename Access>
FieldSpec Bool(std::string key, Access access, std::string help) {
  return {std::move(key), "bool", std::move(help),
          [=](Config& c, const YAML::Node& n) { access(c) = ToBool(n); },
          [=](const Config& c) { return std::string(access(c) ? "true" : "false"); }};
}

template <typename Access>
FieldSpec Text(std::string key, Access access, std::string help) {
  return {std::move(key), "string", std::move(help),
          [=](Config& c, const YAML::Node& n) { access(c) = ToText(n); },
          [=](const Config& c) { return Quote(access(c)); }};
}

// Enum from a fixed list of names (matched case-insensitively: PatrickStar writes "Adam").
template <typename E, typename Access>
FieldSpec Enum(std::string key, Access access, std::string help,
               std::vector<std::pair<std::string, E>> choices) {
  std::string names;
  for (const auto& ch : choices) names += (names.empty() ? "" : "|") + ch.first;
  return {std::move(key), "one of " + names, std::move(help),
          [=](Config& c, const YAML::Node& n) {
            std::string s = Scalar(n, ("one of " + names).c_str());
            std::string lower = s;
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            for (const auto& ch : choices) {
              if (ch.first == lower) {
                access(c) = ch.second;
                return;
              }
            }
            throw std::invalid_argument("expected one of " + names + ", got '" + s + "'");
          },
          [=](const Config& c) {
            for (const auto& ch : choices) {
              if (ch.second == access(c)) return ch.first;
            }
            return std::string("?");
          }};
}

template <typename Access>
FieldSpec FloatList(std::string key, Access access, std::string help, size_t length,
                    FloatCheck check) {
  return {std::move(key), "list of " + std::to_string(length) + " floats", std::move(help),
          [=](Config& c, const YAML::Node& n) {
            if (!n.IsSequence() || n.size() != length) {
              throw std::invalid_argument("expected a list of " + std::to_string(length) +
                                          " numbers, e.g. [0.9, 0.95]");
            }
            std::vector<double> v;
            for (const auto& item : n) {
              v.push_back(ToFloat(item));
              check(v.back());
            }
            access(c) = v;
          },
          [=](const Config& c) {
            std::string s = "[";
            for (size_t i = 0; i < access(c).size(); ++i) {
              s += (i ? ", " : "") + FormatFloat(access(c)[i]);
            }
            return s + "]";
          }};
}

// A list of non-empty strings (module names): a YAML sequence, or [] for none.
template <typename Access>
FieldSpec TextList(std::string key, Access access, std::string help) {
  return {std::move(key), "list of strings", std::move(help),
          [=](Config& c, const YAML::Node& n) {
            if (!n.IsSequence()) throw std::invalid_argument("expected a list of names, e.g. [q_proj, v_proj]");
            std::vector<std::string> v;
            for (const auto& item : n) {
              v.push_back(Scalar(item, "a name"));
              if (v.back().empty()) throw std::invalid_argument("an empty name in the list");
            }
            access(c) = v;
          },
          [=](const Config& c) {
            std::string s = "[";
            for (size_t i = 0; i < access(c).size(); ++i) s += (i ? ", " : "") + Quote(access(c)[i]);
            return s + "]";
          }};
}

#define PS_ACCESS(member) [](auto& c) -> auto& { return c.member; }

}  // namespace

std::vector<FieldSpec> BuildConfigSchema() {
  using data::DataFormat;
  using optim::Dtype;
  using optim::OptimizerType;
  using optim::ScheduleType;
  return {
      Int("schema_version", PS_ACCESS(schema_version), "config format version; must be 1",
          [](int64_t v) {
            if (v != 1) throw std::invalid_argument("only schema_version 1 exists, got " + std::to_string(v));
          }),
      // run
      Text("run.name", PS_ACCESS(run.name),
           "run name, shown in logs; with run.output_dir it names the run that owns a checkpoint (resume: auto, "
           "checkpoint.keep and run.overwrite touch only its own)"),
      Text("run.output_dir", PS_ACCESS(run.output_dir),
           "folder for metrics.jsonl and config.resolved.yaml (created; must not be empty or lie under a file)"),
      Int("run.seed", PS_ACCESS(run.seed), "seed of model init, data order and dropout"),
      Int("run.threads", PS_ACCESS(run.threads), "CPU threads for LibTorch ops; 0 = all cores",
          IntRange(0, kMaxThreads)),
      Enum<DeviceKind>("run.device", PS_ACCESS(run.device),
                       "auto = CUDA when this build and machine have it, else CPU",
                       {{"auto", DeviceKind::kAuto}, {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}}),
      Bool("run.overwrite", PS_ACCESS(run.overwrite),
           "start afresh, never resuming: an earlier run's metrics, config and checkpoints in output_dir are "
           "deleted first; false = an output_dir holding another run is an error unless this run resumes it"),
      // model
      Enum<models::ModelType>("model.type", PS_ACCESS(model_type),
                              "gpt (next-token prediction), bert (masked LM, or sequence classification with "
                              "model.num_labels) or llama (a Llama-family decoder: Llama 2/3.x, Qwen2/2.5, Qwen3, "
                              "Mistral, SmolLM2, TinyLlama; next-token prediction)",
                              {{"gpt", models::ModelType::kGpt}, {"bert", models::ModelType::kBert},
                               {"llama", models::ModelType::kLlama}}),
      Text("model.preset", PS_ACCESS(model.preset),
           "named size (gpt: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, GPT2small, GPT2_1B, ... GPT_175B; bert: "
           "bert-base, bert-large, Bert, Bertlarge; llama: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen2.5-0.5b, "
           "qwen2.5-1.5b, qwen2.5-7b, qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, mistral-7b-v0.3, smollm2-135m, "
           "smollm2-360m, smollm2-1.7b, tinyllama-1.1b); fills the shape keys this config leaves unset; shape keys set as well must equal "
           "the preset's"),
      Text("model.init_from", PS_ACCESS(model.init_from),
           "local HF folder (GPT-2; BERT with model.type bert; LlamaForCausalLM, Qwen2ForCausalLM, "
           "Qwen3ForCausalLM or MistralForCausalLM with model.type llama: config.json + model.safetensors or a "
           "sharded index; bf16/fp16 weights become fp32 masters) whose weights start the run; its config.json fills the shape keys left unset; empty = random init"),
      Int("model.n_layer", PS_ACCESS(model.n_layer), "transformer blocks", IntRange(1, kMaxLayers)),
      Int("model.n_head", PS_ACCESS(model.n_head), "attention heads (divides n_embd)", IntRange(1, kMaxHeads)),
      Int("model.n_embd", PS_ACCESS(model.n_embd), "hidden width", IntRange(1, kMaxEmbd)),
      Int("model.n_positions", PS_ACCESS(model.n_positions), "position table length (>= data.seq_len)",
          IntRange(1, kMaxPositions)),
      Int("model.vocab_size", PS_ACCESS(model.vocab_size), "vocabulary size; token ids must be below it",
          IntRange(1, kMaxVocab)),
      Float("model.dropout", PS_ACCESS(model.dropout), "dropout probability (llama: attention dropout only)",
            FloatRange(0.0, 0.99)),
      Float("model.layer_norm_eps", PS_ACCESS(model.layer_norm_eps), "LayerNorm epsilon (llama: RMSNorm epsilon, HF rms_norm_eps)",
            FloatRange(0.0, 1.0, true)),
      Float("model.init_std", PS_ACCESS(model.init_std), "std of the N(0, std) init", FloatRange(0.0, 10.0, true)),
      Bool("model.tie_word_embeddings", PS_ACCESS(model.tie_word_embeddings), "LM head shares the token embedding"),
      Bool("model.activation_checkpointing", PS_ACCESS(model.activation_checkpointing),
           "recompute each block's activations in backward instead of storing them"),
      Int("model.loss_slice_tokens", PS_ACCESS(model.loss_slice_tokens),
          "tokens per slice of the LM head and cross-entropy of the losses (bert: masked tokens), computed again "
          "in backward: the [tokens, vocab] logits are never whole; 0 = as many as keep a slice's fp32 logits "
          "within 256 MiB (512 tokens for a 128k vocabulary)",
          IntRange(0, kMaxTokens)),
      Int("model.intermediate_size", PS_ACCESS(bert.intermediate_size),
          "bert and llama: MLP width (llama: the SwiGLU width); 0 = 4 x n_embd", IntRange(0, int64_t{1} << 24)),
      Int("model.type_vocab_size", PS_ACCESS(bert.type_vocab_size), "bert only: segment ids (token types)",
          IntRange(1, 1024)),
      Int("model.num_labels", PS_ACCESS(bert.num_labels),
          "bert only: > 0 fine-tunes a sequence classifier with this many labels; 0 = masked-LM pre-training",
          IntRange(0, 1 << 20)),
      Int("model.num_key_value_heads", PS_ACCESS(llama.num_key_value_heads),
          "llama only: key/value heads (grouped-query attention); 0 = n_head; must divide n_head (1 = multi-query)",
          IntRange(0, kMaxHeads)),
      Int("model.head_dim", PS_ACCESS(llama.head_dim),
          "llama only: width of one attention head; 0 = n_embd / n_head (then n_head must divide n_embd)",
          IntRange(0, kMaxEmbd)),
      Float("model.rope_theta", PS_ACCESS(llama.rope_theta), "llama only: rotary embedding base",
            FloatRange(0.0, kInf, true)),
      Enum<models::RopeScalingType>("model.rope_scaling.type", PS_ACCESS(llama.rope_scaling.type),
                                    "llama only: long-context rescaling of the rotary frequencies (HF rope_type): "
                                    "none; linear (every frequency / factor); llama3 (Llama 3.1's, by wavelength)",
                                    {{"none", models::RopeScalingType::kNone},
                                     {"linear", models::RopeScalingType::kLinear},
                                     {"llama3", models::RopeScalingType::kLlama3}}),
      Float("model.rope_scaling.factor", PS_ACCESS(llama.rope_scaling.factor),
            "llama only, rope_scaling linear or llama3: the context extension factor", FloatRange(0.0, kInf, true)),
      Float("model.rope_scaling.low_freq_factor", PS_ACCESS(llama.rope_scaling.low_freq_factor),
            "llama only, rope_scaling llama3: wavelengths above original / low_freq_factor are divided by factor",
            FloatRange(0.0, kInf, true)),
      Float("model.rope_scaling.high_freq_factor", PS_ACCESS(llama.rope_scaling.high_freq_factor),
            "llama only, rope_scaling llama3: wavelengths below original / high_freq_factor are kept",
            FloatRange(0.0, kInf, true)),
      Int("model.rope_scaling.original_max_position_embeddings",
          PS_ACCESS(llama.rope_scaling.original_max_position_embeddings),
          "llama only, rope_scaling llama3: the pre-training context length", IntRange(1, kMaxPositions)),
      Bool("model.attention_bias", PS_ACCESS(llama.attention_bias),
           "llama only: the q/k/v and output projections have biases (HF Llama's attention_bias)"),
      Bool("model.qkv_bias", PS_ACCESS(llama.qkv_bias), "llama only: the q/k/v projections have biases (Qwen2)"),
      Bool("model.qk_norm", PS_ACCESS(llama.qk_norm),
           "llama only: per-head RMSNorm of queries and keys before the rotation (Qwen3)"),
      Int("model.sliding_window", PS_ACCESS(llama.sliding_window),
          "llama only: > 0 = each token attends to at most this many tokens, itself included (Mistral); 0 = off",
          IntRange(0, kMaxPositions)),
      // data
      Enum<DataFormat>("data.format", PS_ACCESS(data.format),
                       "auto (inferred from data.train_path: a .bin/.idx pair = megatron, sft with a .mask beside, "
                       "an llm.c header = llmc, "
                       ".jsonl/.json/.tsv = classification, UTF-8 text = text, anything else an error; no path is an "
                       "error), synthetic (random tokens; no paths allowed), text (bytes of any file), llmc (llm.c "
                       "shard), raw_u16, raw_u32, megatron (<prefix>.bin/.idx; data.train_path is the prefix), "
                       "classification (labelled text, .jsonl or .tsv, for model.type bert with model.num_labels), "
                       "sft (chat examples from ps_prep --format sft: <prefix>.bin/.idx/.mask, the loss on the "
                       "masked-in tokens only; GPT and Llama)",
                       {{"auto", DataFormat::kAuto}, {"synthetic", DataFormat::kSynthetic}, {"text", DataFormat::kText},
                        {"llmc", DataFormat::kLlmc}, {"raw_u16", DataFormat::kRawU16},
                        {"raw_u32", DataFormat::kRawU32}, {"megatron", DataFormat::kMegatron},
                        {"classification", DataFormat::kClassification}, {"sft", DataFormat::kSft}}),
      Text("data.train_path", PS_ACCESS(data.train_path), "training token file (a regular file; none for synthetic)"),
      Text("data.valid_path", PS_ACCESS(data.valid_path), "evaluation token file (same format as data.train_path); empty = no evaluation (synthetic: own stream, no path)"),
      Int("data.seq_len", PS_ACCESS(data.seq_len), "tokens per sample", IntRange(1, kMaxPositions)),
      Bool("data.shuffle", PS_ACCESS(data.shuffle), "permute samples every epoch (seeded)"),
      Bool("data.packing", PS_ACCESS(data.packing),
           "data.format sft only: pack several whole examples per row (greedy, in file order; positions restart "
           "and attention stays within each example) instead of one padded example per row"),
      Int("data.synthetic_tokens", PS_ACCESS(data.synthetic_tokens), "length of the synthetic token stream",
          IntRange(2, kMaxTokens)),
      Text("data.tokenizer", PS_ACCESS(data.tokenizer),
           "tokenizer the data was made with (tokenizer.json, or a folder with tokenizer.json, vocab.json + "
           "merges.txt or vocab.txt); exported with the model; empty = the one in model.init_from"),
      // train
      Int("train.micro_batch_size", PS_ACCESS(train.micro_batch_size), "sequences per forward/backward per rank",
          IntRange(1, kMaxMicroBatch)),
      Int("train.global_batch_size", PS_ACCESS(train.global_batch_size),
          "sequences per optimizer step; gradient accumulation = global / (micro x ranks)",
          IntRange(1, kMaxGlobalBatch)),
      Int("train.max_steps", PS_ACCESS(train.max_steps), "optimizer steps to run", IntRange(1, kMaxSteps)),
      Float("train.grad_clip", PS_ACCESS(train.grad_clip), "clip the global gradient L2 norm to this; 0 = off",
            FloatRange(0.0, kInf)),
      Int("train.eval_every", PS_ACCESS(train.eval_every), "steps between evaluations; 0 = only after the last step",
          IntRange(0, kMaxSteps)),
      Int("train.eval_steps", PS_ACCESS(train.eval_steps), "micro-batches per evaluation", IntRange(1, kMaxSteps)),
      Enum<AccumulationSchedule>("train.accumulation_schedule", PS_ACCESS(train.accumulation_schedule),
                                 "with gradient accumulation: horizontal = each micro-batch forward and backward in "
                                 "turn; vertical = every micro-batch through a block before the next, one backward "
                                 "(each chunk fetched once per step; GPT or Llama with model.activation_checkpointing only; "
                                 "keeps every micro-batch's block inputs)",
                                 {{"horizontal", AccumulationSchedule::kHorizontal},
                                  {"vertical", AccumulationSchedule::kVertical}}),
      // optimizer
      Enum<OptimizerType>("optimizer.type", PS_ACCESS(optimizer.type),
                          "adamw (decoupled weight decay) or adam (L2 added to the gradient)",
                          {{"adamw", OptimizerType::kAdamW}, {"adam", OptimizerType::kAdam}}),
      Float("optimizer.lr", PS_ACCESS(optimizer.lr), "peak learning rate", FloatRange(0.0, 10.0)),
      FloatList("optimizer.betas", PS_ACCESS(optimizer.betas), "Adam betas [beta1, beta2]", 2,
                FloatRange(0.0, 1.0, /*lo_open=*/false, /*hi_open=*/true)),  // 1.0: 1 - beta^t = 0 divides
      Float("optimizer.eps", PS_ACCESS(optimizer.eps), "Adam epsilon", FloatRange(0.0, 1.0, true)),
      Float("optimizer.weight_decay", PS_ACCESS(optimizer.weight_decay),
            "decoupled (adamw) or L2 (adam) weight decay; applied to matrices only, never to biases and norm weights", FloatRange(0.0, 10.0)),
      Bool("optimizer.hybrid_adam", PS_ACCESS(optimizer.hybrid_adam),
           "chunk runtime: update device-resident chunks on the GPU (PatrickStar use_hybrid_adam)"),
      Enum<optim::StateDtype>("optimizer.state_dtype", PS_ACCESS(optimizer.state_dtype),
                              "chunk runtime: how Adam's m and v are stored (the update computes in fp32 either way): "
                              "fp32 (8 bytes per parameter), bf16 (4 bytes per parameter, rounded to nearest even at "
                              "every step), or int8 (2.03 bytes per parameter: block-wise dynamic 8-bit codes with an "
                              "fp32 scale per 256 elements; parameters aligned to 256 elements in chunks); docs/optim.md "
                              "gives their measured effect",
                              {{"fp32", optim::StateDtype::kFp32}, {"bf16", optim::StateDtype::kBf16},
                               {"int8", optim::StateDtype::kInt8}}),
      Enum<optim::MasterWeights>("optimizer.master_weights", PS_ACCESS(optimizer.master_weights),
                                 "chunk runtime with precision.dtype bf16: keep an fp32 master of the weights (fp32: "
                                 "4 bytes per parameter, and fp32 gradient chunks when gradients cannot reuse the "
                                 "compute slots), or none: the bf16 weights are updated in place with stochastic "
                                 "rounding (seeded by run.seed: resume stays exact) and gradients get bf16 chunks; "
                                 "6.03 bytes per parameter with optimizer.state_dtype int8 (docs/optim.md)",
                                 {{"fp32", optim::MasterWeights::kFp32}, {"none", optim::MasterWeights::kNone}}),
      Int("optimizer.speculation_slots", PS_ACCESS(optimizer.speculation_slots),
          "chunk runtime: host chunks updated ahead, as soon as their gradients are final in backward, assuming no "
          "clipping and no overflow (undone and redone exactly when wrong); each holds a host backup of 14 bytes per "
          "chunk element (10 with optimizer.state_dtype bf16 or int8); 0 = off",
          IntRange(0, 1 << 20)),
      Int("optimizer.speculation_backoff_steps", PS_ACCESS(optimizer.speculation_backoff_steps),
          "after a step whose speculation was undone (clipped or overflowed), this many steps do not speculate",
          IntRange(0, kMaxSteps)),
      Bool("optimizer.pin_cpu_threads", PS_ACCESS(optimizer.pin_cpu_threads),
           "chunk runtime: pin the host Adam threads, one per physical core of the CPUs this process may use, the "
           "GPU's NUMA node first (several ranks on a node: give each its own CPU set, e.g. srun --cpu-bind)"),
      Enum<optim::CpuAdamChoice>("optimizer.cpu_adam", PS_ACCESS(optimizer.cpu_adam),
                                 "chunk runtime: CPU Adam kernel variant (auto = best the CPU supports)",
                                 {{"auto", optim::CpuAdamChoice::kAuto}, {"scalar", optim::CpuAdamChoice::kScalar},
                                  {"avx2", optim::CpuAdamChoice::kAvx2}, {"avx512", optim::CpuAdamChoice::kAvx512}}),
      // lr_schedule
      Enum<ScheduleType>("lr_schedule.type", PS_ACCESS(lr_schedule.type), "decay after warm-up",
                         {{"constant", ScheduleType::kConstant}, {"linear", ScheduleType::kLinear},
                          {"cosine", ScheduleType::kCosine}, {"wsd", ScheduleType::kWsd}}),
      Int("lr_schedule.warmup_steps", PS_ACCESS(lr_schedule.warmup_steps), "linear warm-up steps",
          IntRange(0, kMaxSteps)),
      Int("lr_schedule.decay_steps", PS_ACCESS(lr_schedule.decay_steps),
          "decay length after warm-up; 0 = until train.max_steps (wsd: the final decay; 0 = the last 10% of steps)",
          IntRange(0, kMaxSteps)),
      Float("lr_schedule.min_lr", PS_ACCESS(lr_schedule.min_lr), "learning rate at the end of decay",
            FloatRange(0.0, 10.0)),
      // precision
      Enum<Dtype>("precision.dtype", PS_ACCESS(precision.dtype),
                  "compute dtype; masters are fp32 (plain runs: bf16 autocast; fp16 needs chunk.enabled and its loss scaler)",
                  {{"fp32", Dtype::kFp32}, {"fp16", Dtype::kFp16}, {"bf16", Dtype::kBf16}}),
      Float("precision.loss_scale", PS_ACCESS(precision.loss_scale), "fp16: 0 = dynamic, > 0 = static scale",
            FloatRange(0.0, kInf)),
      Int("precision.initial_scale_power", PS_ACCESS(precision.initial_scale_power),
          "fp16 dynamic: initial scale 2^power", IntRange(0, 64)),  // optim::LossScaler's range
      Int("precision.loss_scale_window", PS_ACCESS(precision.loss_scale_window),
          "fp16 dynamic: overflow-free steps before the scale doubles", IntRange(1, kMaxSteps)),
      Int("precision.hysteresis", PS_ACCESS(precision.hysteresis),
          "fp16 dynamic: overflows before the scale halves, refilled after loss_scale_window clean steps "
          "(DeepSpeed meaning)", IntRange(1, kMaxSteps)),
      Bool("precision.consecutive_hysteresis", PS_ACCESS(precision.consecutive_hysteresis),
           "fp16 dynamic: refill the hysteresis at every clean step, so only consecutive overflows lower the scale"),
      Float("precision.min_loss_scale", PS_ACCESS(precision.min_loss_scale), "fp16 dynamic: scale floor",
            FloatRange(0.0, kInf, true)),
      Int("precision.max_skips_at_min_scale", PS_ACCESS(precision.max_skips_at_min_scale),
          "fp16 dynamic: stop with an error after this many consecutive overflowing steps at min_loss_scale "
          "(the run has diverged); 0 = never"),
      // lora
      Bool("lora.enabled", PS_ACCESS(lora.enabled),
           "train low-rank adapters on a frozen base (PEFT's LoRA; GPT-2, llama, BERT): only the adapters (and a "
           "BERT classifier's head) get gradients, optimizer state and checkpoints"),
      Int("lora.r", PS_ACCESS(lora.r), "the adapters' rank", IntRange(1, kMaxEmbd)),
      Float("lora.alpha", PS_ACCESS(lora.alpha), "the adapters' scale is alpha / r (alpha / sqrt(r) with use_rslora)",
            FloatRange(0.0, kInf, true)),
      Float("lora.dropout", PS_ACCESS(lora.dropout), "dropout on the adapters' input (training only)",
            FloatRange(0.0, 1.0, false, true)),
      TextList("lora.target_modules", PS_ACCESS(lora.target_modules),
               "module names that get adapters, as HF names them (llama: q_proj k_proj v_proj o_proj gate_proj "
               "up_proj down_proj; GPT-2: c_attn c_proj c_fc; BERT: query key value dense); [] = PEFT's default "
               "(q_proj, v_proj; GPT-2: c_attn; BERT: query, value)"),
      Bool("lora.use_rslora", PS_ACCESS(lora.use_rslora), "rank-stabilised scale alpha / sqrt(r) (rsLoRA)"),
      Text("lora.init_from", PS_ACCESS(lora.init_from),
           "a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to start the adapters from; "
           "its r and target modules must match; empty = PEFT's initialisation (A Kaiming-uniform, B zero) "
           "from run.seed"),
      // chunk
      Bool("chunk.enabled", PS_ACCESS(chunk.enabled), "manage parameters, gradients and Adam state in chunks (docs/chunkmem.md)"),
      IntOrAuto("chunk.size_elements", PS_ACCESS(chunk.size_elements),
                "chunk capacity in elements; auto = least padding waste, >= the largest parameter", kMaxChunkNumel),
      Enum<chunkmem::DeviceTierKind>("chunk.device_tier", PS_ACCESS(chunk.device_tier),
                                     "auto: CUDA when training on CUDA, else a simulated device (host memory, own budget)",
                                     {{"auto", chunkmem::DeviceTierKind::kAuto}, {"cuda", chunkmem::DeviceTierKind::kCuda},
                                      {"simulated", chunkmem::DeviceTierKind::kSimulated}}),
      Int("chunk.device_budget_bytes", PS_ACCESS(chunk.device_budget_bytes),
          "fixed chunk bytes allowed on the device; 0 = a traced budget from chunk.device_memory_bytes (CUDA: the "
          "device's memory; simulated tier without device_memory_bytes: unlimited)",
          IntRange(0, kMaxBytes)),
      Int("chunk.host_budget_bytes", PS_ACCESS(chunk.host_budget_bytes),
          "chunk bytes allowed on the host; 0 = host_mem_ratio x physical memory", IntRange(0, kMaxBytes)),
      Enum<chunkmem::HostPoolPinning>("chunk.host_pool_pinning", PS_ACCESS(chunk.host_pool_pinning),
                                      "CUDA: how the host pool is page-locked at start-up: host_alloc = one cudaHostAlloc; "
                                      "register = mapped on huge pages, made resident on run.threads threads, then one "
                                      "cudaHostRegister (compare the start-up lines)",
                                      {{"host_alloc", chunkmem::HostPoolPinning::kHostAlloc},
                                       {"register", chunkmem::HostPoolPinning::kRegister}}),
      Enum<chunkmem::PlacementKind>("chunk.placement", PS_ACCESS(chunk.placement),
                                    "with a traced budget: dynamic = each moment's chunk budget from the warm-up trace; "
                                    "static = the warm-up share (warmup_device_chunk_ratio) for good",
                                    {{"dynamic", chunkmem::PlacementKind::kDynamic}, {"static", chunkmem::PlacementKind::kStatic}}),
      Enum<chunkmem::EvictionPolicyKind>("chunk.eviction", PS_ACCESS(chunk.eviction),
                                         "opt = Belady from the warm-up trace (LRU during warm-up); lru",
                                         {{"opt", chunkmem::EvictionPolicyKind::kOpt}, {"lru", chunkmem::EvictionPolicyKind::kLru}}),
      Int("chunk.warmup_steps", PS_ACCESS(chunk.warmup_steps), "optimizer steps traced before Belady decides",
          IntRange(1, kMaxSteps)),
      Int("chunk.device_memory_bytes", PS_ACCESS(chunk.device_memory_bytes),
          "traced budget (when device_budget_bytes is 0): device bytes for chunks + activations, x device_mem_ratio; "
          "0 = the CUDA device's memory (simulated tier: unlimited)", IntRange(0, kMaxBytes)),
      Bool("chunk.device_arena", PS_ACCESS(chunk.device_arena),
           "with a fixed device_budget_bytes: reserve it once and carve chunks from it (else allocate per move; experimental)"),
      Bool("chunk.async_prefetch", PS_ACCESS(chunk.async_prefetch),
           "prefetch copies overlap compute (CUDA: a side stream; simulated: a worker thread); experimental"),
      Bool("chunk.simulate_device_copies", PS_ACCESS(chunk.simulate_device_copies),
           "tests, simulated device tier (run.device: cpu) only: the optimizer copies device-tier chunks to the host and "
           "back as on a GPU, so those paths run without one; no effect on CUDA"),
      Int("chunk.prefetch_depth", PS_ACCESS(chunk.prefetch_depth),
          "after warm-up, moments ahead whose chunks are fetched early (from the trace; ZeRO: the next moment groups are gathered ahead); 0 = off",
          IntRange(0, 100000)),  // counted in int by the runtime; a model has a few moments per block
      Int("chunk.timeline_steps", PS_ACCESS(chunk.timeline_steps),
          "first steps whose chunk moves go to <run.output_dir>/chunk_timeline.json (Chrome trace); 0 = off",
          IntRange(0, kMaxSteps)),
      Bool("chunk.cpu_embedding", PS_ACCESS(chunk.cpu_embedding),
           "embeddings outside the chunks, computed and updated on the host in fp32 (position embedding "
           "only when the token embedding is tied to the LM head)"),
      Float("chunk.device_mem_ratio", PS_ACCESS(chunk.device_mem_ratio), "usable fraction of device memory",
            FloatRange(0.0, 1.0, true)),
      Float("chunk.host_mem_ratio", PS_ACCESS(chunk.host_mem_ratio), "usable fraction of host memory",
            FloatRange(0.0, 1.0, true)),
      Float("chunk.warmup_device_chunk_ratio", PS_ACCESS(chunk.warmup_device_chunk_ratio),
            "traced budget: device fraction for chunks during warm-up (static placement: for good)",
            FloatRange(0.0, 1.0, true)),
      Float("chunk.margin_use_ratio", PS_ACCESS(chunk.margin_use_ratio),
            "fraction of the device margin (chunk room minus the largest block's working set) given to optimizer state from start-up; "
            "where gradients are chunks of their own (optimizer.master_weights none), the rest is what keeps those chunks' "
            "gradient chunks on the device (--plan's gradients line)", FloatRange(0.0, 1.0)),
      Text("chunk.nvme_dir", PS_ACCESS(chunk.nvme_dir),
           "a directory on a local disk (SSD) for the NVMe tier: the optimizer state (fp32 master, m, v) of "
           "host-updated chunks that host memory does not keep, streamed through a ring of host buffers in each "
           "step (O_DIRECT, io_uring; docs/chunkmem.md); its file is working memory, deleted with the process, "
           "never a checkpoint; empty = off"),
      Int("chunk.nvme_host_budget_bytes", PS_ACCESS(chunk.nvme_host_budget_bytes),
          "with chunk.nvme_dir: host bytes for optimizer state kept in memory (the largest chunks first; the rest goes to the "
          "NVMe tier); -1 = what chunk.host_budget_bytes leaves after everything else; 0 = all of it on the tier",
          IntRange(-1, kMaxBytes)),
      Int("chunk.nvme_ring_slots", PS_ACCESS(chunk.nvme_ring_slots),
          "with chunk.nvme_dir: host buffers of one chunk's optimizer state each, through which the tier reads "
          "ahead and writes behind (at most one per chunk on the tier)", IntRange(2, 64)),
      // distributed
      Enum<comm::Launcher>("distributed.launcher", PS_ACCESS(distributed.launcher),
                           "auto: torchrun env (RANK, WORLD_SIZE), else Slurm env (SLURM_PROCID, SLURM_NTASKS > 1), else one process",
                           {{"auto", comm::Launcher::kAuto}, {"none", comm::Launcher::kNone},
                            {"torchrun", comm::Launcher::kTorchrun}, {"slurm", comm::Launcher::kSlurm}}),
      Text("distributed.master_addr", PS_ACCESS(distributed.master_addr), "rendezvous host; empty = from the environment"),
      Int("distributed.master_port", PS_ACCESS(distributed.master_port), "rendezvous port; 0 = from the environment",
          IntRange(0, 65535)),
      Int("distributed.init_timeout_s", PS_ACCESS(distributed.init_timeout_s), "rendezvous timeout",
          IntRange(1, 7 * 24 * 3600)),  // a week
      Int("distributed.timeout_s", PS_ACCESS(distributed.timeout_s),
          "collective timeout: a rank that stops answering fails the others after this long",
          IntRange(1, 7 * 24 * 3600)),
      Bool("distributed.force_collectives", PS_ACCESS(distributed.force_collectives),
           "one process too: build the communicator (NCCL on CUDA, Gloo on CPU) and run the data-parallel / ZeRO "
           "path over one rank (checks the collectives on one GPU)"),
      // logging
      Enum<std::string>("logging.level", PS_ACCESS(logging.level), "console verbosity",
                        {{"trace", "trace"}, {"debug", "debug"}, {"info", "info"}, {"warn", "warn"}, {"error", "error"}}),
      Int("logging.log_every", PS_ACCESS(logging.log_every), "steps between log lines", IntRange(1, kMaxSteps)),
      Bool("logging.jsonl", PS_ACCESS(logging.jsonl), "write <run.output_dir>/metrics.jsonl"),
      Bool("logging.step_breakdown", PS_ACCESS(logging.step_breakdown),
           "time forward, backward and optimizer apart into metrics.jsonl (CUDA: synchronises between them)"),
      Bool("logging.tensorboard", PS_ACCESS(logging.tensorboard), "write TensorBoard event files to <run.output_dir>/tb/"),
      // checkpoint
      Int("checkpoint.every_steps", PS_ACCESS(checkpoint.every_steps), "save every N optimizer steps; 0 = off"),
      Float("checkpoint.every_minutes", PS_ACCESS(checkpoint.every_minutes),
            "save when this many minutes passed since the last save; 0 = off", FloatRange(0.0, kInf)),
      Int("checkpoint.keep", PS_ACCESS(checkpoint.keep),
          "newest complete checkpoints of this run kept; its older ones are deleted once a newer one is complete "
          "(other runs' checkpoints never are)", MinInt(1)),
      Text("checkpoint.dir", PS_ACCESS(checkpoint.dir), "checkpoint folder (must not be or lie under a file); empty = <run.output_dir>/checkpoints"),
      Bool("checkpoint.at_end", PS_ACCESS(checkpoint.at_end), "save after the last step"),
      Text("checkpoint.resume", PS_ACCESS(checkpoint.resume),
           "auto = from the newest valid checkpoint in checkpoint.dir, if any; never; or a path: a step_N folder, "
           "or a folder of them (its newest valid one)"),
      Bool("checkpoint.async", PS_ACCESS(checkpoint.async),
           "write from a host copy in a background thread while training goes on (when the host has room)"),
      Bool("checkpoint.export_hf", PS_ACCESS(checkpoint.export_hf),
           "at the end, write an HF folder of the model's architecture (config.json, weights, the tokenizer and "
           "generation_config.json files of the source) to <run.output_dir>/hf/"),
      Enum<std::string>("checkpoint.export_dtype", PS_ACCESS(checkpoint.export_dtype),
                        "dtype of the exported weights (checkpoint.export_hf, ps_export): auto = bf16 for model.type "
                        "llama (as the families publish them), fp32 for gpt and bert",
                        {{"auto", "auto"}, {"bf16", "bf16"}, {"fp32", "fp32"}}),
  };
}

std::vector<AliasSpec> BuildConfigAliases() {
  auto set_if_true = [](const char* value) {
    return [value](const YAML::Node& n) {
      return ToBool(n) ? YAML::Node(value) : YAML::Node();
    };
  };
  // DeepSpeed/PatrickStar "gradient_clipping": <= 0 means off (PatrickStar default -1).
  auto clip = [](const YAML::Node& n) {
    const double v = ToFloat(n);
    return YAML::Node(v > 0 ? n.Scalar() : std::string("0"));
  };
  // Accepted so PatrickStar configs load, with no effect (the note says why); the value
  // must still be a bool.
  auto no_effect = [](const YAML::Node& n) {
    ToBool(n);
    return YAML::Node();
  };
  return {
      {"optimizer.params.lr", "optimizer.lr", "", {}},
      {"optimizer.params.betas", "optimizer.betas", "", {}},
      {"optimizer.params.eps", "optimizer.eps", "", {}},
      {"optimizer.params.weight_decay", "optimizer.weight_decay", "", {}},
      {"optimizer.params.use_hybrid_adam", "optimizer.hybrid_adam", "", {}},
      {"fp16.enabled", "precision.dtype", "true sets fp16; false leaves the dtype", set_if_true("fp16")},
      {"bf16.enabled", "precision.dtype", "true sets bf16; false leaves the dtype", set_if_true("bf16")},
      {"fp16.loss_scale", "precision.loss_scale", "0 = dynamic", {}},
      {"fp16.initial_scale_power", "precision.initial_scale_power", "", {}},
      {"fp16.loss_scale_window", "precision.loss_scale_window", "", {}},
      {"fp16.hysteresis", "precision.hysteresis",
       "DeepSpeed meaning (overflows tolerated), not PatrickStar's scale factor", {}},
      {"fp16.min_loss_scale", "precision.min_loss_scale", "", {}},
      {"fp16.consecutive_hysteresis", "precision.consecutive_hysteresis", "", {}},
      {"gradient_clipping", "train.grad_clip", "global-norm clipping; <= 0 = off", clip},
      {"default_chunk_size", "chunk.size_elements", "elements", {}},
      {"chunk.size", "chunk.size_elements", "elements", {}},
      {"release_after_init", "", "no effect: init copies are always freed once chunks hold the data", no_effect},
      {"use_cpu_embedding", "chunk.cpu_embedding", "", {}},
      {"client.mem_tracer.use_async_mem_monitor", "", "no effect: the probe reads device memory at every moment",
       no_effect},
      {"client.mem_tracer.with_static_partition", "chunk.placement", "true sets static; false leaves it",
       set_if_true("static")},
      {"client.mem_tracer.overall_gpu_mem_ratio", "chunk.device_mem_ratio", "", {}},
      {"client.mem_tracer.overall_cpu_mem_ratio", "chunk.host_mem_ratio", "", {}},
      {"client.mem_tracer.warmup_gpu_chunk_mem_ratio", "chunk.warmup_device_chunk_ratio", "", {}},
      {"client.mem_tracer.margin_use_ratio", "chunk.margin_use_ratio", "", {}},
  };
}

}  // namespace ps::trainer
