// model/json_input.cpp: bounded JSON from users' files (see json_input.h).
#include "model/json_input.h"

#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"
#include "model/safetensors.h"

namespace rz {

nlohmann::json parse_untrusted_json(std::string_view text, int max_depth, const char* what, const std::string& path) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // per open object, the keys seen so far
  auto cb = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        RZ_CHECK(depth < max_depth, "%s %s: JSON nests deeper than %d levels", what, path.c_str(), max_depth);
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string())
          RZ_CHECK(keys.back().insert(parsed.get<std::string>()).second, "%s %s: key '%s' appears twice in one object",
                   what, path.c_str(), printable_name(parsed.get<std::string>()).c_str());
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    RZ_FAIL("%s %s: not valid JSON: %s", what, path.c_str(), e.what());
  }
}

nlohmann::json read_untrusted_json_file(const std::string& path, size_t max_bytes, int max_depth, const char* what) {
  const int fd = open_input_file(path, what);
  std::string text;
  try {
    struct stat st {};
    RZ_SYSCHECK(::fstat(fd, &st), "%s %s: cannot stat", what, path.c_str());
    const size_t size = static_cast<size_t>(st.st_size);
    RZ_CHECK(size <= max_bytes, "%s %s: %zu bytes, more than the %zu this file may have", what, path.c_str(), size,
             max_bytes);
    resize_or_fail(text, size, what);
    size_t got = 0;
    while (got < size) {
      const ssize_t r = ::read(fd, text.data() + got, size - got);
      if (r < 0 && errno == EINTR) continue;
      RZ_CHECK(r > 0, "%s %s: read failed: %s", what, path.c_str(), r < 0 ? errno_string().c_str() : "it shrank");
      got += static_cast<size_t>(r);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return parse_untrusted_json(text, max_depth, what, path);
}

}  // namespace rz
