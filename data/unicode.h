// data/unicode.h: the three character classes GPT-2's pre-tokenizer asks about, and UTF-8
// decoding that never fails.
//
// GPT-2's pattern needs \p{L} (letters), \p{N} (numbers) and \s (the Unicode White_Space
// property). ASCII is answered from a 128-entry table; everything above it by a binary search
// in the generated range table (data/unicode_tables.cpp). Bytes that are not valid UTF-8 are
// decoded one at a time as kInvalid "code points" of class kOther, so any byte string can be
// pre-tokenized and therefore encoded and decoded losslessly.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rz::unicode {

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct CategoryRange {
  uint32_t lo, hi;  // inclusive code point bounds
  CharClass cls;    // kLetter or kNumber
};
extern const CategoryRange kCategoryRanges[];
extern const int kNumCategoryRanges;

constexpr uint32_t kInvalid = 0xFFFFFFFFu;  // a byte that does not start valid UTF-8

// The class of code point cp (kInvalid -> kOther).
CharClass classify(uint32_t cp);

extern const CharClass kAsciiClass[128];  // classify() for 0..127, inlined by the scanner

// Decodes one code point from s[0..n) (n >= 1). Sets *len to the bytes consumed (1..4).
// Overlong forms, surrogates, values above U+10FFFF and truncated sequences give kInvalid
// with *len = 1.
inline uint32_t decode_utf8(const unsigned char* s, size_t n, int* len) {
  unsigned c = s[0];
  if (c < 0x80) { *len = 1; return c; }
  *len = 1;
  int need;
  uint32_t cp, min;
  if ((c & 0xE0) == 0xC0) { need = 1; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { need = 2; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { need = 3; cp = c & 0x07; min = 0x10000; }
  else return kInvalid;
  if (n < static_cast<size_t>(need) + 1) return kInvalid;
  for (int k = 1; k <= need; k++) {
    unsigned cc = s[k];
    if ((cc & 0xC0) != 0x80) return kInvalid;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalid;
  *len = need + 1;
  return cp;
}

// How many bytes at the end of s[0..n) could be the start of a code point that the next
// bytes would complete (0..3): a streaming reader keeps them for the next chunk.
size_t incomplete_utf8_tail(const unsigned char* s, size_t n);

}  // namespace rz::unicode
