// viz/gnuplot.cpp: the strings a gnuplot script may hold, and gnuplot run without a
// shell (see gnuplot.h).
#include "viz/gnuplot.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

#include "base/check.h"
#include "base/printable.h"

namespace rz {

std::string escaped(const std::string& s) { return printable(s); }
std::string shown(const std::string& s) {
  std::string out(1, '\'');  // (appended, not "'" + x + "'": GCC 12 warns falsely on that)
  out += escaped(s);
  out += '\'';
  return out;
}

void check_text(const std::string& s, const std::string& what) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    RZ_CHECK(c >= 0x20 && c != 0x7f,
             "%s: %s holds a control character (byte 0x%02x at offset %zu); text that goes into the gnuplot script "
             "must be printable",
             what.c_str(), shown(s).c_str(), c, i);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = cp << 6 | (cc & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    ok = ok && !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
         !(cp >= 0xd800 && cp <= 0xdfff);
    RZ_CHECK(ok, "%s: %s is not UTF-8 text (byte 0x%02x at offset %zu)", what.c_str(), shown(s).c_str(), c, i);
    RZ_CHECK(!(cp >= 0x80 && cp <= 0x9f), "%s: %s holds a control character (U+%04X at offset %zu)", what.c_str(),
             shown(s).c_str(), cp, i);
    i += n;
  }
  RZ_CHECK(s.find("\\U+") == std::string::npos,
           "%s: %s holds '\\U+', which gnuplot reads as a Unicode escape inside the script's strings", what.c_str(),
           shown(s).c_str());
}

std::string gp_string(const std::string& s, const std::string& what) {
  check_text(s, what);
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string output_name(const std::string& out) { return out.empty() || out[0] == '/' ? out : "./" + out; }

int gnuplot_process(const std::string& gnuplot, const std::string& script, std::string& said) {
  int in[2], out[2];
  RZ_SYSCHECK(::pipe2(in, O_CLOEXEC), "plot: pipe for gnuplot");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const std::string why = errno_string();
    ::close(in[0]);
    ::close(in[1]);
    RZ_FAIL("plot: pipe for gnuplot: %s", why.c_str());
  }
  char* const argv[] = {const_cast<char*>(gnuplot.c_str()), nullptr};
  // gnuplot may quit before reading the whole script (an error): our write then gets
  // EPIPE instead of a SIGPIPE that would end ringzero without a word.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    ::execv(gnuplot.c_str(), argv);
    _exit(127);
  }
  const std::string fork_error = pid < 0 ? errno_string() : "";
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::sigaction(SIGPIPE, &old, nullptr);
    RZ_FAIL("plot: cannot start %s: %s", gnuplot.c_str(), fork_error.c_str());
  }
  ::fcntl(in[1], F_SETFL, ::fcntl(in[1], F_GETFL) | O_NONBLOCK);
  // Feed the script and drain its output together: either pipe may fill first.
  size_t sent = 0;
  bool feeding = true, timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kGnuplotTimeoutS);
  if (script.empty()) {
    ::close(in[1]);
    feeding = false;
  }
  for (;;) {
    if (std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p[2] = {{out[0], POLLIN, 0}, {feeding ? in[1] : -1, POLLOUT, 0}};
    if (::poll(p, 2, 200) < 0 && errno != EINTR) break;
    if (feeding && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t w = ::write(in[1], script.data() + sent, script.size() - sent);
      if (w > 0) sent += static_cast<size_t>(w);
      // EPIPE: gnuplot stopped reading (it says why on its output).
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent == script.size()) {
        ::close(in[1]);
        feeding = false;
      }
    }
    if (p[0].revents & (POLLIN | POLLERR | POLLHUP)) {
      char buf[4096];
      const ssize_t r = ::read(out[0], buf, sizeof buf);
      if (r > 0 && said.size() < (64u << 10)) said.append(buf, static_cast<size_t>(r));
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) break;  // its end: exited
    }
  }
  if (feeding) ::close(in[1]);
  ::close(out[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGPIPE, &old, nullptr);
  RZ_CHECK(!timed_out, "plot: gnuplot did not finish within %.0f s (killed)", kGnuplotTimeoutS);
  return st;
}

}  // namespace rz
