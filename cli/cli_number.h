// cli/cli_number.h: the subcommands' numeric flags, read strictly.
//
// CLI11 2.1 reads "nan" and "inf" into a floating-point option (and CLI::Range lets NaN
// through, since every comparison with it is false) and wraps "-1" into an unsigned one: a
// --seed of -1 became 18446744073709551615. Every numeric flag of a subcommand is added with
// add_number, whose validator runs on the text before CLI11 converts it: an integer of the
// option's type and in its range (no sign for an unsigned one), or a finite number.
// Byte sizes (comm-bench's --min-bytes, memory's --budget) are read by parse_byte_size, one
// grammar for every command.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "base/check.h"

namespace rz {

template <typename T>
CLI::Validator strict_number() {
  using E = std::remove_cv_t<T>;
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if constexpr (std::is_floating_point_v<E>) {
          char* end = nullptr;
          const double d = std::strtod(text.c_str(), &end);
          if (text.empty() || *end != '\0' || !std::isfinite(d) ||
              std::abs(d) > static_cast<double>(std::numeric_limits<E>::max()))
            return "expected a finite number, found '" + text + "'";
        } else {
          E v{};
          const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          if (text.empty() || ec != std::errc() || p != text.data() + text.size())
            return "expected an integer in [" + std::to_string(std::numeric_limits<E>::min()) + ", " +
                   std::to_string(std::numeric_limits<E>::max()) + "], found '" + text + "'";
        }
        return "";
      },
      std::is_floating_point_v<E> ? "NUMBER" : "INT");
}

// app.add_option(name, var, help) with strict_number() on each value (a vector: each element).
template <typename T>
CLI::Option* add_number(CLI::App& app, const std::string& name, T& var, const std::string& help) {
  if constexpr (requires { typename T::value_type; })
    return app.add_option(name, var, help)->check(strict_number<typename T::value_type>());
  else
    return app.add_option(name, var, help)->check(strict_number<T>());
}

// A step benchmark's untimed steps are --untimed-steps: train's --warmup is LR warm-up steps,
// and a bench that runs train's optimizer step must not take the same name for another thing.
// The old spelling is refused with one line naming the new one (not kept as an alias: a reader
// of `bench-step --warmup 2` would take it for LR warm-up). Hidden from --help.
inline void refuse_renamed_warmup(CLI::App& app, const char* command) {
  app.add_option_function<std::string>(
         "--warmup",
         [command](const std::string&) {
           fail(strfmt("--warmup: %s's untimed steps are --untimed-steps (train's --warmup is LR warm-up steps)",
                       command));
         },
         "")
      ->group("");
}

// A byte size: a number (8, 1.5e9) and an optional unit, in any case, spaces allowed: B;
// K, M, G, T and KiB, MiB, GiB, TiB binary (2^10, 2^20, ...); KB, MB, GB, TB decimal (1e3,
// 1e6, ...). So 64M == 64MiB == 67108864 bytes and 80GB == 80e9 in every command. Returns the
// bytes (finite, >= 0; a caller bounds them further); anything else, a negative size
// included, throws "FLAG: expected a size such as 80GB, 64M or 512KiB, found 'TEXT'".
inline double parse_byte_size(const std::string& text, const char* flag) {
  const auto bad = [&]() -> double {
    fail(strfmt("%s: expected a size such as 80GB, 64M or 512KiB, found '%s'", flag, text.c_str()));
  };
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return bad();
  std::string unit(end);
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char ch) { return std::isspace(ch); }), unit.end());
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  struct Unit {
    const char* name;
    double bytes;
  };
  const Unit units[] = {{"", 1},    {"B", 1},     {"K", 0x1p10},  {"KIB", 0x1p10}, {"M", 0x1p20},  {"MIB", 0x1p20},
                        {"G", 0x1p30}, {"GIB", 0x1p30}, {"T", 0x1p40}, {"TIB", 0x1p40}, {"KB", 1e3},    {"MB", 1e6},
                        {"GB", 1e9},  {"TB", 1e12}};
  for (const Unit& u : units)
    if (unit == u.name) return std::isfinite(v * u.bytes) ? v * u.bytes : bad();
  return bad();
}

// app.parse with one error line: false when --help was printed (the command returns 0); a
// bad flag throws rz::Error naming it (CLI11's own text adds a "Run with --help" line and
// exit code 105, and for a range check prints DBL_MAX in full).
inline bool parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e);  // --help
      return false;
    }
    std::string what = e.what();
    if (const size_t cut = what.find(" not in range"); cut != std::string::npos)
      what = what.substr(0, cut) + " is out of range";
    fail(what);
  }
  return true;
}

}  // namespace rz
