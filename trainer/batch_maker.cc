#include "trainer/batch_maker.h"

#include <c10/util/Exception.h>

#include <string>

#include "tokenizer/tokenizer.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/hf_io.h"

namespace ps::trainer {

data::MlmSpecialIds BertSpecialIds(const Config& c) {
  data::MlmSpecialIds ids;
  const std::string source = TokenizerSource(c);
  if (source.empty()) {
    if (c.data.format == data::DataFormat::kText || c.data.format == data::DataFormat::kClassification) {
      return {257, 258, 259, 256};
    }
    if (c.data.format == data::DataFormat::kSynthetic) {
      const int64_t v = c.model.vocab_size;
      return {v - 3, v - 2, v - 1, v - 4};
    }
    throw ConfigError("data.tokenizer: model.type bert on data.format " + std::string(data::ToString(c.data.format)) +
                      " needs the tokenizer the data was prepared with (its [CLS], [SEP], [MASK] and [PAD] ids)");
  }
  std::unique_ptr<tokenizer::Tokenizer> tok;
  try {
    tok = tokenizer::LoadTokenizer(source);
  } catch (const std::exception& e) {
    throw ConfigError("data.tokenizer: " + std::string(e.what()));
  }
  auto id = [&](const char* token) -> int64_t {
    const auto found = tok->TokenToId(token);
    if (!found) throw ConfigError(source + ": the tokenizer has no " + token + " token, which BERT's masked LM needs");
    if (*found >= c.model.vocab_size) {
      throw ConfigError(source + ": " + token + " is id " + std::to_string(*found) + ", not below model.vocab_size " +
                        std::to_string(c.model.vocab_size));
    }
    return *found;
  };
  ids.cls = id("[CLS]");
  ids.sep = id("[SEP]");
  ids.mask = id("[MASK]");
  ids.pad = id("[PAD]");
  return ids;
}

BatchMaker::BatchMaker(const Config& config) : config_(config) {
  if (config_.model_type == models::ModelType::kBert) ids_ = BertSpecialIds(config_);
}

models::Batch BatchMaker::Make(const at::Tensor& windows, int64_t first_sample) const {
  const int64_t T = config_.data.seq_len;
  if (config_.model_type != models::ModelType::kBert) {  // GPT and Llama: next-token targets
    return {windows.narrow(1, 0, T), windows.narrow(1, 1, T), {}, {}};
  }
  data::BertBatch b = data::MakeMlmBatch(windows, T, first_sample, static_cast<uint64_t>(config_.run.seed),
                                         config_.model.vocab_size, ids_);
  return {b.input_ids, b.labels, b.token_type_ids, b.attention_mask};
}

}  // namespace ps::trainer
