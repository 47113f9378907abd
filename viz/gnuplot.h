// viz/gnuplot.h: what may go into a gnuplot script as text, and running gnuplot.
//
// ringzero plot writes scripts whose numbers sit in data blocks; the few strings that must
// be script text (a label, a title, the output name, a strategy or op read from a file) go
// through gp_string, which refuses what could end or bend a string literal and quotes the
// rest. gnuplot itself is started without a shell, the script on its standard input.
#pragma once

#include <string>

namespace rz {

// A value as an error message shows it: base/printable.h's escapes (escaped), and in quotes
// (shown), so the message stays one line whatever the input holds.
std::string escaped(const std::string& s);
std::string shown(const std::string& s);

// Refuses (one line naming `what`: the flag, file or field) a control byte (a newline
// would end the command and the rest of the string would run as gnuplot code, `system`
// included), a C1 control, bytes that are not UTF-8, and the `\U+` escape that gnuplot 6
// expands inside single quotes too.
void check_text(const std::string& s, const std::string& what);

// check_text, then a gnuplot single-quoted string: '' stands for '; nothing else is
// special inside single quotes (no backslash escapes, no backquote or @macro substitution).
std::string gp_string(const std::string& s, const std::string& what);

// The name `set output` gets: a relative path is prefixed "./", so that no name starts
// with '|', which gnuplot reads as a shell command to pipe the picture into.
std::string output_name(const std::string& out);

// Runs the gnuplot at `gnuplot` (a path) with the script on its standard input, nothing on
// its command line. Returns its wait status; `said` gets what it printed (stdout and stderr,
// the first 64 KiB). Killed, and an error, after kGnuplotTimeoutS.
constexpr double kGnuplotTimeoutS = 600;
int gnuplot_process(const std::string& gnuplot, const std::string& script, std::string& said);

}  // namespace rz
