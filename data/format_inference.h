// Inferring data.format from the data itself, so that leaving the format out never
// trains on the wrong thing (docs/data.md, "Data formats"). Reads at most the first
// 4 KiB of one file; stateless; any thread.
#pragma once

#include <string>

#include "data/data_config.h"

namespace ps::data {

// The format of the data at `path` (non-empty), first rule that matches:
//   1. megatron: <prefix>.bin and <prefix>.idx both exist (`path` is the prefix or either
//      file); sft when <prefix>.mask exists too (chat data, ps_prep --format sft);
//   2. llmc: the file starts with an llm.c shard header (magic 20240520 or 20240801);
//   3. classification: a .jsonl, .json or .tsv file (labelled examples; token files are
//      made from JSONL by ps_prep);
//   4. text: the first 4 KiB hold no NUL byte and are valid UTF-8 (a truncated character
//      at the end of the window is allowed).
// Anything else (a headerless .bin, other binary content) is a DataError asking for
// data.format; so is a path that is not a regular file (CheckRegularFile). `key`
// ("data.train_path", ...) is named in every error. Never returns kAuto or kSynthetic.
DataFormat InferDataFormat(const std::string& path, const std::string& key);

}  // namespace ps::data
