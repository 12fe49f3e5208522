#include "trainer/classification_data.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/data_error.h"

namespace ps::trainer {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::optional<int64_t> ParseInt(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return v;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> out(1);
  for (char ch : line) {
    if (ch == '\t') {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

struct RawExample {
  std::string a, b;
  int64_t label;
};

// One JSONL line; nullopt for a blank line.
std::optional<RawExample> ParseJsonLine(const std::string& line, const std::string& where) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    PS_DATA_CHECK(false, where, ": not a JSON object (", e.what(), ")");
  }
  PS_DATA_CHECK(j.is_object(), where, ": expected a JSON object with \"text\" and \"label\"");
  PS_DATA_CHECK(j.contains("text") && j["text"].is_string(), where, ": \"text\" (a string) is missing");
  PS_DATA_CHECK(j.contains("label") && j["label"].is_number_integer(), where,
                ": \"label\" (an integer from 0) is missing or not an integer");
  RawExample r{j["text"].get<std::string>(), "", j["label"].get<int64_t>()};
  if (j.contains("text_pair") && !j["text_pair"].is_null()) {
    PS_DATA_CHECK(j["text_pair"].is_string(), where, ": \"text_pair\" must be a string");
    r.b = j["text_pair"].get<std::string>();
  }
  return r;
}

// One TSV line; nullopt for a blank line or the header (first line only).
std::optional<RawExample> ParseTsvLine(std::string line, const std::string& where, bool first) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) return std::nullopt;
  const std::vector<std::string> cols = SplitTabs(line);
  PS_DATA_CHECK(cols.size() == 2 || cols.size() == 3, where, ": expected text<TAB>label or text<TAB>text_pair<TAB>label, got ",
                cols.size(), " column", cols.size() == 1 ? "" : "s");
  const auto label = ParseInt(cols.back());
  if (!label && first) return std::nullopt;  // a header
  PS_DATA_CHECK(label.has_value(), where, ": label '", cols.back(), "' is not an integer");
  return RawExample{cols[0], cols.size() == 3 ? cols[1] : "", *label};
}

}  // namespace

ClassificationSet ReadClassificationSet(const std::string& path, int64_t num_labels, const TextEncoder& encode) {
  const bool jsonl = EndsWith(path, ".jsonl") || EndsWith(path, ".json");
  PS_DATA_CHECK(jsonl || EndsWith(path, ".tsv"), path,
                ": data.format classification reads a .jsonl or a .tsv file (by its extension)");
  std::ifstream in(path);
  PS_DATA_CHECK(in.good(), path, ": cannot open the classification file");
  ClassificationSet set;
  set.path = path;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    const std::optional<RawExample> raw = jsonl ? ParseJsonLine(line, where) : ParseTsvLine(line, where, line_no == 1);
    if (!raw) continue;
    PS_DATA_CHECK(raw->label >= 0 && raw->label < num_labels, where, ": label ", raw->label,
                  " is outside [0, model.num_labels = ", num_labels, ")");
    ClassificationExample ex;
    try {
      ex.a = encode(raw->a);
      if (!raw->b.empty()) ex.b = encode(raw->b);
    } catch (const std::exception& e) {
      PS_DATA_CHECK(false, where, ": ", e.what());
    }
    ex.label = raw->label;
    set.num_tokens += static_cast<int64_t>(ex.a.size() + ex.b.size());
    set.examples.push_back(std::move(ex));
  }
  PS_DATA_CHECK(!set.examples.empty(), path, ": holds no example");
  return set;
}

models::Batch MakeClassificationBatch(const ClassificationSet& set, const std::vector<int64_t>& indices,
                                      int64_t seq_len, const data::MlmSpecialIds& ids) {
  const int64_t B = static_cast<int64_t>(indices.size());
  at::Tensor input = at::full({B, seq_len}, ids.pad, at::kLong);
  at::Tensor types = at::zeros({B, seq_len}, at::kLong);
  at::Tensor mask = at::zeros({B, seq_len}, at::kLong);
  at::Tensor labels = at::empty({B}, at::kLong);
  auto* in = input.data_ptr<int64_t>();
  auto* ty = types.data_ptr<int64_t>();
  auto* ma = mask.data_ptr<int64_t>();
  auto* la = labels.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const ClassificationExample& ex = set.examples.at(static_cast<size_t>(indices[r]));
    const bool pair = !ex.b.empty();
    // Room for the texts: seq_len less [CLS], [SEP] (and the pair's [SEP]); the longer
    // text loses a token until both fit (HF's longest_first).
    const int64_t room = seq_len - (pair ? 3 : 2);
    int64_t na = static_cast<int64_t>(ex.a.size()), nb = static_cast<int64_t>(ex.b.size());
    while (na + nb > room) (na >= nb ? na : nb) -= 1;
    int64_t* row = in + r * seq_len;
    int64_t t = 0;
    row[t++] = ids.cls;
    for (int64_t i = 0; i < na; ++i) row[t++] = ex.a[i];
    row[t++] = ids.sep;
    const int64_t b_start = t;
    if (pair) {
      for (int64_t i = 0; i < nb; ++i) row[t++] = ex.b[i];
      row[t++] = ids.sep;
    }
    for (int64_t i = b_start; i < t; ++i) ty[r * seq_len + i] = 1;
    for (int64_t i = 0; i < t; ++i) ma[r * seq_len + i] = 1;
    la[r] = ex.label;
  }
  return {input, labels, types, mask};
}

}  // namespace ps::trainer
