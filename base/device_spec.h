// base/device_spec.h: a device as the user names it (--device), before a rank resolves it.
//
// `cuda:K` and `sim:K` name an ordinal; plain `cuda` and `sim` leave it open, for the trainer
// to give each rank GPU LOCAL_RANK mod the visible GPUs (train/loop.cpp). A DeviceSpec keeps
// that difference, which base/memory.h's Device (always an ordinal) cannot, so a setting
// holds one from the moment it is read and prints back as it was written.
#pragma once

#include <string>

#include "base/memory.h"

namespace rz {

struct DeviceSpec {
  DeviceKind kind = DeviceKind::cpu;
  int index = -1;  // the ordinal the name gives; -1: none (cpu, or plain cuda / sim)
  bool has_index() const { return index >= 0; }
  Device device() const { return Device{kind, has_index() ? index : 0}; }  // an open ordinal reads as 0
  bool operator==(const DeviceSpec&) const = default;
};

// "cpu", "cuda", "cuda:K", "sim" or "sim:K" (K < base/sim_device.h's kDeviceCount). Throws
// "device: expected cpu, cuda or cuda:K ..., found 'NAME'".
DeviceSpec parse_device_spec(const std::string& s);
std::string device_spec_name(DeviceSpec d);  // the name parse_device_spec reads: "cpu", "cuda", "cuda:1"

}  // namespace rz
