// data/pretokenize.cpp: GPT-2's pre-tokenization pattern as a hand-written scanner.
//
// The pattern's alternatives, tried in order at the current position p (leftmost-first, as
// a backtracking regex engine does):
//   1. 's 't 're 've 'm 'll 'd        a contraction (lower case only)
//   2-4. " ?" then a run of one class  letters (\p{L}), numbers (\p{N}), or "other" (neither
//                                      those nor white space); the one optional leading
//                                      character is an ASCII space U+0020
//   5. \s+(?!\S)                       a white-space run not followed by a non-space: the
//                                      whole run at the end of text, else the run minus its
//                                      last character (which then joins the next word via
//                                      2-4 when it is a space)
//   6. \s+                             otherwise a single white-space character (a run of
//                                      length one followed by a non-space)
// Streaming (final = false): whenever a decision needs a character at or past the end of
// the buffer (a run that reaches the end, "'" or " " as the last character, a code point
// cut in half) the scanner stops and leaves that piece for the next call.
#include "data/pretokenize.h"

#include "data/unicode.h"

namespace rz {

namespace {

constexpr uint8_t kEnd = 4;  // no character: end of text (or unknown yet, when streaming)

struct Scanner {
  const unsigned char* s;
  size_t n;
  bool final;
  size_t utf8_tail_start;  // when streaming, bytes from here on may be an unfinished code point

  // Class of the character at p and its length in bytes.
  uint8_t peek(size_t p, int* len) const {
    if (p >= n || (!final && p >= utf8_tail_start)) { *len = 0; return kEnd; }
    unsigned c = s[p];
    if (c < 0x80) {
      *len = 1;
      return unicode::kAsciiClass[c];
    }
    uint32_t cp = unicode::decode_utf8(s + p, n - p, len);
    return unicode::classify(cp);
  }
};

}  // namespace

size_t pretokenize(std::string_view text, bool final, std::vector<uint32_t>* ends) {
  Scanner sc{reinterpret_cast<const unsigned char*>(text.data()), text.size(), final,
             text.size()};
  if (!final) sc.utf8_tail_start = text.size() - unicode::incomplete_utf8_tail(sc.s, sc.n);
  const unsigned char* s = sc.s;
  const size_t n = sc.n;
  size_t p = 0;
  while (p < n) {
    int len0;
    uint8_t c0 = sc.peek(p, &len0);
    if (c0 == kEnd) return p;  // only when streaming: an unfinished code point

    // 1. contractions
    if (s[p] == '\'') {
      if (p + 1 >= n) {
        if (!final) return p;
      } else {
        unsigned b1 = s[p + 1];
        if (b1 == 's' || b1 == 't' || b1 == 'm' || b1 == 'd') {
          p += 2;
          ends->push_back(static_cast<uint32_t>(p));
          continue;
        }
        if (b1 == 'r' || b1 == 'v' || b1 == 'l') {
          if (p + 2 >= n) {
            if (!final) return p;
          } else if (s[p + 2] == (b1 == 'l' ? 'l' : 'e')) {
            p += 3;
            ends->push_back(static_cast<uint32_t>(p));
            continue;
          }
        }
      }
    }

    // 2-4. " ?" + a run of letters, numbers or other characters
    size_t q = p;
    int lenq = len0;
    uint8_t cls = c0;
    if (s[p] == ' ') {
      int len1;
      uint8_t c1 = sc.peek(p + 1, &len1);
      if (c1 == kEnd && !final) return p;
      if (c1 != kEnd && c1 != unicode::kSpace) {
        q = p + 1;
        lenq = len1;
        cls = c1;
      }
    }
    if (cls != unicode::kSpace) {
      size_t r = q + lenq;
      int len;
      uint8_t c;
      while ((c = sc.peek(r, &len)) == cls) r += len;
      if (c == kEnd && !final) return p;
      p = r;
      ends->push_back(static_cast<uint32_t>(p));
      continue;
    }

    // 5-6. white space
    size_t last_start = p;
    size_t r = p + len0;
    int len;
    uint8_t c;
    while ((c = sc.peek(r, &len)) == unicode::kSpace) {
      last_start = r;
      r += len;
    }
    if (c == kEnd) {
      if (!final) return p;
      p = r;  // 5: the run reaches the end of text
    } else if (last_start > p) {
      p = last_start;  // 5: leave the last white-space character for the next piece
    } else {
      p = r;  // 6: a single white-space character before a non-space
    }
    ends->push_back(static_cast<uint32_t>(p));
  }
  return p;
}

}  // namespace rz
