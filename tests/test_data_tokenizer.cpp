// Tests of data/ tokenizers: GPT-2 pre-tokenization pieces, a hand-made BPE vocabulary whose
// encodings are worked out by hand, the real GPT-2 files (when present) against ids from
// OpenAI's reference encoder, lossless round trips of arbitrary bytes, streaming encode ==
// whole encode, tokenizer.bin, and bad input.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <sys/stat.h>

#include <random>

#include "base/check.h"
#include "data/pretokenize.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/test_paths.h"

using namespace rz;
using rz::testing::ScratchDir;

namespace {

// The repository ships GPT-2's files; the test must fail, not skip, if they go missing.
const std::string kGpt2Dir = std::string(RINGZERO_SOURCE_DIR) + "/data/gpt2";

std::vector<std::string> pieces(std::string_view s) {
  std::vector<uint32_t> ends;
  REQUIRE(pretokenize(s, true, &ends) == s.size());
  std::vector<std::string> out;
  uint32_t start = 0;
  for (uint32_t e : ends) {
    out.emplace_back(s.substr(start, e - start));
    start = e;
  }
  return out;
}

// GPT-2's byte map spelling of byte b (see data/bpe.cpp): printable bytes as themselves,
// the rest as U+0100 + k.
std::string byte_char(int b) {
  static std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int k = 0;
    for (int c = 0; c < 256; c++) {
      bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      uint32_t cp = printable ? c : 0x100 + k++;
      if (cp < 0x80) t[c] = std::string(1, static_cast<char>(cp));
      else t[c] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    return t;
  }();
  return table[b];
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// A tiny vocabulary: ids 0..255 are the bytes (id = byte value), then
//   256 "ll" (l l), 257 "he" (h e), 258 "hell" (he ll), 259 "hello" (hell o),
//   260 " w" (Ġ w), 261 "or" (o r), 262 " wor" (Ġw or), 263 <|endoftext|>.
// Merge ranks follow that order.
void write_tiny_gpt2(const std::string& dir) {
  std::string json = "{";
  for (int b = 0; b < 256; b++) {
    json += '"';
    json += json_escape(byte_char(b));
    json += "\": ";
    json += std::to_string(b);
    json += ", ";
  }
  std::string sp = byte_char(' ');
  json += "\"ll\": 256, \"he\": 257, \"hell\": 258, \"hello\": 259, \"" + sp + "w\": 260, \"or\": 261, \"" +
          sp + "wor\": 262, \"<|endoftext|>\": 263}";
  rz::testing::write_bytes(dir + "/encoder.json", json);
  rz::testing::write_bytes(dir + "/vocab.bpe", "#version: 0.2\nl l\nh e\nhe ll\nhell o\n" + sp + " w\no r\n" +
                                                   sp + "w or\n");
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  // Mostly text-like, with raw bytes (invalid UTF-8, lone continuation bytes, cut sequences).
  static const std::vector<std::string> atoms = {"a", "Z", " ", "  ", "\n", "\t", "'s", "'ll", "7", ".",
                                                 "é", "東", "🙂", "\xC3", "\x80", "\xF0\x9F", "\xFF",
                                                 "\xED\xA0\x80", "\xC0\xAF", "\0"};
  std::string s;
  while (s.size() < n) {
    if (rng() % 4 == 0) s.push_back(static_cast<char>(rng() & 0xFF));
    else s += atoms[rng() % atoms.size()];
  }
  return s;
}

// Encodes text through encode_stream in random-sized pieces, the way `prepare` does.
std::vector<int> encode_in_pieces(const Tokenizer& tok, const std::string& text, std::mt19937& rng) {
  std::vector<int> out;
  std::string carry;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = std::min<size_t>(1 + rng() % 13, text.size() - pos);
    carry += text.substr(pos, n);
    pos += n;
    size_t done = tok.encode_stream(carry, false, &out);
    carry.erase(0, done);
  }
  tok.encode_stream(carry, true, &out);
  return out;
}

}  // namespace

TEST_CASE("pre-tokenization matches GPT-2's pattern") {
  using V = std::vector<std::string>;
  CHECK(pieces("Hello  world's 42 times!!\n\n  x") ==
        V{"Hello", " ", " world", "'s", " 42", " times", "!!", "\n\n ", " x"});
  CHECK(pieces("don't  \t\nend   ") == V{"don", "'t", "  \t", "\n", "end", "   "});
  CHECK(pieces("na\xC3\xAFve \xE6\x9D\xB1\xE4\xBA\xAC \xD9\xA1\xD9\xA2 \xC2\xA0x") ==
        V{"na\xC3\xAFve", " \xE6\x9D\xB1\xE4\xBA\xAC", " \xD9\xA1\xD9\xA2", " ", "\xC2\xA0", "x"});
  CHECK(pieces("'ll're 'Re ?'s") == V{"'ll", "'re", " '", "Re", " ?'", "s"});
  CHECK(pieces("") == V{});
  CHECK(pieces(" ") == V{" "});
  CHECK(pieces("a\xFF\xFE b") == V{"a", "\xFF\xFE", " b"});  // invalid bytes are "other"
}

TEST_CASE("streaming pre-tokenization stops before pieces that later bytes could change") {
  std::vector<uint32_t> ends;
  CHECK(pretokenize("hello wor", false, &ends) == 5);  // " wor" may continue
  ends.clear();
  CHECK(pretokenize("it'", false, &ends) == 2);  // "'" may become "'s"
  ends.clear();
  CHECK(pretokenize("it'r", false, &ends) == 2);  // "'r" may become "'re"
  ends.clear();
  CHECK(pretokenize("a  ", false, &ends) == 1);  // a space run's split depends on what follows
  ends.clear();
  CHECK(pretokenize("ab\xE6\x9D", false, &ends) == 0);  // a cut code point may be a letter
}

TEST_CASE("byte tokenizer") {
  auto tok = make_byte_tokenizer();
  REQUIRE(tok->vocab_size() == 257);
  REQUIRE(tok->eot() == 256);
  REQUIRE(tok->encode("A\xFF") == std::vector<int>{65, 255});
  REQUIRE(tok->decode({104, 105}) == "hi");
  REQUIRE_THROWS_WITH(tok->decode({1, 257}), Catch::Contains("token id 257 outside [0, 257)"));
  REQUIRE_THROWS_WITH(tok->decode_token(-1), Catch::Contains("token id -1"));
}

TEST_CASE("a hand-made BPE vocabulary encodes as worked out by hand") {
  ScratchDir dir;
  write_tiny_gpt2(dir.path);
  auto tok = make_gpt2_tokenizer(dir.path);
  REQUIRE(tok->vocab_size() == 264);
  REQUIRE(tok->eot() == 263);
  // "hello": l l (rank 0) -> h e ll o; h e (1) -> he ll o; he ll (2) -> hell o; hell o (3).
  // " world": Ġ w (4) -> Ġw o r l d; o r (5) -> Ġw or l d; Ġw or (6) -> Ġwor l d.
  CHECK(tok->encode("hello world") == std::vector<int>{259, 262, 'l', 'd'});
  CHECK(tok->encode("hell") == std::vector<int>{258});
  CHECK(tok->encode("lll") == std::vector<int>{256, 'l'});  // merges go left to right
  CHECK(tok->encode("llll") == std::vector<int>{256, 256});
  CHECK(tok->encode("hello hello") == std::vector<int>{259, ' ', 259});  // no " h" merge
  CHECK(tok->encode("\n") == std::vector<int>{'\n'});
  // Pre-tokens over 256 bytes take the heap-ordered merge path: same answers.
  std::vector<int> ls(300, 256);
  ls.push_back('l');
  CHECK(tok->encode(std::string(601, 'l')) == ls);
  std::string hellos;
  for (int i = 0; i < 100; i++) hellos += "hello";
  CHECK(tok->encode(hellos) == std::vector<int>(100, 259));
  CHECK(tok->encode("x" + hellos) == [] {
    std::vector<int> v = {'x'};  // "xh" has no merge: x stays alone
    v.insert(v.end(), 100, 259);
    return v;
  }());
  CHECK(tok->decode({259, 262, 'l', 'd'}) == "hello world");
  CHECK(tok->decode({263}) == "<|endoftext|>");
  REQUIRE_THROWS_WITH(tok->decode({264}), Catch::Contains("token id 264 outside [0, 264)"));
}

TEST_CASE("decode(encode(x)) == x for arbitrary bytes, and streaming encode == whole encode") {
  ScratchDir dir;
  write_tiny_gpt2(dir.path);
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(make_byte_tokenizer());
  toks.push_back(make_gpt2_tokenizer(dir.path));
  toks.push_back(make_gpt2_tokenizer(kGpt2Dir));
  std::mt19937 rng(1234);
  for (const auto& tok : toks) {
    for (int k = 0; k < 300; k++) {
      std::string s = random_bytes(rng, rng() % 200);
      std::vector<int> ids = tok->encode(s);
      REQUIRE(tok->decode(ids) == s);
      REQUIRE(encode_in_pieces(*tok, s, rng) == ids);
    }
  }
}

TEST_CASE("GPT-2 BPE equals OpenAI's reference encoder on fixed strings") {
  auto tok = make_gpt2_tokenizer(kGpt2Dir);
  // `--tokenizer gpt2` without --gpt2-dir finds the same files.
  REQUIRE(make_tokenizer("gpt2", "")->vocab_size() == 50257);
  REQUIRE(tok->vocab_size() == 50257);
  REQUIRE(tok->eot() == 50256);
  // Ids from OpenAI's encoder.py (regex module, encoder.json, vocab.bpe).
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"Hello world", {15496, 995}},
      {"Hello, world! How's it going?", {15496, 11, 995, 0, 1374, 338, 340, 1016, 30}},
      {"I'm sure they'll've done it, don't you think? We're here, aren't we'D",
       {40, 1101, 1654, 484, 1183, 1053, 1760, 340, 11, 836, 470, 345, 892, 30, 775, 821, 994, 11, 3588,
        470, 356, 6, 35}},
      {"   leading spaces and trailing   ", {220, 220, 3756, 9029, 290, 25462, 220, 220, 220}},
      {"line one\n\nline two\n   indented\ttab\r\n",
       {1370, 530, 198, 198, 1370, 734, 198, 220, 220, 773, 4714, 197, 8658, 201, 198}},
      {"\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 na\xC3\xAFve caf\xC3\xA9, S\xC3\xA3o Paulo, Z\xC3\xBCrich, "
       "\xD0\x9C\xD0\xBE\xD1\x81\xD0\xBA\xD0\xB2\xD0\xB0, \xE6\x9D\xB1\xE4\xBA\xAC",
       {127, 250, 77, 26884, 66, 9101, 67, 2634, 41492, 40304, 11, 311, 28749, 34410, 11, 1168, 9116, 7527,
        11, 12466, 250, 15166, 21727, 31583, 38857, 16142, 11, 10545, 251, 109, 12859, 105}},
      {"emoji \xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xF0\x9F\x9A\x80!!",
       {368, 31370, 32485, 41840, 235, 8582, 237, 121, 290, 12520, 248, 222, 3228}},
      {"numbers 12345 3.14159 1,000,000 \xC2\xB2\xC2\xB3 \xE2\x85\xAB",
       {77, 17024, 17031, 2231, 513, 13, 1415, 19707, 352, 11, 830, 11, 830, 1587, 110, 126, 111, 2343, 227,
        104}},
      {"x'S 'tis O'Neil's ''quoted''", {87, 6, 50, 705, 48010, 440, 6, 29354, 338, 10148, 421, 5191, 7061}},
      {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
  };
  for (const auto& [text, ids] : cases) {
    INFO(text);
    CHECK(tok->encode(text) == ids);
    CHECK(tok->decode(ids) == text);
  }
}

TEST_CASE("tokenizer.bin is written in llm.c's layout and read back") {
  ScratchDir dir;
  write_tiny_gpt2(dir.path);
  auto bpe = make_gpt2_tokenizer(dir.path);
  std::string path = dir.file("tokenizer.bin");
  write_llmc_tokenizer(*bpe, path);
  std::string bytes = rz::testing::read_bytes(path);
  const int32_t* h = reinterpret_cast<const int32_t*>(bytes.data());
  REQUIRE(h[0] == 20240328);
  REQUIRE(h[1] == 2);
  REQUIRE(h[2] == 264);
  REQUIRE(h[3] == 263);
  REQUIRE(bytes[1024] == 1);  // token 0: one byte, 0x00
  REQUIRE(bytes[1025] == 0);

  auto tok = make_tokenizer(path, "");
  REQUIRE(tok->name() == "llmc");
  REQUIRE(tok->vocab_size() == 264);
  REQUIRE(tok->eot() == 263);
  REQUIRE(tok->decode({259, 262, 'l', 'd'}) == "hello world");
  REQUIRE(tok->decode_token(263) == "<|endoftext|>");
  REQUIRE_THROWS_WITH(tok->decode({264}), Catch::Contains("token id 264") && Catch::Contains(path));
  REQUIRE_THROWS_WITH(tok->encode("x"), Catch::Contains(path));

  auto byte = make_tokenizer("byte", "");
  write_llmc_tokenizer(*byte, path);
  auto back = load_llmc_tokenizer(path);
  REQUIRE(back->vocab_size() == 257);
  REQUIRE(back->eot() == 256);
  REQUIRE(back->decode({0xE6, 0x9D, 0xB1}) == "\xE6\x9D\xB1");
  // make_tokenizer recognises a byte tokenizer.bin as the byte tokenizer, which can encode.
  auto as_byte = make_tokenizer(path, "");
  REQUIRE(as_byte->name() == "byte");
  REQUIRE(as_byte->encode("hi") == std::vector<int>({'h', 'i'}));
}

TEST_CASE("bad tokenizer files give one-line errors naming the file") {
  ScratchDir dir;
  write_tiny_gpt2(dir.path);
  std::string enc = dir.file("encoder.json"), bpe = dir.file("vocab.bpe");
  std::string good_enc = rz::testing::read_bytes(enc), good_bpe = rz::testing::read_bytes(bpe);
  auto error_of = [&]() -> std::string {
    try {
      make_gpt2_tokenizer(dir.path);
    } catch (const rz::Error& e) {
      REQUIRE(std::string(e.what()).find('\n') == std::string::npos);
      return e.what();
    }
    return "";
  };

  std::remove(enc.c_str());
  CHECK_THAT(error_of(), Catch::Contains(enc) && Catch::Contains("cannot open"));
  rz::testing::write_bytes(enc, good_enc.substr(0, good_enc.size() / 2));
  CHECK_THAT(error_of(), Catch::Contains(enc) && Catch::Contains("malformed JSON"));
  rz::testing::write_bytes(enc, "[1, 2, 3]");
  CHECK_THAT(error_of(), Catch::Contains(enc) && Catch::Contains("expected a JSON object"));
  rz::testing::write_bytes(enc, "{\"a\": \"x\"}");
  CHECK_THAT(error_of(), Catch::Contains(enc) && Catch::Contains("expected an integer id"));
  rz::testing::write_bytes(enc, "{\"a\": 0, \"b\": 5}");
  CHECK_THAT(error_of(), Catch::Contains(enc) && Catch::Contains("id 5"));
  rz::testing::write_bytes(enc, "{\"a\": 0}");
  CHECK_THAT(error_of(), Catch::Contains(enc) && Catch::Contains("no token for byte 0x00"));

  rz::testing::write_bytes(enc, good_enc);
  rz::testing::write_bytes(bpe, good_bpe + "x y\n");
  CHECK_THAT(error_of(), Catch::Contains(bpe + ":9") && Catch::Contains("\"x y\""));
  rz::testing::write_bytes(bpe, good_bpe + "justone\n");
  CHECK_THAT(error_of(), Catch::Contains(bpe + ":9") && Catch::Contains("expected a merge"));
  std::remove(bpe.c_str());
  CHECK_THAT(error_of(), Catch::Contains(bpe) && Catch::Contains("cannot open"));

  rz::testing::write_bytes(dir.file("bad_tok.bin"), std::string(1024, '\0'));
  REQUIRE_THROWS_WITH(make_tokenizer(dir.file("bad_tok.bin"), ""),
                      Catch::Contains("bad_tok.bin") && Catch::Contains("bad magic 0"));
  REQUIRE_THROWS_WITH(make_tokenizer("gpt3", ""), Catch::Contains("expected byte, gpt2"));
  // Without --gpt2-dir: RINGZERO_GPT2_DIR wins over the shipped files, and a wrong one is named.
  setenv("RINGZERO_GPT2_DIR", "/nonexistent/gpt2", 1);
  CHECK_THROWS_WITH(make_tokenizer("gpt2", ""), Catch::Contains("/nonexistent/gpt2/encoder.json"));
  unsetenv("RINGZERO_GPT2_DIR");
  CHECK(default_gpt2_dir() == kGpt2Dir);
}
