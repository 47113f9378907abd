// base/printable.h: text from outside the program, made safe to show on a terminal.
//
// A flight record, a file name, a tokenizer's token, a peer's error line or a child's stderr
// line can hold bytes a terminal acts on: ESC starts a sequence that retitles the window or
// clears the screen, CR overwrites the line before it, LF forges a second line, and an
// 8-bit C1 byte is a sequence introducer on some terminals. Everything ringzero prints that
// it did not write itself goes through printable() on its way to a terminal: main's error
// line, the launcher's echo of its ranks' stderr and its failure summary, `doctor` and the
// flight summary, warnings that name files found on disk, the resume notes, the settings
// table, and sampled text.
//
// Control characters become escapes (\n \r \t, \x1b, \u0085 for a C1 character written as
// UTF-8, \xNN for a byte that is not UTF-8); printable UTF-8 is kept (a file name with an
// accent reads as itself). A backslash is kept as it is, so escaping twice changes nothing
// more than escaping once: a rank's error line, escaped by the rank, is echoed by the
// launcher unchanged. The result is for reading, not for parsing back.
#pragma once

#include <string>
#include <string_view>

namespace rz {

// Every control character escaped: one line of output, whatever `text` holds.
std::string printable(std::string_view text);

// The same, except that LF and TAB are kept: text meant to span lines (a sample).
std::string printable_lines(std::string_view text);

// printable_lines for text that arrives in pieces (a token at a time) which may split a
// UTF-8 character: a piece's incomplete last character waits for the next piece instead of
// being escaped byte by byte.
class PrintableStream {
 public:
  std::string feed(std::string_view piece);  // what can be shown now
  std::string finish();                      // the rest (an incomplete character, escaped)

 private:
  std::string pending_;
};

}  // namespace rz
