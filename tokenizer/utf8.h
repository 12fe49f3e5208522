// UTF-8 helpers of the tokenizers: strict validation (the error names the byte offset),
// decoding one code point, encoding, and HF's lossy decoding of byte strings (Rust's
// String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD). Stateless
// functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ps::tokenizer {

// Length of the valid UTF-8 sequence at `s` (`avail_bytes` >= 1 readable), or 0 when it is
// invalid; then `*bad_bytes` is the length of its maximal invalid subpart (>= 1): the
// lead byte plus the continuation bytes that were still acceptable.
int Utf8SequenceBytes(const uint8_t* s, size_t avail_bytes, int* bad_bytes);

// Byte offset of the first invalid UTF-8 sequence of `s` (overlong forms, surrogates,
// code points above U+10FFFF and truncated sequences are invalid), or npos.
size_t FindInvalidUtf8(std::string_view s);

// TORCH_CHECKs that `s` is valid UTF-8; the error names `what` and the byte offset.
void CheckUtf8(std::string_view s, const char* what);

// The code point at s[*pos] of valid UTF-8; advances *pos past it.
inline char32_t NextCodePoint(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + *pos;
  if (p[0] < 0x80) {
    *pos += 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    *pos += 2;
    return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    *pos += 3;
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *pos += 4;
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

// Appends the UTF-8 encoding of `c` (a Unicode scalar value) to `out`.
void AppendUtf8(char32_t c, std::string* out);

// `bytes` as valid UTF-8: every maximal invalid subpart replaced by U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

}  // namespace ps::tokenizer
