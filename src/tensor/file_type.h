// llama.cpp's file-type label (GGUF `general.file_type`): the `llama_ftype`
// enum of llama.h (LLAMA_FTYPE_*), which names the quantization mix of a whole
// file. It is a different numbering from the tensor type ids (GgmlType): a Q8_0
// file is file type 7 but tensor type 8, and tensor type 8 read as a file type
// is Q5_0, which is how llama.cpp would mislabel a file written with the tensor id.
//
// Contract: the enumerator values are llama.h's; file_type_of() is the one place
// pagoda (synth, convert) turns a weight type into the label. Plain data, thread-safe.
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/types.h"

namespace pagoda {

enum class LlamaFileType : uint32_t {
  AllF32 = 0,
  MostlyF16 = 1,
  MostlyQ4_0 = 2,
  MostlyQ4_1 = 3,
  MostlyQ8_0 = 7,
  MostlyQ5_0 = 8,
  MostlyQ5_1 = 9,
  MostlyQ2_K = 10,
  MostlyQ3_K_S = 11,
  MostlyQ3_K_M = 12,
  MostlyQ3_K_L = 13,
  MostlyQ4_K_S = 14,
  MostlyQ4_K_M = 15,
  MostlyQ5_K_S = 16,
  MostlyQ5_K_M = 17,
  MostlyQ6_K = 18,
  MostlyIQ4_NL = 25,
  MostlyIQ4_XS = 30,
  MostlyBF16 = 32,
  MostlyMXFP4_MOE = 38,
};

// The label of a file whose weight matrices are all `matrix_type` (norms and
// other 1-D tensors F32, as always). K-quants get the "_S" (small) labels: the
// "_M"/"_L" mixes give some layers a larger type, which a uniform file does not.
// nullopt for a type that names no file type (Q8_1, Q8_K, integer types): the
// writer then leaves general.file_type out and readers guess it, as they do for
// files without it.
std::optional<LlamaFileType> file_type_of(GgmlType matrix_type);

}  // namespace pagoda
