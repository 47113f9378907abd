// `--comm nccl`, the parts that run without a GPU: NCCL's unique id through the rendezvous
// store (encoding, refusing a malformed value, a client without the job token gets
// nothing), the backend name in the option lists, and the one-line errors where NCCL
// cannot run (a build without it, or no GPU) from the library and from the binary.
// The collectives themselves need a GPU: test_comm_gpu (skipped here) and
// scripts/device-check.sh run them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include "base/check.h"
#include "comm/factory.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/rendezvous/nccl_id.h"
#include "comm/rendezvous/store.h"
#include "run_ringzero.h"

using namespace rz;

namespace {
NcclIdBytes fake_id(unsigned seed) {
  NcclIdBytes id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>((i * 37 + seed * 101) & 0xff);
  return id;
}
}  // namespace

TEST_CASE("nccl id: hex encoding round-trips every byte value and refuses malformed text") {
  NcclIdBytes all;
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<unsigned char>(255 - i);
  const std::string s = encode_nccl_id(all);
  REQUIRE(s.size() == 2 * kNcclIdBytes);
  REQUIRE(s.substr(0, 4) == "fffe");
  NcclIdBytes back{};
  REQUIRE(decode_nccl_id(s, back));
  REQUIRE(back == all);

  NcclIdBytes untouched = fake_id(7);
  const NcclIdBytes before = untouched;
  CHECK_FALSE(decode_nccl_id(s.substr(1), untouched));          // one character short
  CHECK_FALSE(decode_nccl_id(s + "0", untouched));              // one too many
  CHECK_FALSE(decode_nccl_id(std::string(256, 'g'), untouched));  // not hex
  std::string upper = s;
  upper[0] = 'F';
  CHECK_FALSE(decode_nccl_id(upper, untouched));  // only what encode writes
  CHECK_FALSE(decode_nccl_id("", untouched));
  CHECK(untouched == before);
}

TEST_CASE("nccl id: rank 0 publishes it through the store, the other ranks read the same bytes") {
  StoreServer server(0, "job-token-1");
  const int N = 4;
  std::vector<NcclIdBytes> got(N);
  std::vector<int> made(N, 0);
  std::vector<std::thread> ranks;
  for (int r = N - 1; r >= 0; --r)  // readers first: they wait for rank 0
    ranks.emplace_back([&, r] {
      StoreClient c("127.0.0.1", server.port(), "job-token-1", 10.0);
      got[r] = share_nccl_id(c, r, [&] {
        made[r] += 1;
        return fake_id(3);
      });
    });
  for (auto& t : ranks) t.join();
  CHECK(made == std::vector<int>{1, 0, 0, 0});  // only rank 0 makes an id
  for (int r = 0; r < N; ++r) CHECK(got[r] == fake_id(3));
}

TEST_CASE("nccl id: a malformed value in the store is an error naming the key; no token, no id") {
  StoreServer server(0, "tok-a");
  StoreClient writer("127.0.0.1", server.port(), "tok-a", 5.0);
  writer.set(kNcclIdKey, "not-an-id");
  StoreClient reader("127.0.0.1", server.port(), "tok-a", 5.0);
  REQUIRE_THROWS_WITH(share_nccl_id(reader, 1, [] { return NcclIdBytes{}; }),
                      Catch::Contains(kNcclIdKey) && Catch::Contains("not an NCCL unique id"));
  // Another job's token never reaches the store, so it cannot read (or plant) the id.
  REQUIRE_THROWS_WITH(StoreClient("127.0.0.1", server.port(), "tok-b", 5.0),
                      Catch::Contains("wrong RINGZERO_JOB_TOKEN"));
}

TEST_CASE("nccl: the backend is listed, and where it cannot run it is a one-line error") {
  CHECK(std::find(std::begin(kCommBackends), std::end(kCommBackends), std::string("nccl")) != std::end(kCommBackends));
  const std::string why = nccl_unavailable();
  if (!why.empty()) {
    CommOptions o;
    o.backend = CommBackend::nccl;
    RankEnv env;  // one rank
    REQUIRE_THROWS_WITH(connect_communicator(env, o), Catch::StartsWith("comm nccl: ") && Catch::Contains(why));
    // Before any rendezvous: a two-rank job without a store fails at once, not after a timeout.
    env.world_size = 2;
    env.job_token.assign(8, 'x');  // (a string literal here trips GCC 12's false -Wrestrict)
    o.timeout_s = 600;
    REQUIRE_THROWS_WITH(connect_communicator(env, o), Catch::StartsWith("comm nccl: "));
  } else {
    WARN("a GPU and NCCL are here: the no-GPU error path is not exercised");
  }
  if (nccl_backend_built()) CHECK(why.find("built without NCCL") == std::string::npos);
  else CHECK(why.find("built without NCCL") != std::string::npos);
}

TEST_CASE("nccl: comm-bench without a GPU (or without NCCL) says why in one line and exits 1") {
  if (nccl_unavailable().empty()) {
    WARN("a GPU and NCCL are here: nothing to check");
    return;
  }
  const auto r = test::run_ringzero("comm-bench --comm nccl --device cuda --nproc 1 --max-bytes 1K", 60);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("comm nccl") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  const auto h = test::run_ringzero("comm-bench --help", 60);
  CHECK(h.output.find("nccl") != std::string::npos);
}
