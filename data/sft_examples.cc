#include "data/sft_examples.h"

#include <c10/util/Exception.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "data/data_error.h"
#include "data/megatron_format.h"

namespace ps::data {

SftExamples::SftExamples(MegatronDataset dataset, std::unique_ptr<MappedFile> mask, std::string prefix)
    : tokens_(std::move(dataset.tokens)),
      starts_(std::move(dataset.document_starts)),
      mask_(std::move(mask)),
      prefix_(std::move(prefix)) {
  TORCH_INTERNAL_ASSERT(!starts_.empty() && starts_.back() == tokens_->num_tokens());
  TORCH_INTERNAL_ASSERT(mask_->bytes() == tokens_->num_tokens());
}

void SftExamples::Read(int64_t example, int64_t count, int64_t* ids, uint8_t* mask) const {
  TORCH_INTERNAL_ASSERT(example >= 0 && example < num_examples() && count >= 0 && count <= length(example));
  const int64_t begin = starts_[example];
  tokens_->Read(begin, count, ids);
  std::memcpy(mask, mask_->data() + begin, static_cast<size_t>(count));
}

std::unique_ptr<SftExamples> OpenSftExamples(const std::string& path, int64_t vocab_size, const std::string& path_key) {
  const MegatronPaths paths = MegatronPathsOf(path);
  const std::string key = KeySuffix(path_key);
  const std::string mask_path = paths.prefix + ".mask";
  struct stat st {};
  PS_DATA_CHECK(::stat(mask_path.c_str(), &st) == 0, mask_path, ": cannot open: ", std::strerror(errno),
                " (data.format sft reads the loss mask that ps_prep --format sft writes beside <prefix>.bin and "
                "<prefix>.idx; a dataset without one is data.format megatron, every token a target)", key);
  MegatronDataset dataset = OpenMegatronDataset(path, vocab_size, path_key);
  auto mask = std::make_unique<MappedFile>(mask_path, path_key);
  const int64_t tokens = dataset.tokens->num_tokens();
  PS_DATA_CHECK(mask->bytes() == tokens, mask_path, ": ", mask->bytes(), " bytes, but ", paths.bin_path, " holds ",
                tokens, " tokens (the mask has one byte per token; were the files written by different ps_prep "
                "runs?)", key);
  const uint8_t* m = mask->data();
  for (int64_t i = 0; i < tokens; ++i) {
    PS_DATA_CHECK(m[i] <= 1, mask_path, ": byte ", i, " is ", int{m[i]}, "; a loss mask holds only 0 and 1", key);
  }
  return std::make_unique<SftExamples>(std::move(dataset), std::move(mask), paths.prefix);
}

}  // namespace ps::data
