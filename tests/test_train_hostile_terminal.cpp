// Issue 40, section 4: what reaches a terminal, and where the flight records live.
//   - `doctor` and the launcher's failure summary show a crafted flight record's escape
//     sequences, CR and LF escaped (no window-title change, no screen clear, no forged line);
//   - the launcher's echo of a rank's stderr, its "Its error:" summary, and an error line that
//     names a file found on disk are escaped the same way (base/printable.h);
//   - the default flight directory is private to this user: $TMPDIR/ringzero-<uid>, made 0700,
//     refused when it is a link, world-writable or another user's; the ranks' records land
//     inside it, never at the old predictable $TMPDIR/ringzero-flight-port<PORT>.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <ctime>

#include "launch/launch.h"
#include "tests/hostile_util.h"
#include "train/config.h"
#include "train/flight.h"

namespace fs = std::filesystem;
using namespace rz::test::hostile;
using rz::test::quote;

namespace {

// No byte a terminal acts on: C0 controls other than LF, DEL, ESC, 8-bit C1 controls.
bool terminal_safe(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9f)
      return false;
  }
  return true;
}

// Two ranks' records, each from a file anyone could have written: a host that retitles the
// window, an op that colours the screen, an error that clears it and forges a line of its own.
// written_at lies an hour ahead, so a job launched now counts them as its own.
void write_crafted_records(const fs::path& dir) {
  fs::create_directories(dir);
  const double when = static_cast<double>(std::time(nullptr)) + 3600;
  for (int r = 0; r < 2; ++r) {
    nlohmann::json rec = {
        {"format", "ringzero-flight/1"}, {"rank", r}, {"world", 2}, {"backend", "ring"}, {"transport", "shm"},
        {"job", "j"}, {"reason", "timeout"}, {"host", "h\x1b]0;owned\x07"}, {"where", "rank"}, {"written_at", when},
        {"issued", 1}, {"done", 0},
        {"error", {{"message", "timed out\r\n\x1b[2Jrank 1: all is well"}, {"peer", 1 - r}, {"seq", 1}}},
        {"entries",
         {{{"seq", 1}, {"op", "all_reduce\x1b[31m"}, {"dtype", "fp32"}, {"redop", "sum"}, {"purpose", "grads\r"},
           {"state", "running"}, {"phase", "reduce_scatter"}, {"count", 10}, {"round", 0}, {"rounds", 1},
           {"t_issue", 1.0}, {"t_start", 1.0}}}}};
    std::ofstream(dir / ("rank" + std::to_string(r) + ".json")) << rec.dump();
  }
}

// Runs the launcher in this process with its stderr in a file; returns (status, what it printed).
std::pair<int, std::string> launch_capturing(const std::vector<std::string>& argv, const rz::LaunchOptions& opts) {
  const fs::path path = work_dir() / "launcher_stderr.txt";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  const int status = rz::launch_local_ranks(argv, opts);
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  return {status, slurp(path)};
}

}  // namespace

TEST_CASE("doctor shows a crafted flight record's control characters escaped") {
  const fs::path dir = work_dir() / "crafted_doctor";
  write_crafted_records(dir);
  Result r = run("doctor " + quote(dir.string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(terminal_safe(r.output));
  CHECK(r.output.find("all_reduce\\x1b[31m") != std::string::npos);
  CHECK(r.output.find("timed out\\r\\n\\x1b[2Jrank 1: all is well") != std::string::npos);
  CHECK(r.output.find("\nrank 1: all is well") == std::string::npos);  // no forged line
}

TEST_CASE("the launcher's failure summary shows the same records escaped") {
  const fs::path dir = work_dir() / "crafted_launch";
  write_crafted_records(dir);
  const fs::path bad = work_dir() / "bad_init.bin";
  std::ofstream(bad) << std::string(2048, 'x');
  Result r = run(tiny_args("--steps 1 --nproc-per-node 2 --flight-dir " + quote(dir.string()) + " --init " +
                           quote(bad.string())));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("the ranks' flight records") != std::string::npos);
  CHECK(r.output.find("rank 0's error: timed out\\r\\n\\x1b[2J") != std::string::npos);
  CHECK(terminal_safe(r.output));
}

TEST_CASE("a rank's stderr and its quoted error reach the terminal escaped") {
  rz::LaunchOptions opts;
  opts.nproc_per_node = 2;
  opts.stop_grace_s = 3.0;
  auto [status, err] = launch_capturing(
      {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then printf 'x\\033]0;owned\\007\\r\\033[2Jerror: y\\n' >&2; exit 3; fi; "
                        "exec sleep 30"},
      opts);
  INFO(err);
  CHECK(status == 3);
  CHECK(terminal_safe(err));
  CHECK(err.find("[rank 1] x\\x1b]0;owned\\x07\\r\\x1b[2Jerror: y") != std::string::npos);
  CHECK(err.find("Its error: x\\x1b]0;owned") != std::string::npos);
}

TEST_CASE("an error naming a file found on disk shows its name escaped") {
  const fs::path dir = work_dir() / "evil_names";
  fs::create_directories(dir);
  std::ofstream(dir / "x\x1b]0;owned\x07\r.bin") << std::string(2048, 'z');  // a shard with a bad magic
  Result r = run("train --model tiny --vocab 257 --batch 4 --seq 32 --threads 1 --steps 1 --data " +
                 quote((dir / "*.bin").string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find("x\\x1b]0;owned\\x07\\r.bin") != std::string::npos);
  CHECK(terminal_safe(r.output));
}

TEST_CASE("the default flight directory is private to this user, and refused otherwise") {
  const fs::path tmp = work_dir() / "tmpdir";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const fs::path mine = tmp / ("ringzero-" + std::to_string(::geteuid()));
  SECTION("in-process, under a torchrun-style environment: $TMPDIR/ringzero-<uid>/flight-port<PORT>, mode 0700") {
    setenv("TMPDIR", tmp.c_str(), 1);
    setenv("MASTER_PORT", "29517", 1);
    unsetenv("RINGZERO_FLIGHT_DIR");
    const std::string dir = rz::resolve_flight_dir(rz::TrainConfig{});
    CHECK(dir == (mine / "flight-port29517").string());
    struct stat st;
    REQUIRE(::lstat(mine.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(!fs::exists(tmp / "ringzero-flight-port29517"));
    // Planted first by someone else: world-writable, or a link to a directory of theirs.
    fs::remove_all(mine);
    fs::create_directories(mine);
    fs::permissions(mine, fs::perms::all);
    CHECK_THROWS_WITH(rz::resolve_flight_dir(rz::TrainConfig{}), Catch::Contains("is writable by everyone") &&
                                                                     Catch::Contains("--flight-dir"));
    fs::remove_all(mine);
    fs::create_directories(tmp / "elsewhere");
    fs::create_directory_symlink(tmp / "elsewhere", mine);
    CHECK_THROWS_WITH(rz::resolve_flight_dir(rz::TrainConfig{}), Catch::Contains("is a symbolic link"));
    fs::remove(mine);
    if (::geteuid() == 0) {  // another user's directory can only be made here as root
      fs::create_directories(mine);
      fs::permissions(mine, fs::perms::owner_all, fs::perm_options::replace);
      REQUIRE(::chown(mine.c_str(), 65534, 65534) == 0);
      CHECK_THROWS_WITH(rz::resolve_flight_dir(rz::TrainConfig{}), Catch::Contains("belongs to user id 65534"));
    }
    unsetenv("MASTER_PORT");
  }
  SECTION("a launched job: refused before any rank starts; else its ranks' records land in the private directory") {
    fs::create_directories(mine);
    fs::permissions(mine, fs::perms::all);
    Result refused = run(tiny_args("--steps 1 --nproc-per-node 2"), 120, "TMPDIR=" + quote(tmp.string()));
    INFO(refused.output);
    CHECK(refused.status == 1);
    CHECK(last_line(refused.output).find("flight_dir (the default): " + mine.string() + " is writable by everyone") !=
          std::string::npos);
    CHECK(refused.output.find("[rank") == std::string::npos);
    fs::remove_all(mine);
    // A job that runs until stopped; SIGUSR1 makes a rank write its record.
    const fs::path log = work_dir() / "usr1.log";
    setenv("TMPDIR", tmp.c_str(), 1);  // inherited by the spawned job only: work_dir() is fixed already
    const pid_t job = spawn(tiny_args("--steps 100000 --nproc-per-node 2"), log);
    unsetenv("TMPDIR");
    pid_t launcher = -1, rank = -1;  // spawn's shell execs `timeout`, whose child is the launcher
    const bool started = wait_for([&] {
      for (pid_t l : children_of(job)) {
        launcher = l;
        for (pid_t r : children_of(l)) rank = r;
      }
      return rank > 0 && slurp(log).find("step ") != std::string::npos;
    }, 90);
    INFO(slurp(log));
    REQUIRE(started);
    kill(rank, SIGUSR1);
    const fs::path records = mine / ("flight-pid" + std::to_string(launcher));
    const bool written = wait_for([&] {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(records, ec))
        if (e.path().extension() == ".json") return true;
      return false;
    }, 30);
    kill(job, SIGTERM);
    int st = 0;
    waitpid(job, &st, 0);
    CHECK(written);
    struct stat ls;
    REQUIRE(::lstat(mine.c_str(), &ls) == 0);
    CHECK((ls.st_mode & 0777) == 0700);
  }
}
