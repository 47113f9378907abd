// train/rank_setup.h's placement: which device a rank gets, and what it refuses, before any
// rendezvous. The simulated device stands in for a GPU (8 ordinals in every build), so the
// ordinal rules run here without one.
#include <catch2/catch.hpp>

#include <string>

#include "base/check.h"
#include "kernels/backend.h"
#include "train/rank_setup.h"

using namespace rz;

namespace {

RankEnv rank(int r, int world, int local) {
  RankEnv env;
  env.rank = r;
  env.world_size = world;
  env.local_rank = local;
  return env;
}

std::string error_of(DeviceSpec spec, const RankEnv& env, CommBackend comm) {
  try {
    place_rank(spec, env, comm);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("place_rank: plain sim spreads a host's ranks over the devices; sim:K puts every rank on K") {
  for (int local = 0; local < 11; ++local) {
    CAPTURE(local);
    const RankPlacement open = place_rank(parse_device_spec("sim"), rank(local, 11, local), CommBackend::ring);
    CHECK(open.device == Device{DeviceKind::sim, local % 8});
    REQUIRE(open.backend != nullptr);
    CHECK(open.backend->device() == open.device);  // the backend is built on the placed device
    const RankPlacement fixed = place_rank(parse_device_spec("sim:5"), rank(local, 11, local), CommBackend::nccl);
    CHECK(fixed.device == Device{DeviceKind::sim, 5});
  }
  // One rank takes device 0 whatever LOCAL_RANK says (a torchrun job of one).
  CHECK(place_rank(parse_device_spec("sim"), rank(0, 1, 3), CommBackend::ring).device == Device{DeviceKind::sim, 0});
  const RankPlacement cpu = place_rank(DeviceSpec{}, rank(1, 2, 1), CommBackend::ring);
  CHECK(cpu.device == Device{});
  CHECK(cpu.backend->device() == Device{});
}

TEST_CASE("place_rank: what the comm backend cannot move is refused in one line") {
  CHECK(error_of(parse_device_spec("sim"), rank(0, 2, 0), CommBackend::mpi).find("--comm mpi moves host buffers only") !=
        std::string::npos);
  CHECK(error_of(parse_device_spec("sim"), rank(0, 1, 0), CommBackend::mpi).empty());  // one rank moves nothing
  CHECK(error_of(DeviceSpec{}, rank(0, 2, 0), CommBackend::nccl).find("nccl moves GPU buffers only") !=
        std::string::npos);
}

TEST_CASE("connect_rank: the communicator works on the placed device") {
  const RankPlacement at = place_rank(parse_device_spec("sim:3"), RankEnv{}, CommBackend::ring);
  auto comm = connect_rank(RankEnv{}, at, CommOptions{});
  CHECK(comm->size() == 1);
  CHECK(comm->transport_name() == "cuda");  // device buffers: the ring's cuda transport
}
