// tests/test_backend_ops.cpp: every op of the op table (kernels/backend.h) on every backend
// this build has, held against the CPU backend (ggml's test-backend-ops is the model).
// Forward and backward, fp32 and bf16, fresh random inputs (never zeros), assigned
// outputs poisoned beforehand, tolerances by dtype (gpu_test_util.h). Shapes are small,
// with channel counts that are not multiples of 32 so every kernel's tail runs, and row
// counts past one reduction chunk. Skipped (exit 77) without a CUDA backend or a GPU.
// The cases tagged [gemm] run a second time with RINGZERO_GEMM_FALLBACK=1 (every GEMM
// through cuBLAS's fallback instead of cuBLASLt: kernels/cuda/launchers.cuh).
// `test_backend_ops --device sim` (CTest: test_backend_ops_sim, every build) holds the
// simulated device (kernels/sim) against the CPU instead, bitwise: its ops are the CPU's,
// so a difference is a bug in the table's checks and translations.
#include "tests/gpu_test_util.h"

#include <cstring>
#include <iterator>
#include <tuple>

using namespace rz;
using namespace rz::test;

int main(int argc, char** argv) { return gpu_test_main(argc, argv, "test_backend_ops", /*sim_capable=*/true); }

TEMPLATE_TEST_CASE("encoder forward and backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(1);
  const int B = 3, T = 10, C = 40, Vp = 7, maxT = 12;  // few tokens: many repeats
  auto inp = random_ints(size_t(B) * T, 0, Vp, rng);
  auto wte = random_vec<E>(size_t(Vp) * C, rng), wpe = random_vec<E>(size_t(maxT) * C, rng);
  std::vector<E> out(size_t(B) * T * C);
  cpu().ops<E>().encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  DevBuf<int> d_inp(inp);
  DevBuf<E> d_wte(wte), d_wpe(wpe), d_out = DevBuf<E>::poisoned(out.size());
  gpu().ops<E>().encoder_forward(d_out.ptr(), d_inp.ptr(), d_wte.ptr(), d_wpe.ptr(), B, T, C);
  compare("encoder_forward out", d_out.host(), out, tol<E>());

  auto dout = random_vec<E>(out.size(), rng);
  auto dwte = random_vec<E>(wte.size(), rng), dwpe = random_vec<E>(wpe.size(), rng);  // accumulated into
  DevBuf<E> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  // The ids come from the host (backend.h); twice in a row, so the second call reuses the
  // pinned staging after waiting only for the first call's upload.
  for (int rep = 0; rep < 2; ++rep) {
    cpu().ops<E>().encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
    gpu().ops<E>().encoder_backward(d_dwte.ptr(), d_dwpe.ptr(), d_dout.ptr(), inp.data(), B, T, C);
  }
  compare("encoder_backward dwte", d_dwte.host(), dwte, tol<E>());
  compare("encoder_backward dwpe", d_dwpe.host(), dwpe, tol<E>());
  if constexpr (std::is_same_v<E, float>) {  // fp32: the CPU's order of additions, bit for bit
    CHECK(std::memcmp(d_dwte.host().data(), dwte.data(), dwte.size() * sizeof(E)) == 0);
    CHECK(std::memcmp(d_dwpe.host().data(), dwpe.data(), dwpe.size() * sizeof(E)) == 0);
  }
}

// The token gradient launches one block column per distinct token (encoder.cu): a batch of
// 70000 distinct tokens is a grid 70000 blocks wide, past the 65535 a grid's y and z may
// have (x may have 2^31 - 1). A vocabulary that large is a real one (Llama 3's has 128256).
TEMPLATE_TEST_CASE("encoder backward over more than 65535 distinct tokens", "[ops][large]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(13);
  const int B = 2, T = 35000, C = 3, Vp = 70003;
  std::vector<int> inp(size_t(B) * T);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] = int((i * 7919) % Vp);  // distinct: 7919 is prime to Vp
  auto dout = random_vec<E>(inp.size() * C, rng);
  auto dwte = random_vec<E>(size_t(Vp) * C, rng), dwpe = random_vec<E>(size_t(T) * C, rng);
  DevBuf<E> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  cpu().ops<E>().encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  gpu().ops<E>().encoder_backward(d_dwte.ptr(), d_dwpe.ptr(), d_dout.ptr(), inp.data(), B, T, C);
  compare("encoder_backward dwte (70000 tokens)", d_dwte.host(), dwte, tol<E>());
  compare("encoder_backward dwpe (70000 tokens)", d_dwpe.host(), dwpe, tol<E>());
}

TEMPLATE_TEST_CASE("layernorm forward and backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(2);
  for (auto [N, C] : {std::pair{70, 100}, std::pair{129, 768}}) {
    CAPTURE(N, C);
    auto inp = random_vec<E>(size_t(N) * C, rng, 2.0f), w = random_vec<E>(C, rng), b = random_vec<E>(C, rng);
    std::vector<E> out(inp.size());
    std::vector<float> mean(N), rstd(N);
    cpu().ops<E>().layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    DevBuf<E> d_inp(inp), d_w(w), d_b(b), d_out = DevBuf<E>::poisoned(out.size());
    DevBuf<float> d_mean = DevBuf<float>::poisoned(N), d_rstd = DevBuf<float>::poisoned(N);
    gpu().ops<E>().layernorm_forward(d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_inp.ptr(), d_w.ptr(), d_b.ptr(), N, C);
    compare("layernorm_forward out", d_out.host(), out, tol<E>());
    compare("layernorm_forward mean", d_mean.host(), mean, tol<float>());
    compare("layernorm_forward rstd", d_rstd.host(), rstd, tol<float>());

    auto dout = random_vec<E>(inp.size(), rng);
    auto dinp = random_vec<E>(inp.size(), rng), dw = random_vec<E>(C, rng), db = random_vec<E>(C, rng);
    DevBuf<E> d_dout(dout), d_dinp(dinp), d_dw(dw), d_db(db);
    // Both sides read the CPU's mean and rstd, so the backward is compared on its own.
    DevBuf<float> c_mean(mean), c_rstd(rstd);
    cpu().ops<E>().layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                                      rstd.data(), N, C);
    gpu().ops<E>().layernorm_backward(d_dinp.ptr(), d_dw.ptr(), d_db.ptr(), d_dout.ptr(), d_inp.ptr(), d_w.ptr(),
                                      c_mean.ptr(), c_rstd.ptr(), N, C);
    compare("layernorm_backward dinp", d_dinp.host(), dinp, tol<E>());
    compare("layernorm_backward dweight", d_dw.host(), dw, tol<E>());
    compare("layernorm_backward dbias", d_db.host(), db, tol<E>());
  }
}

TEMPLATE_TEST_CASE("matmul forward and backward", "[ops][gemm]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(3);
  struct Shape {
    int N, C, OC;
    bool bias;
  };
  for (Shape s : {Shape{70, 48, 67, true}, Shape{64, 128, 192, true}, Shape{33, 64, 96, false}}) {
    const int N = s.N, C = s.C, OC = s.OC;
    CAPTURE(N, C, OC, s.bias);
    auto inp = random_vec<E>(size_t(N) * C, rng), w = random_vec<E>(size_t(OC) * C, rng, 0.2f);
    auto bias = random_vec<E>(OC, rng);
    std::vector<E> out(size_t(N) * OC);
    const E* cb = s.bias ? bias.data() : nullptr;
    cpu().ops<E>().matmul_forward(out.data(), inp.data(), w.data(), cb, N, C, OC);
    DevBuf<E> d_inp(inp), d_w(w), d_bias(bias), d_out = DevBuf<E>::poisoned(out.size());
    gpu().ops<E>().matmul_forward(d_out.ptr(), d_inp.ptr(), d_w.ptr(), s.bias ? d_bias.ptr() : nullptr, N, C, OC);
    compare("matmul_forward out", d_out.host(), out, tol<E>());

    auto dout = random_vec<E>(out.size(), rng);
    auto dinp = random_vec<E>(inp.size(), rng), dw = random_vec<E>(w.size(), rng), db = random_vec<E>(OC, rng);
    DevBuf<E> d_dout(dout), d_dinp(dinp), d_dw(dw), d_db(db);
    cpu().ops<E>().matmul_backward(dinp.data(), dw.data(), s.bias ? db.data() : nullptr, dout.data(), inp.data(),
                                   w.data(), N, C, OC);
    gpu().ops<E>().matmul_backward(d_dinp.ptr(), d_dw.ptr(), s.bias ? d_db.ptr() : nullptr, d_dout.ptr(), d_inp.ptr(),
                                   d_w.ptr(), N, C, OC);
    compare("matmul_backward dinp", d_dinp.host(), dinp, tol<E>());
    compare("matmul_backward dweight", d_dw.host(), dw, tol<E>());
    compare("matmul_backward dbias", d_db.host(), db, tol<E>());  // untouched when there is no bias
  }
  SECTION("dinp null: only the weight gradient") {
    const int N = 40, C = 32, OC = 64;
    auto inp = random_vec<E>(size_t(N) * C, rng), w = random_vec<E>(size_t(OC) * C, rng);
    auto dout = random_vec<E>(size_t(N) * OC, rng), dw = random_vec<E>(w.size(), rng);
    DevBuf<E> d_inp(inp), d_w(w), d_dout(dout), d_dw(dw);
    cpu().ops<E>().matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    gpu().ops<E>().matmul_backward(nullptr, d_dw.ptr(), nullptr, d_dout.ptr(), d_inp.ptr(), d_w.ptr(), N, C, OC);
    compare("matmul_backward dweight (no dinp)", d_dw.host(), dw, tol<E>());
  }
}

// Attention shapes: multi-head (NKV = NH, GPT-2's layout, bitwise today's on the simulated
// device), grouped-query (NKV = NH/3) and multi-query (NKV = 1); head sizes 16, 64 and 32.
struct AttentionShape {
  int B, T, C, NH, NKV;
  size_t qkv_elems() const { return size_t(B) * T * (C + 2 * NKV * (C / NH)); }
};
static const AttentionShape kAttentionShapes[] = {
    {2, 37, 48, 3, 3}, {2, 64, 128, 2, 2}, {2, 37, 96, 6, 2}, {1, 45, 128, 4, 1}};

TEMPLATE_TEST_CASE("attention forward and backward", "[ops][gemm]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(4);
  for (const AttentionShape& s : kAttentionShapes) {
    const int B = s.B, T = s.T, C = s.C, NH = s.NH, NKV = s.NKV;
    CAPTURE(B, T, C, NH, NKV);
    auto qkv = random_vec<E>(s.qkv_elems(), rng);
    std::vector<E> out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
    cpu().ops<E>().attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    DevBuf<E> d_qkv(qkv), d_out = DevBuf<E>::poisoned(out.size()), d_att = DevBuf<E>::poisoned(att.size());
    gpu().ops<E>().attention_forward(d_out.ptr(), d_att.ptr(), d_qkv.ptr(), B, T, C, NH, NKV);
    compare("attention_forward out", d_out.host(), out, tol<E>());
    compare("attention_forward att", d_att.host(), att, tol<E>());

    auto dout = random_vec<E>(out.size(), rng), dqkv = random_vec<E>(qkv.size(), rng);
    DevBuf<E> d_dout(dout), d_dqkv(dqkv), c_att(att);  // both read the CPU's att
    cpu().ops<E>().attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
    gpu().ops<E>().attention_backward(d_dqkv.ptr(), d_dout.ptr(), d_qkv.ptr(), c_att.ptr(), B, T, C, NH, NKV);
    // In bf16 the CPU reference rounds dk and dv after every one of up to T additions
    // (the GPU sums in fp32 and rounds once), so the reference itself strays by about
    // sqrt(T) half-ulps: a wider absolute bar, still far below what a wrong index gives.
    const Tol t = std::is_same_v<E, bf16> ? Tol{6e-2, 2e-2} : tol<E>();
    compare("attention_backward dqkv", d_dqkv.host(), dqkv, t);
  }
}

// The flash-style pair against the CPU's flash pair, and its out against the CPU's
// materialised out. Head sizes 16, 64, 32 and 80 (80: lanes hold 3 dimensions, the last
// partial), T past one 32-query block, NKV in {NH, NH/3, 1}.
TEMPLATE_TEST_CASE("flash attention forward and backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(14);
  std::vector<AttentionShape> shapes(std::begin(kAttentionShapes), std::end(kAttentionShapes));
  shapes.push_back({1, 70, 160, 2, 2});
  shapes.push_back({1, 40, 240, 3, 1});
  for (const AttentionShape& s : shapes) {
    const int B = s.B, T = s.T, C = s.C, NH = s.NH, NKV = s.NKV;
    CAPTURE(B, T, C, NH, NKV);
    auto qkv = random_vec<E>(s.qkv_elems(), rng);
    std::vector<E> out(size_t(B) * T * C), out_m(out.size()), att(size_t(B) * NH * T * T);
    std::vector<float> lse(size_t(B) * NH * T);
    cpu().ops<E>().attention_forward_flash(out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
    cpu().ops<E>().attention_forward(out_m.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    DevBuf<E> d_qkv(qkv), d_out = DevBuf<E>::poisoned(out.size());
    DevBuf<float> d_lse = DevBuf<float>::poisoned(lse.size());
    gpu().ops<E>().attention_forward_flash(d_out.ptr(), d_lse.ptr(), d_qkv.ptr(), B, T, C, NH, NKV);
    compare("attention_forward_flash out", d_out.host(), out, tol<E>());
    compare("attention_forward_flash out vs materialised", d_out.host(), out_m, tol<E>());
    compare("attention_forward_flash lse", d_lse.host(), lse, tol<float>());

    auto dout = random_vec<E>(out.size(), rng), dqkv = random_vec<E>(qkv.size(), rng);
    DevBuf<E> d_dout(dout), d_dqkv(dqkv);
    DevBuf<float> c_lse(lse);  // both read the CPU's lse
    cpu().ops<E>().attention_backward_flash(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH, NKV);
    gpu().ops<E>().attention_backward_flash(d_dqkv.ptr(), d_dout.ptr(), d_qkv.ptr(), c_lse.ptr(), B, T, C, NH, NKV);
    const Tol t = std::is_same_v<E, bf16> ? Tol{6e-2, 2e-2} : tol<E>();
    compare("attention_backward_flash dqkv", d_dqkv.host(), dqkv, t);
  }
}

TEST_CASE("attention: kv heads that do not divide the query heads are refused, naming the op", "[ops]") {
  DevBuf<float> x(std::vector<float>(4096, 1.0f));
  REQUIRE_THROWS_WITH(gpu().ops<float>().attention_forward(x.ptr(), x.ptr(), x.ptr(), 1, 4, 48, 3, 2),
                      Catch::Contains("attention_forward: the 2 key/value heads must divide the 3 query heads"));
  REQUIRE_THROWS_WITH(gpu().ops<float>().attention_backward_flash(x.ptr(), x.ptr(), x.ptr(), x.ptr(), 1, 4, 48, 3, 0),
                      Catch::Contains("attention_backward_flash: the 0 key/value heads must divide"));
}

// RMSNorm: rows past one chunk of the weight gradient's column sums (64), channel counts
// that are not multiples of 32 (every lane's tail), eps as Llama 2 (1e-5) and SmolLM2 (1e-6).
TEMPLATE_TEST_CASE("rmsnorm forward and backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(16);
  for (auto [N, C, eps] : {std::tuple{70, 100, 1e-5f}, std::tuple{129, 576, 1e-6f}}) {
    CAPTURE(N, C, eps);
    auto inp = random_vec<E>(size_t(N) * C, rng, 2.0f), w = random_vec<E>(C, rng);
    std::vector<E> out(inp.size());
    std::vector<float> rstd(N);
    cpu().ops<E>().rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
    DevBuf<E> d_inp(inp), d_w(w), d_out = DevBuf<E>::poisoned(out.size());
    DevBuf<float> d_rstd = DevBuf<float>::poisoned(N);
    gpu().ops<E>().rmsnorm_forward(d_out.ptr(), d_rstd.ptr(), d_inp.ptr(), d_w.ptr(), N, C, eps);
    compare("rmsnorm_forward out", d_out.host(), out, tol<E>());
    compare("rmsnorm_forward rstd", d_rstd.host(), rstd, tol<float>());

    auto dout = random_vec<E>(inp.size(), rng);
    auto dinp = random_vec<E>(inp.size(), rng), dw = random_vec<E>(C, rng);  // accumulated into
    DevBuf<E> d_dout(dout), d_dinp(dinp), d_dw(dw);
    DevBuf<float> c_rstd(rstd);  // both read the CPU's rstd
    cpu().ops<E>().rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    gpu().ops<E>().rmsnorm_backward(d_dinp.ptr(), d_dw.ptr(), d_dout.ptr(), d_inp.ptr(), d_w.ptr(), c_rstd.ptr(), N, C);
    compare("rmsnorm_backward dinp", d_dinp.host(), dinp, tol<E>());
    compare("rmsnorm_backward dweight", d_dw.host(), dw, tol<E>());
  }
}

// RoPE in place on q and k (v must come back untouched, bit for bit): positions from 0 and
// deep into a sequence (pos0, the KV-cache decode's), NKV in {NH, NH/3, 1}, head sizes 16,
// 64 and 80 (an odd number of pairs per 32 lanes: 40), Llama 2's and Llama 3's theta.
TEMPLATE_TEST_CASE("rope forward and backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(17);
  struct Shape {
    int B, T, NH, NKV, hs, pos0;
    float theta;
  };
  for (Shape s : {Shape{2, 37, 3, 3, 16, 0, 10000.0f}, Shape{2, 19, 6, 2, 64, 1000, 500000.0f},
                  Shape{1, 33, 4, 1, 80, 4093, 100000.0f}}) {
    const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, hs = s.hs, pos0 = s.pos0;
    CAPTURE(B, T, NH, NKV, hs, pos0, s.theta);
    const size_t W = size_t(NH + 2 * NKV) * hs, n = size_t(B) * T * W;
    const auto qkv = random_vec<E>(n, rng);
    for (bool backward : {false, true}) {
      CAPTURE(backward);
      std::vector<E> want = qkv;
      DevBuf<E> d(qkv);
      if (backward) {
        cpu().ops<E>().rope_backward(want.data(), B, T, NH, NKV, hs, pos0, s.theta);
        gpu().ops<E>().rope_backward(d.ptr(), B, T, NH, NKV, hs, pos0, s.theta);
      } else {
        cpu().ops<E>().rope_forward(want.data(), B, T, NH, NKV, hs, pos0, s.theta);
        gpu().ops<E>().rope_forward(d.ptr(), B, T, NH, NKV, hs, pos0, s.theta);
      }
      const auto got = d.host();
      compare(backward ? "rope_backward dqkv" : "rope_forward qkv", got, want, tol<E>());
      size_t v_changed = 0;
      for (size_t r = 0; r < size_t(B) * T; ++r)
        for (size_t c = size_t(NH + NKV) * hs; c < W; ++c) v_changed += !same_bits(got[r * W + c], qkv[r * W + c]);
      CHECK(v_changed == 0);
    }
  }
  DevBuf<E> x(std::vector<E>(64, from_f<E>(1.0f)));
  REQUIRE_THROWS_WITH(gpu().ops<E>().rope_forward(x.ptr(), 1, 1, 1, 1, 7, 0, 10000.0f),
                      Catch::Contains("rope_forward: the head size must be even"));
}

// SwiGLU: a width that is not a multiple of the block (every tail), gates far into both
// tails (exp overflowing), and dgate_up poisoned first (assigned, every element written).
TEMPLATE_TEST_CASE("swiglu forward and backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(18);
  for (auto [N, H] : {std::pair{70, 100}, std::pair{3, 1536}}) {
    CAPTURE(N, H);
    auto gate_up = random_vec<E>(size_t(N) * 2 * H, rng, 3.0f);
    gate_up[0] = from_f<E>(-200.0f), gate_up[1] = from_f<E>(200.0f);
    std::vector<E> out(size_t(N) * H);
    cpu().ops<E>().swiglu_forward(out.data(), gate_up.data(), N, H);
    DevBuf<E> d_gu(gate_up), d_out = DevBuf<E>::poisoned(out.size());
    gpu().ops<E>().swiglu_forward(d_out.ptr(), d_gu.ptr(), N, H);
    compare("swiglu_forward out", d_out.host(), out, tol<E>());

    auto dout = random_vec<E>(out.size(), rng);
    std::vector<E> dgu(gate_up.size(), poison<E>());
    cpu().ops<E>().swiglu_backward(dgu.data(), dout.data(), gate_up.data(), N, H);
    DevBuf<E> d_dout(dout), d_dgu = DevBuf<E>::poisoned(gate_up.size());
    gpu().ops<E>().swiglu_backward(d_dgu.ptr(), d_dout.ptr(), d_gu.ptr(), N, H);
    compare("swiglu_backward dgate_up", d_dgu.host(), dgu, tol<E>());
  }
}

// Sampling's attention against a KV cache: one and several new positions, at the start of
// the cache and deep into it, a head size whose lanes hold a partial third dimension (80),
// and fewer kv heads than query heads (grouped-query). Cache rows past the last new
// position are NaN on both sides: a kernel that reads them fails. Where NKV = NH, the
// CPU's output is also held against the materialised attention's rows at those positions.
TEMPLATE_TEST_CASE("attention against a KV cache", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(15);
  struct Shape {
    int B, Tq, pos, Tc, NH, NKV, hs;
  };
  for (Shape s : {Shape{2, 1, 0, 40, 3, 3, 16}, Shape{2, 1, 33, 40, 3, 3, 16}, Shape{1, 5, 20, 40, 4, 2, 24},
                  Shape{2, 7, 0, 9, 2, 1, 80}, Shape{1, 1, 69, 70, 2, 2, 80}}) {
    const int B = s.B, Tq = s.Tq, pos = s.pos, Tc = s.Tc, NH = s.NH, NKV = s.NKV, hs = s.hs;
    CAPTURE(B, Tq, pos, Tc, NH, NKV, hs);
    const int T = pos + Tq, C = NH * hs, KVC = NKV * hs;  // T: positions filled
    auto q = random_vec<E>(size_t(B) * Tq * C, rng);
    auto kc = random_vec<E>(size_t(B) * Tc * KVC, rng), vc = random_vec<E>(kc.size(), rng);
    for (int b = 0; b < B; ++b)
      for (size_t x = size_t(T) * KVC; x < size_t(Tc) * KVC; ++x)
        kc[size_t(b) * Tc * KVC + x] = vc[size_t(b) * Tc * KVC + x] = poison<E>();
    std::vector<E> out(q.size());
    cpu().ops<E>().attention_forward_kv(out.data(), q.data(), kc.data(), vc.data(), B, Tq, pos, Tc, NH, NKV, hs);
    DevBuf<E> d_q(q), d_k(kc), d_v(vc), d_out = DevBuf<E>::poisoned(out.size());
    gpu().ops<E>().attention_forward_kv(d_out.ptr(), d_q.ptr(), d_k.ptr(), d_v.ptr(), B, Tq, pos, Tc, NH, NKV, hs);
    compare("attention_forward_kv out", d_out.host(), out, tol<E>());
    if (NKV != NH) continue;
    // The same numbers as a fused qkv of T positions (the new queries at the last Tq).
    std::vector<E> qkv(size_t(B) * T * 3 * C), full(size_t(B) * T * C), att(size_t(B) * NH * T * T);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        E* row = qkv.data() + (size_t(b) * T + t) * 3 * C;
        for (int c = 0; c < C; ++c) {
          row[c] = t >= pos ? q[(size_t(b) * Tq + t - pos) * C + c] : from_f<E>(1.0f);
          row[C + c] = kc[(size_t(b) * Tc + t) * C + c];
          row[2 * C + c] = vc[(size_t(b) * Tc + t) * C + c];
        }
      }
    cpu().ops<E>().attention_forward(full.data(), att.data(), qkv.data(), B, T, C, NH, NH);
    std::vector<E> rows(out.size());
    for (int b = 0; b < B; ++b)
      std::copy_n(full.data() + (size_t(b) * T + pos) * C, size_t(Tq) * C, rows.data() + size_t(b) * Tq * C);
    const auto o = outside_tolerance(out, rows, tol<E>());
    INFO("cpu attention_forward_kv vs the materialised rows: " << o.first);
    CHECK(o.bad == 0);
  }
}

TEST_CASE("attention against a KV cache: a bad shape is refused, naming the op", "[ops]") {
  DevBuf<float> x(std::vector<float>(64, 1.0f));
  std::vector<float> h(64, 1.0f);
  REQUIRE_THROWS_WITH(cpu().ops<float>().attention_forward_kv(h.data(), h.data(), h.data(), h.data(), 1, 2, 3, 4, 1, 1, 8),
                      Catch::Contains("attention_forward_kv: positions 3 .. 4 lie outside the cache's 4 rows"));
  REQUIRE_THROWS_WITH(gpu().ops<float>().attention_forward_kv(x.ptr(), x.ptr(), x.ptr(), x.ptr(), 1, 1, 0, 4, 3, 2, 8),
                      Catch::Contains("key/value heads must divide"));
}

TEMPLATE_TEST_CASE("gelu and residual, in place too", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(5);
  const size_t n = 100003;
  auto inp = random_vec<E>(n, rng, 2.0f), other = random_vec<E>(n, rng);
  std::vector<E> out(n);
  cpu().ops<E>().gelu_forward(out.data(), inp.data(), n);
  DevBuf<E> d_inp(inp), d_out = DevBuf<E>::poisoned(n);
  gpu().ops<E>().gelu_forward(d_out.ptr(), d_inp.ptr(), n);
  compare("gelu_forward out", d_out.host(), out, tol<E>());
  DevBuf<E> d_alias(inp);
  gpu().ops<E>().gelu_forward(d_alias.ptr(), d_alias.ptr(), n);
  compare("gelu_forward in place", d_alias.host(), out, tol<E>());

  auto dout = random_vec<E>(n, rng);
  std::vector<E> dinp(n);
  cpu().ops<E>().gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  DevBuf<E> d_dout(dout), d_dinp = DevBuf<E>::poisoned(n);
  gpu().ops<E>().gelu_backward(d_dinp.ptr(), d_inp.ptr(), d_dout.ptr(), n);
  compare("gelu_backward dinp", d_dinp.host(), dinp, tol<E>());
  gpu().ops<E>().gelu_backward(d_dout.ptr(), d_inp.ptr(), d_dout.ptr(), n);
  compare("gelu_backward in place", d_dout.host(), dinp, tol<E>());

  std::vector<E> sum(n);
  cpu().ops<E>().residual_forward(sum.data(), inp.data(), other.data(), n);
  DevBuf<E> d_other(other), d_sum = DevBuf<E>::poisoned(n);
  gpu().ops<E>().residual_forward(d_sum.ptr(), d_inp.ptr(), d_other.ptr(), n);
  compare("residual_forward out", d_sum.host(), sum, tol<E>());
  gpu().ops<E>().residual_forward(d_other.ptr(), d_inp.ptr(), d_other.ptr(), n);
  compare("residual_forward in place", d_other.host(), sum, tol<E>());
}

TEMPLATE_TEST_CASE("crossentropy forward and fused softmax backward", "[ops]", float, bf16) {
  using E = TestType;
  std::mt19937 rng(6);
  struct Shape {
    int N, V, Vp;
  };
  for (Shape s : {Shape{9, 1000, 1024}, Shape{17, 50257, 50304}, Shape{5, 64, 64}}) {
    const int N = s.N, V = s.V, Vp = s.Vp;
    CAPTURE(N, V, Vp);
    auto logits = random_vec<E>(size_t(N) * Vp, rng, 3.0f);
    auto targets = random_ints(N, 0, V, rng);
    std::vector<float> losses(N), lse(N);
    cpu().ops<E>().crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
    DevBuf<E> d_logits(logits);
    DevBuf<int> d_targets(targets);
    DevBuf<float> d_losses = DevBuf<float>::poisoned(N), d_lse = DevBuf<float>::poisoned(N);
    gpu().ops<E>().crossentropy_forward(d_losses.ptr(), d_lse.ptr(), d_logits.ptr(), d_targets.ptr(), N, V, Vp);
    compare("crossentropy_forward losses", d_losses.host(), losses, tol<float>());
    compare("crossentropy_forward lse", d_lse.host(), lse, tol<float>());

    const float dloss = 1.0f / float(N);
    DevBuf<float> c_lse(lse);
    cpu().ops<E>().crossentropy_softmax_backward(logits.data(), lse.data(), targets.data(), dloss, N, V, Vp);
    gpu().ops<E>().crossentropy_softmax_backward(d_logits.ptr(), c_lse.ptr(), d_targets.ptr(), dloss, N, V, Vp);
    auto got = d_logits.host();
    compare("crossentropy_softmax_backward dlogits", got, logits, tol<E>());
    for (int n = 0; n < N; ++n)
      for (int v = V; v < Vp; ++v) REQUIRE(to_f(got[size_t(n) * Vp + v]) == 0.0f);
  }
}

TEST_CASE("conversions are bitwise the CPU's round-to-nearest-even", "[ops]") {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                          3.0e38f, -1.17549435e-38f};
  std::mt19937 rng(7);
  auto r = random_vec<float>(100000, rng, 10.0f);
  x.insert(x.end(), r.begin(), r.end());
  const size_t n = x.size();
  std::vector<bf16> want(n);
  cpu().f32_to_bf16(want.data(), x.data(), n);
  DevBuf<float> d_x(x);
  DevBuf<bf16> d_y = DevBuf<bf16>::poisoned(n);
  gpu().f32_to_bf16(d_y.ptr(), d_x.ptr(), n);
  auto y = d_y.host();
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i) mismatches += y[i].bits != want[i].bits;
  REQUIRE(mismatches == 0);

  std::vector<float> back(n);
  cpu().bf16_to_f32(back.data(), want.data(), n);
  DevBuf<float> d_back = DevBuf<float>::poisoned(n);
  gpu().bf16_to_f32(d_back.ptr(), d_y.ptr(), n);
  auto z = d_back.host();
  REQUIRE(std::memcmp(z.data(), back.data(), n * sizeof(float)) == 0);
}

TEST_CASE("memory ops: copy, zero, copy_to_host", "[ops]") {
  std::mt19937 rng(8);
  auto x = random_vec<float>(4097, rng);
  DevBuf<float> a(x), b = DevBuf<float>::poisoned(x.size());
  gpu().copy(b.ptr(), a.ptr(), x.size() * sizeof(float));
  REQUIRE(b.host() == x);
  gpu().zero(b.ptr(), x.size() * sizeof(float));
  for (float v : b.host()) REQUIRE(v == 0.0f);
  // Device Buffers start zero-filled, like host ones.
  Buffer<float> fresh(MemTag::workspace, 1000, gpu().device());
  std::vector<float> h(1000, 1.0f);
  gpu().copy_to_host(h.data(), fresh.data(), fresh.bytes());
  for (float v : h) REQUIRE(v == 0.0f);
  REQUIRE(MemoryTracker::global().current(MemTag::workspace, gpu().device().kind) >= fresh.bytes());
}

TEST_CASE("accumulate_f32 from fp32 and bf16, accumulate_bf16, assign and add", "[ops]") {
  std::mt19937 rng(9);
  const size_t n = 70001;
  auto dst0 = random_vec<float>(n, rng);
  auto src32 = random_vec<float>(n, rng);
  auto src16 = random_vec<bf16>(n, rng);
  for (bool assign : {false, true}) {
    CAPTURE(assign);
    std::vector<float> a = dst0, b = dst0;
    cpu().accumulate_f32(a.data(), src32.data(), n, assign);
    cpu().accumulate_f32(b.data(), src16.data(), n, assign);
    DevBuf<float> da(dst0), db(dst0);
    DevBuf<float> s32(src32);
    DevBuf<bf16> s16(src16);
    gpu().accumulate_f32(da.ptr(), s32.ptr(), n, assign);
    gpu().accumulate_f32(db.ptr(), s16.ptr(), n, assign);
    REQUIRE(da.host() == a);  // one fp32 addition: exact on both
    REQUIRE(db.host() == b);

    // bf16 into bf16: one fp32 addition, one rounding: bitwise on both.
    std::vector<bf16> c(n);
    for (size_t i = 0; i < n; ++i) c[i] = float_to_bf16(dst0[i]);
    DevBuf<bf16> dc(c);
    cpu().accumulate_bf16(c.data(), src16.data(), n, assign);
    gpu().accumulate_bf16(dc.ptr(), s16.ptr(), n, assign);
    auto got = dc.host();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) mismatches += got[i].bits != c[i].bits;
    REQUIRE(mismatches == 0);
  }
}

TEST_CASE("sum_squares: fp64, matches the CPU, bitwise run to run", "[ops]") {
  std::mt19937 rng(10);
  for (size_t n : {size_t(1), size_t(255), size_t(65536), size_t(65537), size_t(1000003)}) {
    CAPTURE(n);
    auto x = random_vec<float>(n, rng);
    auto xb = random_vec<bf16>(n, rng);
    DevBuf<float> dx(x);
    DevBuf<bf16> dxb(xb);
    const double want = cpu().sum_squares(x.data(), n), want_b = cpu().sum_squares(xb.data(), n);
    const double got = gpu().sum_squares(dx.ptr(), n), got_b = gpu().sum_squares(dxb.ptr(), n);
    REQUIRE(got == Approx(want).epsilon(1e-12));
    REQUIRE(got_b == Approx(want_b).epsilon(1e-12));
    if (under_test().bitwise) {
      REQUIRE(same_bits(got, want));
      REQUIRE(same_bits(got_b, want_b));
    }
    const double again = gpu().sum_squares(dx.ptr(), n);
    REQUIRE(std::memcmp(&again, &got, sizeof(double)) == 0);
  }
  REQUIRE(gpu().sum_squares(static_cast<const float*>(nullptr), 0) == 0.0);
}

TEST_CASE("adamw_update: the three storage cases match the CPU", "[ops]") {
  std::mt19937 rng(11);
  const size_t n = 100003;
  auto w = random_vec<float>(n, rng), g = random_vec<float>(n, rng, 0.1f), m = random_vec<float>(n, rng, 0.01f);
  std::vector<float> v(n);
  for (auto& x : v) x = std::fabs(random_vec<float>(1, rng, 1e-2f)[0]);
  AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  s.t = 7;
  const Tol exact{1e-6, 1e-6};

  SECTION("fp32 params are the master") {
    std::vector<float> cw = w, cm = m, cv = v;
    cpu().adamw_update(cw.data(), nullptr, cm.data(), cv.data(), g.data(), n, s);
    DevBuf<float> dw(w), dg(g), dm(m), dv(v);
    gpu().adamw_update(dw.ptr(), nullptr, dm.ptr(), dv.ptr(), dg.ptr(), n, s);
    compare("adamw fp32 w", dw.host(), cw, exact);
    compare("adamw fp32 m", dm.host(), cm, exact);
    compare("adamw fp32 v", dv.host(), cv, exact);
  }
  auto bf16_case = [&](auto grad) {
    using G = typename decltype(grad)::value_type;
    std::vector<bf16> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = float_to_bf16(w[i]);
    std::vector<float> cmaster = w, cm = m, cv = v;
    std::vector<bf16> cp = p;
    cpu().adamw_update(cp.data(), cmaster.data(), cm.data(), cv.data(), grad.data(), n, s);
    DevBuf<float> dmaster(w), dm(m), dv(v);
    DevBuf<bf16> dp = DevBuf<bf16>::poisoned(n);
    DevBuf<G> dg(grad);
    gpu().adamw_update(dp.ptr(), dmaster.ptr(), dm.ptr(), dv.ptr(), dg.ptr(), n, s);
    compare("adamw bf16 master", dmaster.host(), cmaster, exact);
    compare("adamw bf16 m", dm.host(), cm, exact);
    compare("adamw bf16 v", dv.host(), cv, exact);
    auto gp = dp.host();
    size_t off = 0;  // params are the master rounded once: at most one ulp apart (0 bitwise)
    const int ulps = under_test().bitwise ? 0 : 1;
    for (size_t i = 0; i < n; ++i) {
      const int diff = int(gp[i].bits) - int(cp[i].bits);
      off += diff > ulps || diff < -ulps;
    }
    REQUIRE(off == 0);
  };
  SECTION("bf16 params, bf16 grads, fp32 master") {
    std::vector<bf16> gb(n);
    for (size_t i = 0; i < n; ++i) gb[i] = float_to_bf16(g[i]);
    bf16_case(gb);
  }
  SECTION("bf16 params, fp32 grads, fp32 master") { bf16_case(g); }
}

// Grid-stride kernels cap their grid at kMaxGridBlocks blocks of 256 threads
// (kernels/cuda/grid.h: 65535; 64 in the CUDA-on-CPU emulator's build): past that many
// elements every thread takes a second pass. One AdamW call over 100 tensor spans (two
// launches of at most 64 spans, decay flags mixed) and the elementwise ops, at that size,
// against the CPU.
TEST_CASE("past the grid cap: AdamW over many tensors in one call, conversions, GELU", "[ops][large]") {
  const size_t n = cuda::kMaxGridBlocks * cuda::kThreads + 4099;
  REQUIRE(cuda::grid_stride_passes(n) == 2);
  std::mt19937 rng(12);
  auto w = random_vec<float>(n, rng), g = random_vec<float>(n, rng, 0.1f), m = random_vec<float>(n, rng, 0.01f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 1e-4f * float(1 + i % 7);
  std::vector<AdamWSpan> spans;
  for (size_t k = 0; k < 100; ++k) spans.push_back(AdamWSpan{n * (k + 1) / 100, k % 3 != 0});
  AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  s.t = 3;
  s.spans = spans.data();
  s.num_spans = spans.size();
  std::vector<float> cw = w, cm = m, cv = v;
  cpu().adamw_update(cw.data(), nullptr, cm.data(), cv.data(), g.data(), n, s);
  {
    DevBuf<float> dw(w), dg(g), dm(m), dv(v);
    gpu().adamw_update(dw.ptr(), nullptr, dm.ptr(), dv.ptr(), dg.ptr(), n, s);
    const Tol exact{1e-6, 1e-6};
    compare("adamw spans w", dw.host(), cw, exact);
    compare("adamw spans m", dm.host(), cm, exact);
    compare("adamw spans v", dv.host(), cv, exact);
  }
  {
    std::vector<bf16> cb(n);
    cpu().f32_to_bf16(cb.data(), w.data(), n);
    DevBuf<float> dw(w);
    DevBuf<bf16> db = DevBuf<bf16>::poisoned(n);
    gpu().f32_to_bf16(db.ptr(), dw.ptr(), n);
    auto got = db.host();
    CHECK(std::memcmp(got.data(), cb.data(), n * sizeof(bf16)) == 0);
    std::vector<float> acc = m;
    cpu().accumulate_f32(acc.data(), g.data(), n, false);
    DevBuf<float> dacc(m), dg(g);
    gpu().accumulate_f32(dacc.ptr(), dg.ptr(), n, false);
    CHECK(dacc.host() == acc);  // one fp32 addition each: exact
  }
  {
    std::vector<float> out(n);
    cpu().ops<float>().gelu_forward(out.data(), w.data(), n);
    DevBuf<float> dw(w), dout = DevBuf<float>::poisoned(n);
    gpu().ops<float>().gelu_forward(dout.ptr(), dw.ptr(), n);
    compare("gelu_forward (large)", dout.host(), out, tol<float>());
  }
}
