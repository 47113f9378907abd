// base/printable.cpp: see printable.h.
#include "base/printable.h"

#include <cstdint>

#include "base/check.h"

namespace rz {
namespace {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, no
// surrogates, nothing past U+10FFFF) and its code point; 0 when there is none.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  uint32_t v = 0, min = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, v = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, v = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, v = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

std::string escape(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {  // C0 controls and DEL
      if (keep_lines && (c == '\n' || c == '\t')) out += static_cast<char>(c);
      else if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else out += strfmt("\\x%02x", c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = utf8_sequence(text, i, &cp);
    if (n == 0) {  // not UTF-8: a lone byte a terminal in an 8-bit mode may act on
      out += strfmt("\\x%02x", c);
      ++i;
    } else if (cp < 0xA0) {  // C1 controls (U+0080..U+009F): CSI, OSC, NEL ...
      out += strfmt("\\u%04x", static_cast<unsigned>(cp));
      i += n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text) { return escape(text, false); }
std::string printable_lines(std::string_view text) { return escape(text, true); }

std::string PrintableStream::feed(std::string_view piece) {
  pending_.append(piece);
  // The last lead byte within the final three: when its sequence needs more bytes than
  // have arrived, it and what follows it wait.
  size_t cut = pending_.size();
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) cut = pending_.size() - back;
    break;
  }
  std::string out = printable_lines(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return out;
}

std::string PrintableStream::finish() {
  std::string out = printable_lines(pending_);
  pending_.clear();
  return out;
}

}  // namespace rz
