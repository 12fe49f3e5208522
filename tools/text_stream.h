// TextStream: shows generated text as it grows. Given all ids so far, Show() prints
// what decoding them adds to what is already shown, once it is complete text (a
// multi-byte character split over tokens shows once its last byte arrives); Finish()
// prints whatever is left. Decoding all ids each time keeps the tokenizer's spacing
// rules (a leading space, byte fallback) exactly as a whole decode has them.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ps::tools {

class TextStream {
 public:
  // `shown`: ids already on `out` (a prompt shown as it is), or none.
  TextStream(const tokenizer::Tokenizer& tok, std::ostream& out, const std::vector<int32_t>& shown = {})
      : tok_(tok), out_(out), printed_(shown.empty() ? "" : tok.Decode(shown)) {}

  void Show(const std::vector<int32_t>& ids) { Print(tok_.Decode(ids), /*final=*/false); }
  void Finish(const std::vector<int32_t>& ids) { Print(tok_.Decode(ids), /*final=*/true); }

 private:
  void Print(const std::string& text, bool final) {
    if (text.size() <= printed_.size() || text.compare(0, printed_.size(), printed_) != 0) return;
    if (!final && text.find("\xEF\xBF\xBD", printed_.size()) != std::string::npos) return;  // U+FFFD: incomplete
    out_ << text.substr(printed_.size()) << std::flush;
    printed_ = text;
  }

  const tokenizer::Tokenizer& tok_;
  std::ostream& out_;
  std::string printed_;
};

}  // namespace ps::tools
