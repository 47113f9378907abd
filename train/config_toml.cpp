// train/config_toml.cpp: a TOML config file into a TrainConfig (load_config_toml).
//
// What is the file's: it must be a regular file of at most 1 MiB, its text is made ASCII
// before toml++ sees it (ascii_toml_text says why), and every error names the file and the
// line. What is the key's (its type, its allowed values, the error naming it) is the settings
// table's, in config.cpp, reached through train/config_table.h.
#include "train/config_table.h"
#include "train/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/file.h"
#include "base/printable.h"
#include "data/unicode.h"

namespace rz {
namespace {

constexpr size_t kMaxConfigBytes = size_t(1) << 20;  // a config is a few dozen lines

// The config's bytes, read through open_input_file (a FIFO cannot block it), at most
// kMaxConfigBytes of them.
std::string read_config_text(const std::string& path) {
  const int fd = open_input_file(path, "config file");
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      RZ_FAIL("%s: cannot read config file (%s)", path.c_str(), std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      RZ_FAIL("%s: config file larger than %zu bytes (a config is a list of key = value lines)", path.c_str(),
              kMaxConfigBytes);
    }
  }
  ::close(fd);
  return text;
}

// Why toml++ is given ASCII only: toml++ 3.3 (Debian 12's) reaches __builtin_unreachable,
// undefined behaviour, when it classifies some non-ASCII characters as whitespace or not,
// which its parser does wherever it scans ahead, inside a string of a malformed line too (the
// fuzzer found both). For ASCII that code never runs. So the config's text is rewritten with
// its lines kept (errors name the same line): in "..." strings a non-ASCII character becomes
// its \uXXXX (\UXXXXXXXX) escape, the same string to TOML; in comments a space; anywhere
// else (TOML 1.0 allows it nowhere else), and in '...' strings, which have no escapes, it is
// an error naming the line. Bytes that are not UTF-8 are an error too.
std::string ascii_toml_text(const std::string& text, const std::string& path) {
  enum { code, comment, basic, literal, ml_basic, ml_literal } st = code;
  unsigned line = 1;
  std::string out;
  out.reserve(text.size());
  auto fail = [&](const char* what) { RZ_FAIL("%s:%u: TOML syntax error: %s", path.c_str(), line, what); };
  // The length of the run of quote characters q starting at i.
  auto run_of = [&](size_t i, char q) {
    size_t n = 0;
    while (i + n < text.size() && text[i + n] == q) ++n;
    return n;
  };
  // A UTF-8 byte order mark (some editors write one) is no text: TOML allows it first.
  const size_t start = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    const bool ascii = static_cast<unsigned char>(c) < 0x80;
    if (c == '\n') {
      ++line;
      if (st == comment || st == basic || st == literal) st = code;  // single-line forms end here
      out += c;
      continue;
    }
    switch (st) {
      case code:
        if (!ascii) fail("a non-ASCII character outside a string or a comment");
        out += c;
        if (c == '#') {
          st = comment;
        } else if (c == '"' || c == '\'') {
          const bool multi = run_of(i, c) >= 3;
          st = c == '"' ? (multi ? ml_basic : basic) : (multi ? ml_literal : literal);
          if (multi) {
            out.append(2, c);
            i += 2;
          }
        }
        break;
      case comment:
        out += ascii ? c : ' ';
        break;
      case basic:
      case ml_basic:
        if (!ascii) {
          int len = 1;
          const uint32_t cp = unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + i, text.size() - i, &len);
          if (cp == unicode::kInvalid) fail("bytes that are not UTF-8 in a string");
          out += strfmt(cp > 0xFFFF ? "\\U%08X" : "\\u%04X", static_cast<unsigned>(cp));
          i += size_t(len) - 1;
        } else if (c == '\\') {
          out += c;
          if (i + 1 < text.size() && text[i + 1] != '\n') {  // the escaped character
            if (static_cast<unsigned char>(text[i + 1]) >= 0x80) fail("a backslash before a non-ASCII character");
            out += text[++i];
          }
        } else if (c == '"' && st == basic) {
          out += c;
          st = code;
        } else if (c == '"') {  // up to two quotes of the content, then the closing three
          const size_t n = run_of(i, '"');
          if (n >= 3) st = code;
          out.append(n, '"');
          i += n - 1;
        } else {
          out += c;
        }
        break;
      case literal:
      case ml_literal:
        if (!ascii) fail("a non-ASCII character in a '...' string (which has no escapes): write it in a \"...\" string");
        if (c == '\'' && st == literal) {
          st = code;
        } else if (c == '\'') {
          const size_t n = run_of(i, '\'');
          if (n >= 3) st = code;
          out.append(n - 1, '\'');
          i += n - 1;
        }
        out += c;
        break;
    }
  }
  return out;
}

}  // namespace

void load_config_toml(TrainConfig& cfg, const std::string& path) {
  // A FIFO would block the read forever and a directory would read as an empty file (a run
  // with every default): anything but a regular file is refused before it is opened.
  check_input_file(path, "config file");
  const std::string text = ascii_toml_text(read_config_text(path), path);
  toml::table tbl;
  try {
    tbl = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    if (src.begin.line == 0)  // the file could not be opened
      RZ_FAIL("%s: cannot read config file (%s)", path.c_str(), std::string(e.description()).c_str());
    RZ_FAIL("%s:%u: TOML syntax error: %s", path.c_str(), static_cast<unsigned>(src.begin.line),
            std::string(e.description()).c_str());
  }
  for (auto&& [key_view, value_node] : tbl) {
    const std::string key(key_view.str());
    const toml::node& node = value_node;  // a plain reference: clang 14's lambdas cannot capture a binding
    const unsigned line = static_cast<unsigned>(node.source().begin.line);
    const char* name = config_table::setting_name(key);
    RZ_CHECK(name != nullptr, "%s:%u: unknown key '%s' (ringzero train --help lists the keys)",
             path.c_str(), line, printable(key).c_str());  // a quoted key may hold a NUL: shown whole
    cfg.origins[name] = TrainConfig::Origin::toml;
    try {
      config_table::set_from_toml(cfg, name, node);
    } catch (const Error& e) {
      RZ_FAIL("%s:%u: %s", path.c_str(), line, e.what());
    }
  }
}

}  // namespace rz
