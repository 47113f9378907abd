// model/json_input.h: JSON read from a file the user gave (safetensors headers, a Hugging Face
// directory's config.json and model.safetensors.index.json).
//
// Such text is untrusted: it is parsed with a bound on nesting (checked as the parser opens
// each container, before anything deeper is built) and a refusal of duplicate keys in one
// object (which JSON parsers resolve differently: one reader would see the first value, another
// the last). Every defect is one rz::Error line naming `what` and the file.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rz {

// what: "safetensors file", "config.json", ...; path: the file (both only name it in errors).
nlohmann::json parse_untrusted_json(std::string_view text, int max_depth, const char* what, const std::string& path);

// Reads a whole small file (at most max_bytes) of JSON: refuses a FIFO, a directory or a larger
// file by name, then parse_untrusted_json.
nlohmann::json read_untrusted_json_file(const std::string& path, size_t max_bytes, int max_depth, const char* what);

}  // namespace rz
