// base/device_spec.cpp: the one parser of device names, and its inverse.
#include "base/device_spec.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/sim_device.h"

namespace rz {

DeviceSpec parse_device_spec(const std::string& s) {
  if (s == "cpu") return DeviceSpec{};
  for (auto [name, kind] : {std::pair{"cuda", DeviceKind::cuda}, std::pair{"sim", DeviceKind::sim}}) {
    const size_t len = std::strlen(name);
    if (s == name) return DeviceSpec{kind, -1};
    if (s.compare(0, len, name) != 0 || s.size() <= len + 1 || s.size() > len + 5 || s[len] != ':') continue;
    const std::string k = s.substr(len + 1);
    bool digits = true;
    for (char c : k) digits = digits && c >= '0' && c <= '9';
    if (!digits) continue;
    const int index = std::atoi(k.c_str());
    RZ_CHECK(kind != DeviceKind::sim || index < sim::kDeviceCount,
             "device: the simulated device has ordinals sim:0 .. sim:%d, found '%s'", sim::kDeviceCount - 1, s.c_str());
    return DeviceSpec{kind, index};
  }
  fail(strfmt("device: expected cpu, cuda or cuda:K (K a GPU index; sim or sim:K: the simulated device, for "
              "tests), found '%s'",
              s.c_str()));
}

std::string device_spec_name(DeviceSpec d) {
  if (d.kind == DeviceKind::cpu) return "cpu";
  const char* kind = d.kind == DeviceKind::sim ? "sim" : "cuda";
  return d.has_index() ? strfmt("%s:%d", kind, d.index) : std::string(kind);
}

}  // namespace rz
