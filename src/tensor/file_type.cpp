#include "tensor/file_type.h"

namespace pagoda {

std::optional<LlamaFileType> file_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return LlamaFileType::AllF32;
    case GgmlType::F16: return LlamaFileType::MostlyF16;
    case GgmlType::BF16: return LlamaFileType::MostlyBF16;
    case GgmlType::Q4_0: return LlamaFileType::MostlyQ4_0;
    case GgmlType::Q4_1: return LlamaFileType::MostlyQ4_1;
    case GgmlType::Q5_0: return LlamaFileType::MostlyQ5_0;
    case GgmlType::Q5_1: return LlamaFileType::MostlyQ5_1;
    case GgmlType::Q8_0: return LlamaFileType::MostlyQ8_0;
    case GgmlType::Q2_K: return LlamaFileType::MostlyQ2_K;
    case GgmlType::Q3_K: return LlamaFileType::MostlyQ3_K_S;
    case GgmlType::Q4_K: return LlamaFileType::MostlyQ4_K_S;
    case GgmlType::Q5_K: return LlamaFileType::MostlyQ5_K_S;
    case GgmlType::Q6_K: return LlamaFileType::MostlyQ6_K;
    case GgmlType::IQ4_NL: return LlamaFileType::MostlyIQ4_NL;
    case GgmlType::IQ4_XS: return LlamaFileType::MostlyIQ4_XS;
    // llama.cpp's one MXFP4 label (its quantizer puts the experts in MXFP4, the rest in
    // Q8_0); the closest name for a file whose matrices are all MXFP4.
    case GgmlType::MXFP4: return LlamaFileType::MostlyMXFP4_MOE;
    default: return std::nullopt;
  }
}

}  // namespace pagoda
