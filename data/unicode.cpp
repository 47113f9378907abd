// data/unicode.cpp: character classes for the GPT-2 pre-tokenizer.
#include "data/unicode.h"

namespace rz::unicode {

namespace {

// White_Space from Unicode's PropList.txt (unchanged since Unicode 6.3): what the reference
// encoder's \s matches. Note that Python's str.isspace() also accepts U+001C..U+001F; \s does not.
bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace

// 0x09..0x0D and 0x20 are white space, 0-9 numbers, A-Z a-z letters, the rest other.
const CharClass kAsciiClass[128] = {
    kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,   // 0x00
    kOther,  kSpace,  kSpace,  kSpace,  kSpace,  kSpace,  kOther,  kOther,   // 0x08
    kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,   // 0x10
    kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,   // 0x18
    kSpace,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,   // 0x20
    kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,  kOther,   // 0x28
    kNumber, kNumber, kNumber, kNumber, kNumber, kNumber, kNumber, kNumber,  // 0x30
    kNumber, kNumber, kOther,  kOther,  kOther,  kOther,  kOther,  kOther,   // 0x38
    kOther,  kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter,  // 0x40
    kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter,  // 0x48
    kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter,  // 0x50
    kLetter, kLetter, kLetter, kOther,  kOther,  kOther,  kOther,  kOther,   // 0x58
    kOther,  kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter,  // 0x60
    kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter,  // 0x68
    kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter, kLetter,  // 0x70
    kLetter, kLetter, kLetter, kOther,  kOther,  kOther,  kOther,  kOther,   // 0x78
};

CharClass classify(uint32_t cp) {
  if (cp < 128) return kAsciiClass[cp];
  if (cp == kInvalid) return kOther;
  if (is_white_space(cp)) return kSpace;
  int lo = 0, hi = kNumCategoryRanges - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const CategoryRange& r = kCategoryRanges[mid];
    if (cp < r.lo) hi = mid - 1;
    else if (cp > r.hi) lo = mid + 1;
    else return r.cls;
  }
  return kOther;
}

size_t incomplete_utf8_tail(const unsigned char* s, size_t n) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned c = s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace rz::unicode
