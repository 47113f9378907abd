// base/check.h: the one error type and check macros every module uses.
//
// ringzero reports bad input and broken invariants by throwing rz::Error with a
// one-line message that names what was wrong (a file, a flag, a config key, a rank).
// `ringzero` catches it at the top, prints "ringzero: error: <message>" and exits 1.
// Nothing here aborts: a check never segfaults and never hangs.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace rz {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// printf-style formatting into a std::string.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "a", "a or b", "a, b or c": the allowed values in an error or help line.
std::string or_list(const std::vector<std::string>& items);

[[noreturn]] void fail(const std::string& msg);

// The names of an enum's values (all: every value, in order; name: a value's name), and
// the value a name stands for: an unknown one throws "WHAT: expected a, b or c, found 'x'".
template <typename E, size_t N>
std::vector<std::string> enum_names(const E (&all)[N], const char* (*name)(E)) {
  std::vector<std::string> out;
  for (E e : all) out.emplace_back(name(e));
  return out;
}

template <typename E, size_t N>
E parse_enum(const std::string& s, const E (&all)[N], const char* (*name)(E), const char* what) {
  for (E e : all)
    if (s == name(e)) return e;
  fail(strfmt("%s: expected %s, found '%s'", what, or_list(enum_names(all, name)).c_str(), s.c_str()));
}

}  // namespace rz

// RZ_CHECK(cond, fmt, ...): throws rz::Error("<formatted message>") when cond is false.
#define RZ_CHECK(cond, ...)                        \
  do {                                             \
    if (!(cond)) ::rz::fail(::rz::strfmt(__VA_ARGS__)); \
  } while (0)

// RZ_FAIL(fmt, ...): throws unconditionally.
#define RZ_FAIL(...) ::rz::fail(::rz::strfmt(__VA_ARGS__))

// RZ_ENFORCE_EQ(a, b): an internal invariant; prints both values, the expressions and file:line.
#define RZ_ENFORCE_EQ(a, b)                                                              \
  do {                                                                                   \
    auto rz_a_ = (a);                                                                    \
    auto rz_b_ = (b);                                                                    \
    if (!(rz_a_ == rz_b_))                                                               \
      ::rz::fail(::rz::strfmt("%s:%d: invariant %s == %s broken (%s vs %s)", __FILE__,   \
                              __LINE__, #a, #b, std::to_string(rz_a_).c_str(),           \
                              std::to_string(rz_b_).c_str()));                           \
  } while (0)

// RZ_SYSCHECK(expr, what): for POSIX calls returning -1 on error; message carries strerror.
#define RZ_SYSCHECK(expr, ...)                                                         \
  do {                                                                                 \
    if ((expr) < 0) ::rz::fail(::rz::strfmt(__VA_ARGS__) + ": " + ::rz::errno_string()); \
  } while (0)

namespace rz {
std::string errno_string();
}
