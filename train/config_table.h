// train/config_table.h: what the TOML file reader (train/config_toml.cpp) needs of the
// settings table in train/config.cpp, which owns every key, its type and its checks. Only
// those two files include it.
#pragma once

#include <string>

// toml++ 3.3's parser asserts that a table header begins with a key character (TOML_ASSERT_
// ASSUME: assert() in debug builds, a compiler assumption under NDEBUG with clang), which
// `[/x]` breaks; the error path right after it names the character. So that check is off:
// a bad config is a one-line error, never an abort (debug and fuzz builds) or undefined
// behaviour. (Its preprocessor header is include-once: the definition below stays.)
#include <toml++/impl/preprocessor.h>  // NOLINT: before toml.h, see above
#undef TOML_ASSERT_ASSUME
#define TOML_ASSERT_ASSUME(expr) static_assert(true)
#include <toml++/toml.h>

namespace rz {
struct TrainConfig;  // train/config.h: the table's owner includes this header, not the other way
}  // namespace rz

namespace rz::config_table {

// The key as the table spells it (TOML spelling: "nproc-per-node" gives "nproc_per_node"),
// or null when the table has no such key.
const char* setting_name(const std::string& key);

// Sets the key `name` (the table's spelling) from a TOML value of its own type and checks it
// against its allowed values. Throws "name: expected ..." naming the key, not the file.
void set_from_toml(TrainConfig& cfg, const char* name, const toml::node& node);

}  // namespace rz::config_table
