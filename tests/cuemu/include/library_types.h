// tests/cuemu/include/library_types.h: the data types the CUDA libraries name, as the
// CUDA-on-CPU emulator (tests/cuemu/README.md) knows them. The values are the toolkit's.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
};
typedef enum cudaDataType_t cudaDataType;
