// Private to src/tensor: the K-quant codecs (codecs_k.cpp) that codecs.cpp's
// dequantize_row / quantize_row dispatch to. Each works on num_blocks whole
// super-blocks of kQK_K values; src/dst may sit at any byte offset.
#pragma once

#include <cstdint>

namespace pagoda {

void dequantize_q4_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q5_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q6_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q8_k(const void* src, float* dst, int64_t num_blocks);

void quantize_q4_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q5_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q6_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q8_k(const float* src, void* dst, int64_t num_blocks);

}  // namespace pagoda
