// data/pretokenize.h: GPT-2's pre-tokenization, written out by hand for UTF-8 bytes.
//
// The reference encoder splits text with the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// before byte-pair merging. pretokenize() gives the same pieces without a regex engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace rz {

// Appends to *ends the end offset (exclusive) of each pre-token of text, in order; each
// pre-token starts where the previous one ended (the first at 0).
//
// final = true: text is the whole document; returns text.size().
// final = false: text is a prefix of a longer stream; stops before the first pre-token whose
// extent could change with the bytes that follow and returns the bytes covered by the
// pre-tokens emitted. Feeding the rest (plus more bytes) later gives exactly the pieces the
// whole stream would. Invalid UTF-8 bytes are pre-tokenized one by one as "other" characters.
size_t pretokenize(std::string_view text, bool final, std::vector<uint32_t>* ends);

}  // namespace rz
