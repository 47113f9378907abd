// Tests of base/: the memory tracker's accounting and bf16 rounding; atomic files, output and
// input path checks, checked arithmetic and stop notices (issue 26).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/bf16.h"
#include "base/check.h"
#include "base/checked.h"
#include "base/file.h"
#include "base/memory.h"
#include "base/printable.h"
#include "base/process.h"
#include "base/stop_signal.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

using namespace rz;

TEST_CASE("tracker counts current and peak bytes per tag") {
  auto& mt = MemoryTracker::global();
  size_t base_grads = mt.current(MemTag::grads);
  mt.reset_peaks();
  {
    Buffer<float> a(MemTag::grads, 1000);
    REQUIRE(mt.current(MemTag::grads) == base_grads + 4000);
    {
      Buffer<float> b(MemTag::grads, 500);
      REQUIRE(mt.current(MemTag::grads) == base_grads + 6000);
    }
    REQUIRE(mt.current(MemTag::grads) == base_grads + 4000);
    REQUIRE(a[999] == 0.0f);  // zero-initialised
  }
  REQUIRE(mt.current(MemTag::grads) == base_grads);
  REQUIRE(mt.peak(MemTag::grads) == base_grads + 6000);
  mt.reset_peaks();
  REQUIRE(mt.peak(MemTag::grads) == base_grads);
}

TEST_CASE("moving a buffer moves its accounting") {
  auto& mt = MemoryTracker::global();
  size_t before = mt.current(MemTag::workspace);
  Buffer<int> a(MemTag::workspace, 10);
  Buffer<int> b = std::move(a);
  REQUIRE(a.data() == nullptr);
  REQUIRE(b.size() == 10);
  REQUIRE(mt.current(MemTag::workspace) == before + 40);
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN") {
  REQUIRE(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  REQUIRE(bf16_to_float(float_to_bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  REQUIRE(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 and 1 + 2^-6: ties go to even (1 + 2^-6).
  REQUIRE(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) ==
          1.0f + std::ldexp(1.0f, -6));
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  REQUIRE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST_CASE("RZ_CHECK throws rz::Error with the formatted message") {
  try {
    RZ_CHECK(1 + 1 == 3, "bad value %d for --%s", 7, "steps");
    FAIL("no throw");
  } catch (const Error& e) {
    REQUIRE(std::string(e.what()) == "bad value 7 for --steps");
  }
}

TEST_CASE("printable escapes what a terminal acts on and keeps the rest (issue 40)") {
  using namespace std::string_literals;
  // A window-title change, a screen clear, CR/LF forging a line, DEL, a NUL.
  CHECK(printable("a\x1b]0;owned\x07" "b") == "a\\x1b]0;owned\\x07b");
  CHECK(printable("\x1b[2J\x1b[H") == "\\x1b[2J\\x1b[H");
  CHECK(printable("one\r\ntwo\tthree") == "one\\r\\ntwo\\tthree");
  CHECK(printable("x\x7fy"s + '\0' + "z") == "x\\x7fy\\x00z");
  // C1 controls written as UTF-8 (U+009B is CSI), and bytes that are not UTF-8 at all.
  CHECK(printable("a\xc2\x9b" "2Jb") == "a\\u009b2Jb");
  CHECK(printable("\x9b" "2J\xff") == "\\x9b2J\\xff");
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");           // a truncated sequence
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");           // an overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  // Printable UTF-8 and plain text are kept byte for byte.
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 [rank 1] 100%") ==
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 [rank 1] 100%");
  // Escaping twice is escaping once (the launcher echoes lines its ranks escaped).
  for (const std::string& s : {"\x1b[2J\r\n"s, "a\\x1b"s, "\xc2\x85\xff"s})
    CHECK(printable(printable(s)) == printable(s));
  // Text that spans lines keeps LF and TAB only.
  CHECK(printable_lines("l1\n\tl2\r\x1b[2J") == "l1\n\tl2\\r\\x1b[2J");
  // A token at a time: a character split over two tokens is shown whole, a control escaped.
  PrintableStream st;
  std::string shown = st.feed("caf\xc3");
  CHECK(shown == "caf");
  shown += st.feed("\xa9\x1b[2J \xf0\x9f");
  shown += st.feed("\x99");
  shown += st.feed("\x82!\xe2");
  shown += st.finish();  // an incomplete character at the end is escaped
  CHECK(shown == "caf\xc3\xa9\\x1b[2J \xf0\x9f\x99\x82!\\xe2");
}

TEST_CASE("AtomicFile appears whole on commit and leaves nothing behind otherwise") {
  char dir[] = "/tmp/rz_atomic_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/f.bin";
  auto read_all = [](const std::string& p) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) return std::string("<missing>");
    std::string s;
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  write_file_atomic(path, "old contents");
  {
    AtomicFile f(path);
    f.write("new", 3);
    REQUIRE(read_all(path) == "old contents");  // nothing visible before commit
    REQUIRE(read_all(f.temp_path()) == "new");
  }  // destroyed uncommitted: the temporary is gone, the old file stays
  REQUIRE(read_all(path) == "old contents");
  REQUIRE(read_all(path + ".tmp." + std::to_string(getpid())) == "<missing>");
  {
    AtomicFile f(path);
    f.write("xxxxBODY", 8);
    f.seek(0);
    f.write("HEAD", 4);
    f.commit();
  }
  REQUIRE(read_all(path) == "HEADBODY");
  REQUIRE_THROWS_WITH(write_file_atomic(std::string(dir) + "/no/such/dir/f", "x"),
                      Catch::Contains("no/such/dir/f"));
}

// ---- issue 26: outputs never replace an input or a non-regular file --------------------

namespace {

std::string scratch_dir(const char* name) {
  const std::string d = "/tmp/rz_test_base_" + std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an atomic write refuses to replace a directory, FIFO, link or device; /dev/null discards") {
  namespace fs = std::filesystem;
  const std::string d = scratch_dir("atomic");
  const std::string victim = d + "/victim.txt";
  write_file_atomic(victim, "precious");
  fs::create_directory(d + "/dir");
  REQUIRE(mkfifo((d + "/fifo").c_str(), 0644) == 0);
  fs::create_symlink(victim, d + "/link");
  for (const char* name : {"/dir", "/fifo", "/link"}) {
    const std::string p = d + name;
    CHECK(error_text([&] { write_file_atomic(p, "x"); }).find(p + ": exists and is a") == 0);
  }
  CHECK(fs::is_directory(d + "/dir"));
  CHECK(fs::is_fifo(d + "/fifo"));
  CHECK(fs::is_symlink(d + "/link"));
  std::ifstream in(victim);
  std::string kept;
  std::getline(in, kept);
  CHECK(kept == "precious");
  // A link planted at the temporary name is not written through.
  const std::string out = d + "/out.json";
  fs::create_symlink(victim, out + ".tmp." + std::to_string(getpid()));
  write_file_atomic(out, "fresh");
  CHECK(fs::is_regular_file(out));
  std::ifstream v2(victim);
  std::getline(v2, kept);
  CHECK(kept == "precious");
  // /dev/null is written in place and stays the device.
  write_file_atomic("/dev/null", "discarded");
  CHECK(fs::is_character_file("/dev/null"));
  CHECK_FALSE(fs::exists("/dev/null.tmp." + std::to_string(getpid())));
  CHECK(is_dev_null("/dev/null"));
  CHECK_FALSE(is_dev_null(victim));
}

TEST_CASE("a failed write removes the temporary file and names the file and the reason") {
  const std::string d = scratch_dir("efbig");
  const std::string path = d + "/big.bin";
  // A child with a 4 KiB file-size limit (SIGXFSZ ignored, as main.cpp does): write fails with EFBIG.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::string msg;
    try {
      AtomicFile f(path);
      std::vector<char> bytes(1 << 16, 'x');
      f.write(bytes.data(), bytes.size());
      f.commit();
    } catch (const Error& e) {
      msg = e.what();
    }
    const bool named = msg.find(path + ": write failed: File too large") == 0;
    const bool removed = !std::filesystem::exists(path + ".tmp." + std::to_string(getpid()));
    _exit(named && removed && !std::filesystem::exists(path) ? 0 : 1);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("check_run_outputs compares by device and inode, and refuses directories holding inputs") {
  namespace fs = std::filesystem;
  const std::string d = scratch_dir("outputs");
  fs::create_directories(d + "/data");
  write_file_atomic(d + "/data/shard.bin", "tokens");
  fs::create_hard_link(d + "/data/shard.bin", d + "/hard.bin");
  fs::create_directory_symlink(d + "/data", d + "/datalink");
  const std::vector<RunPath> in = {{"the data shard", d + "/data/shard.bin"}, {"the input dir", d + "/textdir"}};
  fs::create_directories(d + "/textdir");
  auto out_err = [&](const std::string& p) { return error_text([&] { check_run_outputs({{"--out", p}}, {}, in); }); };
  auto dir_err = [&](const std::string& p) { return error_text([&] { check_run_outputs({}, {{"--dir", p}}, in); }); };
  for (const std::string& same : {d + "/data/shard.bin", d + "/data/../data/shard.bin", d + "/hard.bin",
                                  d + "/datalink/shard.bin", d + "//data/./shard.bin"})
    CHECK(out_err(same).find("is the data shard") != std::string::npos);
  CHECK(out_err(d + "/textdir/x.json").find("lies inside the input dir") != std::string::npos);
  CHECK(out_err(d + "/textdir").find("exists and is a directory") != std::string::npos);
  CHECK(out_err(d + "/datalink").find("exists and is a symbolic link") != std::string::npos);
  CHECK(out_err(d + "/new/").find("names a directory") != std::string::npos);
  CHECK(out_err(d + "/fresh.json").empty());
  CHECK(out_err("/dev/null").empty());
  CHECK(out_err(d + "/data/other.json").empty());  // beside an input is fine
  CHECK(dir_err(d + "/data").find("holds the data shard") != std::string::npos);
  CHECK(dir_err(d + "/datalink").find("holds the data shard") != std::string::npos);
  CHECK(dir_err(d).find("holds the data shard") != std::string::npos);
  CHECK(dir_err(d + "/textdir").find("is the input dir") != std::string::npos);
  CHECK(dir_err(d + "/textdir/sub").find("lies inside the input dir") != std::string::npos);
  CHECK(dir_err(d + "/data/shard.bin").find("exists and is not a directory") != std::string::npos);
  CHECK(dir_err(d + "/ck").empty());
  CHECK(dir_err(d + "/data/ck").empty());  // a checkpoint folder beside the shards holds none of them
  // Two outputs that are one file, by any spelling.
  CHECK(error_text([&] { check_run_outputs({{"--a", d + "/o.json"}, {"--b", d + "/datalink/../o.json"}}, {}, {}); })
            .find("is the same file as the --a output") != std::string::npos);
}

TEST_CASE("inputs that are not regular files are refused before anything opens them") {
  const std::string d = scratch_dir("inputs");
  REQUIRE(mkfifo((d + "/fifo").c_str(), 0644) == 0);
  CHECK(error_text([&] { check_input_file(d + "/fifo", "config file"); }).find("is a FIFO, not a regular file") !=
        std::string::npos);
  CHECK(error_text([&] { check_input_file(d, "config file"); }).find("is a directory") != std::string::npos);
  CHECK(error_text([&] { check_input_file(d + "/none", "config file"); }).find("No such file") != std::string::npos);
  CHECK(error_text([&] { ::close(open_input_file(d + "/fifo", "token shard")); }).find("is a FIFO") !=
        std::string::npos);  // O_NONBLOCK: the open itself does not wait for a writer
  write_file_atomic(d + "/ok", "x");
  const int fd = open_input_file(d + "/ok", "token shard");
  char c = 0;
  CHECK(::read(fd, &c, 1) == 1);
  ::close(fd);
}

TEST_CASE("checked arithmetic, thread bounds, sizes and signal notices") {
  CHECK(checked_mul<int64_t>(1 << 20, 1 << 20, "x") == int64_t(1) << 40);
  CHECK(error_text([] { checked_mul<int64_t>(int64_t(1) << 40, int64_t(1) << 40, "batch x seq"); })
            .find("batch x seq: 1099511627776 x 1099511627776 is out of range") == 0);
  CHECK(error_text([] { check_thread_count(100000, "--threads"); }).find("--threads: 100000 threads; expected 1 to") == 0);
  CHECK(error_text([] { check_thread_count(0, "--threads"); }).find("expected 1 to") != std::string::npos);
  check_thread_count(max_threads(), "--threads");
  CHECK(error_text([] { checked_bytes(SIZE_MAX / 2, 4, MemTag::activations); }).find("for activations") !=
        std::string::npos);
  std::vector<char> v;
  // Past max_size(): std::length_error, turned into the same one-line error.
  CHECK(error_text([&] { resize_or_fail(v, v.max_size() + 1, "the test buffer"); })
            .find("out of memory allocating") == 0);
#if !defined(__SANITIZE_ADDRESS__)
  // At max_size(): operator new throws std::bad_alloc. AddressSanitizer aborts the process
  // on such a request instead of throwing (allocator_may_return_null only affects malloc
  // and nothrow new), so this half runs in the plain and TSan builds only.
  CHECK(error_text([&] { resize_or_fail(v, v.max_size(), "the test buffer"); })
            .find("out of memory allocating") == 0);
#endif
  int rank = -1, sig = 0;
  CHECK(signal_name(SIGINT) == "SIGINT");
  REQUIRE(parse_stop_notice(stop_notice(3, SIGTERM), &rank, &sig));
  CHECK(rank == 3);
  CHECK(sig == SIGTERM);
  for (const char* bad : {"", "ringzero: rank 1 received SIGINT", "ringzero: rank -1 received SIGINT (signal 2); every "
                          "rank stops after this step", "ringzero: rank 1 received SIGTERM (signal 2); every rank stops "
                          "after this step", "ringzero: rank 1 received SIGINT (signal 2); every rank stops after this "
                          "step and more"})
    CHECK_FALSE(parse_stop_notice(bad, &rank, &sig));
}

TEST_CASE("process_gone: a running process is there; an exited one, reaped or a zombie, is gone") {
  CHECK_FALSE(rz::process_gone(static_cast<int>(getpid())));
  CHECK_FALSE(rz::process_gone(0));  // no pid: cannot be told
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  CHECK_FALSE(rz::process_gone(child));
  kill(child, SIGKILL);
  // Not reaped yet: a zombie, which kill(pid, 0) still finds.
  for (int i = 0; i < 1000 && !rz::process_gone(child); ++i) usleep(1000);
  CHECK(kill(child, 0) == 0);
  CHECK(rz::process_gone(child));
  REQUIRE(waitpid(child, nullptr, 0) == child);
  CHECK(rz::process_gone(child));
}
