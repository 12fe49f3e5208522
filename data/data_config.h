// DataConfig: where training tokens come from, owned by data/. Plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ps::data {

enum class DataFormat {
  // Not given: inferred from data.train_path by the config loader (and by OpenTokenSource
  // for a Config built in code); see data/format_inference.h. No path and no format is
  // an error: random tokens must be asked for (kSynthetic).
  kAuto,
  kSynthetic,  // uniform random tokens from run.seed (benchmarks, smoke tests); no paths
  kText,       // any file, byte-level: token = byte value (vocab >= 256)
  kLlmc,       // llm.c shard: 256 x int32 header (magic, version, count), then tokens
  kRawU16,     // headerless uint16 tokens (nanoGPT train.bin)
  kRawU32,     // headerless uint32 tokens
  kMegatron,   // Megatron-LM indexed dataset: <prefix>.bin + <prefix>.idx (ps_prep writes it)
  // Labelled text for sequence classification (model.type bert, model.num_labels > 0):
  // a .jsonl file ({"text": ..., "text_pair": ... (optional), "label": <int>} per line)
  // or a .tsv file (text [TAB text_pair] TAB label per line, an optional header line).
  kClassification,
  // Chat / instruction examples (ps_prep --format sft): a Megatron dataset whose documents
  // are the examples, plus <prefix>.mask (one uint8 per token: 1 = a training target).
  // For next-token models (GPT, Llama): one example per row from its start (or several
  // with `packing`), padded; labels -100 where the target's mask is 0 (data/sft_batcher.h).
  kSft,
};

struct DataConfig {
  DataFormat format = DataFormat::kAuto;
  std::string train_path;   // required unless synthetic (then it must be empty)
  std::string valid_path;   // optional; "" = no evaluation data (synthetic: another seed; no path)
  int64_t seq_len = 256;    // tokens per sample (targets are shifted by one)
  bool shuffle = true;      // permute samples each epoch (seeded by run.seed and epoch)
  int64_t synthetic_tokens = 1 << 20;  // length of the synthetic stream
  // data.format sft only: several whole examples per row (greedy, in file order), positions
  // restarting and attention confined to each example; fewer padded slots per token at
  // the price of a [B, 1, T, T] attention mask. false: one example per row.
  bool packing = false;
  // The tokenizer the token files were made with (a tokenizer.json, or a folder holding
  // tokenizer.json / vocab.json + merges.txt / vocab.txt). Used for the exported HF folder
  // and for sampling; empty = the one in model.init_from, if any.
  std::string tokenizer;
};

const char* ToString(DataFormat f);  // as data.format spells it (token_source.cc)

// A contradiction among the data keys, which the config loader reports where the key was set.
struct DataKeyProblem {
  std::string key;      // "data.packing", "data.format"
  std::string message;  // what is wrong, naming the key
};
// data.packing without data.format sft, or data.format sft for BERT (`bert`: it does not
// predict next tokens); nullopt when neither (token_source.cc).
std::optional<DataKeyProblem> ChatKeyProblem(const DataConfig& config, bool bert);

}  // namespace ps::data
