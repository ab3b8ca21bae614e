// Matrix products of GGUF weights with f32 activations.
//
// Contract:
// - A WeightMatrix views (and, for some types/ISAs, repacks into memory it
//   owns) one weight tensor of n_rows rows by n_cols columns in GGUF layout:
//   row r is row_bytes(type, n_cols) bytes at data + r * row_bytes. The GGUF
//   mapping must outlive it. Non-copyable, movable; immutable after prepare(),
//   so any number of threads may read it.
// - matmul() computes y[t][r] = sum_k W[r][k] * x[t][k] for t < n_tokens
//   (x: [n_tokens, n_cols] f32 row-major, y: [n_tokens, n_rows] f32 row-major).
//   Quantized weights are never dequantized as a whole: activations are
//   quantized once per call to 8-bit blocks (one scale per 32 values for the
//   32-wide formats, per 256 for the 256-value super-block formats: the K-quants
//   and IQ4_XS) and integer dot products run on whole blocks.
//   n_tokens == 1 is the decode (matrix-vector) case; larger n_tokens tile so
//   each weight block loaded is reused across tokens.
// - Work is split over `pool`; call from the pool's owner thread only. The
//   hot path allocates nothing once its scratch has grown to the largest size
//   seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/huge_page_buffer.h"
#include "common/thread_pool.h"
#include "kernels/cpu_features.h"
#include "tensor/types.h"

namespace pagoda {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // Requires: type is a weight type, n_cols % block_size(type) == 0, data valid for
  // n_rows * row_bytes(type, n_cols) bytes.
  // slice_rows: the height of the row_slice()s that will be cut from this matrix (0: none),
  // so the packed layout's row tiles can be chosen to fall on slice boundaries.
  static WeightMatrix prepare(GgmlType type, int64_t n_rows, int64_t n_cols, const uint8_t* data,
                              Isa isa = best_isa(), int64_t slice_rows = 0);

  WeightMatrix(WeightMatrix&&) noexcept = default;
  WeightMatrix& operator=(WeightMatrix&&) noexcept = default;
  WeightMatrix(const WeightMatrix&) = delete;
  WeightMatrix& operator=(const WeightMatrix&) = delete;

  GgmlType type() const { return type_; }
  int64_t n_rows() const { return n_rows_; }
  int64_t n_cols() const { return n_cols_; }
  Isa isa() const { return isa_; }
  const uint8_t* data() const { return data_; }      // GGUF layout
  size_t row_bytes() const { return row_bytes_; }
  // Bytes a matmul streams from memory (the GGUF bytes, or the repacked copy).
  size_t stream_bytes() const;
  // Bytes this object itself owns (repacked copies), 0 when it only views the file.
  size_t owned_bytes() const { return owned_.size(); }
  // The repacked copy the kernels read: quantized weights' packed groups, or F16 / BF16
  // panel tiles (matmul_impl.h); null when they read rows (data(), or its copy).
  const uint8_t* packed() const { return packed_; }
  // The packed layout's row tiles (in row groups) and column chunks (in units): see
  // PackedAddr in matmul_impl.h. 1 and n_cols / unit columns: one group after another.
  int packed_tile_groups() const { return tile_groups_; }
  int64_t packed_chunk_units() const { return chunk_units_; }
  // Whether every matmul and read_row reads this matrix's own bytes (a repacked copy, or
  // float weights copied into huge pages; a row slice's parent's), never the `data`
  // prepare() was given: the caller may then drop or free those.
  bool reads_own_copy() const { return own_copy_; }
  // Row r as n_cols floats, bit-identical to dequantize_row() of its GGUF bytes, read
  // from the repacked copy when there is one (matmul_unpack.cpp), so a matrix that is
  // also read row by row (tied token embeddings) needs no GGUF bytes resident: they
  // may be dropped or freed after prepare(). Any thread. Requires: 0 <= r < n_rows().
  void read_row(int64_t r, float* out) const;

  // Rows [row0, row0 + n_rows) as a matrix of their own that shares this one's
  // bytes (GGUF and repacked: nothing is copied) — one expert of a stacked
  // [n_expert * rows, cols] MoE tensor, repacked once as a whole, so the experts
  // sit in one huge-page buffer instead of n_expert heap blocks under 2 MiB.
  // This matrix must outlive the slice (moving it keeps the bytes in place).
  // Requires: row0 % kSliceRowAlign == 0, 0 <= n_rows, row0 + n_rows <= n_rows(), and where
  // the packed layout has row tiles of several groups, row0 and n_rows (or row0 + n_rows ==
  // n_rows()) whole tiles: prepare()'s slice_rows sees to that.
  WeightMatrix row_slice(int64_t row0, int64_t n_rows) const;
  static constexpr int64_t kSliceRowAlign = 16;  // the widest packed row group (AVX-512)

 private:
  GgmlType type_ = GgmlType::F32;
  int64_t n_rows_ = 0;
  int64_t n_cols_ = 0;
  size_t row_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  Isa isa_ = Isa::Scalar;
  HugePageBuffer owned_;
  const uint8_t* packed_ = nullptr;  // owned_.data(), or a parent's (row_slice); null: GGUF layout
  size_t packed_bytes_ = 0;
  int tile_groups_ = 1;
  int64_t chunk_units_ = 0;
  bool own_copy_ = false;
};

// y[n_tokens, n_rows] = x[n_tokens, n_cols] · Wᵀ. Requires: x and y do not alias.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// One output of matmul_multi: y[n_tokens, w->n_rows] for weights w.
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;
};

// For each target: y = x · wᵀ, as matmul() computes it (bit-identical), for
// several matrices that read the same activations (wq/wk/wv; gate/up). When
// the targets are quantized alike (same ISA, same activation format: the
// 32-wide formats share one, the 256-value formats another) the activations are
// quantized once and all tiles run as one pool job; at decode that saves two
// pool round trips and two quantizations per layer for wq/wk/wv. Otherwise
// it calls matmul() per target.
// Requires: 1 to 4 targets, all with the same n_cols; no y aliases x or another y.
void matmul_multi(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool);

// One product of matmul_grouped: y[n_tokens, w->n_rows] = x[row0, row0 + n_tokens) · wᵀ.
struct GroupedMatmul {
  const WeightMatrix* w;
  int64_t row0;
  int64_t n_tokens;
  float* y;
};

// For each job: its rows of x times its matrix, as matmul() computes it
// (bit-identical), for many matrices each reading its own rows of one
// activation array: the experts of a mixture-of-experts layer, each applied to
// the tokens routed to it. When every matrix is quantized alike (as
// matmul_multi) the whole x is quantized once and all jobs' tiles run as one
// pool job — a decode step's 8 chosen experts then cost one pool round trip
// for gate+up and one for down, instead of 16 / 8 (at ~5 us a round trip and
// 48 layers, ~3 ms a token). Otherwise it calls matmul() per job.
// x: [n_x_rows, n_cols] f32. Requires: all matrices share n_cols; every job's
// rows inside [0, n_x_rows); no y aliases x or another job's y.
void matmul_grouped(std::span<const GroupedMatmul> jobs, const float* x, int64_t n_x_rows, ThreadPool& pool);

// Plain reference: dequantize_row each row, dot in double. Independent of every
// fast path; tests compare against it.
void matmul_reference(GgmlType type, int64_t n_rows, int64_t n_cols, const uint8_t* data,
                      const float* x, int64_t n_tokens, float* y);

}  // namespace pagoda
