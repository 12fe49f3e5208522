#include "tokenizer/utf8.h"

#include <c10/util/Exception.h>

#include <cstring>

namespace ps::tokenizer {

int Utf8SequenceBytes(const uint8_t* s, size_t avail_bytes, int* bad_bytes) {
  const uint8_t lead = s[0];
  if (lead < 0x80) return 1;
  int need;                      // continuation bytes
  uint8_t lo = 0x80, hi = 0xBF;  // accepted range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;  // no overlong forms
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;  // no overlong forms
    if (lead == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *bad_bytes = 1;
    return 0;
  }
  for (int i = 1; i <= need; ++i) {
    const bool ok = i < static_cast<int>(avail_bytes) &&
                    (i == 1 ? (s[i] >= lo && s[i] <= hi) : (s[i] >= 0x80 && s[i] <= 0xBF));
    if (!ok) {
      *bad_bytes = i;
      return 0;
    }
  }
  return need + 1;
}

size_t FindInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    int bad = 0;
    const int len = Utf8SequenceBytes(p + i, n - i, &bad);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

void CheckUtf8(std::string_view s, const char* what) {
  const size_t offset = FindInvalidUtf8(s);
  TORCH_CHECK(offset == std::string_view::npos, what, ": invalid UTF-8 at byte offset ", offset, " (byte 0x",
              std::hex, static_cast<int>(static_cast<uint8_t>(s[offset])), ")");
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    int bad = 0;
    const int len = Utf8SequenceBytes(p + i, n - i, &bad);
    if (len > 0) {
      out.append(bytes.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += bad;
    }
  }
  return out;
}

}  // namespace ps::tokenizer
