// kernels/cpu/cpu_backend.h: the CPU backend, the op table over the templated CPU kernels
// (kernels/cpu/*.h). It adds no arithmetic of its own: every op forwards to the kernel of
// the same name, so the CPU path is the reference every other backend is tested against.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace rz {

std::unique_ptr<Backend> make_cpu_backend();

// The process's CPU backend (stateless; shared by everyone who needs host compute).
Backend& cpu_backend();

}  // namespace rz
