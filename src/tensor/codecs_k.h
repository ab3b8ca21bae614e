// Private to src/tensor: the K-quant codecs (codecs_k.cpp) and the codebook codecs
// (codecs_iq.cpp: IQ4_NL, IQ4_XS, MXFP4) that codecs.cpp's dequantize_row /
// quantize_row dispatch to. Each works on num_blocks whole blocks (super-blocks of
// kQK_K values for the K-quants and IQ4_XS, kQK for IQ4_NL and MXFP4); src/dst may
// sit at any byte offset.
#pragma once

#include <cstdint>

namespace pagoda {

void dequantize_q2_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q3_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q4_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q5_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q6_k(const void* src, float* dst, int64_t num_blocks);
void dequantize_q8_k(const void* src, float* dst, int64_t num_blocks);

void quantize_q2_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q3_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q4_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q5_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q6_k(const float* src, void* dst, int64_t num_blocks);
void quantize_q8_k(const float* src, void* dst, int64_t num_blocks);

void dequantize_iq4_nl(const void* src, float* dst, int64_t num_blocks);
void dequantize_iq4_xs(const void* src, float* dst, int64_t num_blocks);
void dequantize_mxfp4(const void* src, float* dst, int64_t num_blocks);

void quantize_iq4_nl(const float* src, void* dst, int64_t num_blocks);
void quantize_iq4_xs(const float* src, void* dst, int64_t num_blocks);
void quantize_mxfp4(const float* src, void* dst, int64_t num_blocks);

}  // namespace pagoda
