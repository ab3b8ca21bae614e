// general.file_type labels are llama.cpp's llama_ftype values (llama.h), not
// tensor type ids: the expected numbers here are copied from llama.h's enum.
#include <gtest/gtest.h>

#include "tensor/file_type.h"

namespace pagoda {
namespace {

uint32_t label(GgmlType t) {
  auto ft = file_type_of(t);
  EXPECT_TRUE(ft.has_value()) << type_name(t);
  return ft ? static_cast<uint32_t>(*ft) : 0xFFFFFFFFu;
}

TEST(FileType, UniformWeightTypesGetLlamaCppLabels) {
  EXPECT_EQ(label(GgmlType::F32), 0u);    // LLAMA_FTYPE_ALL_F32
  EXPECT_EQ(label(GgmlType::F16), 1u);    // LLAMA_FTYPE_MOSTLY_F16
  EXPECT_EQ(label(GgmlType::Q4_0), 2u);   // LLAMA_FTYPE_MOSTLY_Q4_0
  EXPECT_EQ(label(GgmlType::Q4_1), 3u);   // LLAMA_FTYPE_MOSTLY_Q4_1
  EXPECT_EQ(label(GgmlType::Q8_0), 7u);   // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(label(GgmlType::Q5_0), 8u);   // LLAMA_FTYPE_MOSTLY_Q5_0
  EXPECT_EQ(label(GgmlType::Q5_1), 9u);   // LLAMA_FTYPE_MOSTLY_Q5_1
  EXPECT_EQ(label(GgmlType::Q2_K), 10u);  // LLAMA_FTYPE_MOSTLY_Q2_K
  EXPECT_EQ(label(GgmlType::Q3_K), 11u);  // LLAMA_FTYPE_MOSTLY_Q3_K_S
  EXPECT_EQ(label(GgmlType::Q4_K), 14u);  // LLAMA_FTYPE_MOSTLY_Q4_K_S
  EXPECT_EQ(label(GgmlType::Q5_K), 16u);  // LLAMA_FTYPE_MOSTLY_Q5_K_S
  EXPECT_EQ(label(GgmlType::Q6_K), 18u);  // LLAMA_FTYPE_MOSTLY_Q6_K
  EXPECT_EQ(label(GgmlType::BF16), 32u);  // LLAMA_FTYPE_MOSTLY_BF16
  EXPECT_EQ(label(GgmlType::IQ4_NL), 25u);  // LLAMA_FTYPE_MOSTLY_IQ4_NL
  EXPECT_EQ(label(GgmlType::IQ4_XS), 30u);  // LLAMA_FTYPE_MOSTLY_IQ4_XS
  EXPECT_EQ(label(GgmlType::MXFP4), 38u);   // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
}

TEST(FileType, TensorIdsAreNotFileTypes) {
  // The bug this mapping replaces: tensor id 8 (Q8_0) read as a file type is Q5_0.
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::Q8_0), 8u);
  EXPECT_NE(label(GgmlType::Q8_0), static_cast<uint32_t>(GgmlType::Q8_0));
  EXPECT_NE(label(GgmlType::BF16), static_cast<uint32_t>(GgmlType::BF16));
}

TEST(FileType, ActivationAndIntegerTypesHaveNoLabel) {
  EXPECT_FALSE(file_type_of(GgmlType::Q8_K).has_value());
  EXPECT_FALSE(file_type_of(GgmlType::Q8_1).has_value());
  EXPECT_FALSE(file_type_of(GgmlType::I32).has_value());
}

}  // namespace
}  // namespace pagoda
