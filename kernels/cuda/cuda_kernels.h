// kernels/cuda/cuda_kernels.h: the CUDA backend's kernels, callable from plain C++.
//
// Every pointer argument here is a DEVICE pointer and carries its shape in a comment;
// `stream` is a cudaStream_t passed as void* so this header needs no CUDA headers.
// Each kernel has a CPU twin in kernels/cpu (the reference its test compares against):
//   convert  <-> base/bf16.h (round to nearest even)
//   adamw    <-> kernels/cpu/adamw.h
//   norm     <-> kernels/cpu/global_norm.h
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/bf16.h"
#include "kernels/cpu/adamw.h"  // AdamWStep, shared with the CPU twin

namespace rz::cuda {

// Devices visible to this process; 0 when there is no driver or no GPU (never throws).
int device_count();
std::string device_name(int device);

void* device_alloc(size_t bytes);  // cudaMalloc; throws rz::Error on failure
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

// out[i] = round_to_nearest_even(in[i]); in (n) fp32, out (n) bf16.
void f32_to_bf16(const float* in, bf16* out, size_t n, void* stream = nullptr);
// out[i] = in[i]; in (n) bf16, out (n) fp32 (exact).
void bf16_to_f32(const bf16* in, float* out, size_t n, void* stream = nullptr);

// AdamW on n elements with the CPU twin's arithmetic and step description (rz::AdamWStep,
// kernels/cpu/adamw.h):
//   g = grad[i] * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   master[i] -= lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * master[i])
// master, m, v (n) fp32; grad (n) fp32 or bf16; param (n) fp32 (may alias master) or bf16.
void adamw_f32(float* master, float* param, const float* grad, float* m, float* v, size_t n,
               const AdamWStep& s, void* stream = nullptr);
void adamw_bf16(float* master, bf16* param, const bf16* grad, float* m, float* v, size_t n,
                const AdamWStep& s, void* stream = nullptr);

// Sum of squares of x (n), accumulated in fp64; blocks until the result is on the host.
double sum_of_squares_f32(const float* x, size_t n, void* stream = nullptr);
double sum_of_squares_bf16(const bf16* x, size_t n, void* stream = nullptr);

}  // namespace rz::cuda
