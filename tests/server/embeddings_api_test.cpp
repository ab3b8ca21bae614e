// The embeddings / rerank wire protocol (src/server/embeddings_api.cpp): input shapes and
// the error matrix, L2 normalisation with Matryoshka truncation, base64 against bytes
// worked out by hand (Python's struct + base64 printed the expected strings), reranker
// scores, prompts and the response JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "server/api_error_expect.h"
#include "server/embeddings_api.h"

namespace pagoda::server {
namespace {

constexpr int32_t kVocab = 100;

EmbeddingsRequest parse(const std::string& body) { return parse_embeddings_request(body, kVocab); }

TEST(EmbeddingsRequest, TakesEveryInputShape) {
  EmbeddingsRequest one = parse(R"({"model":"m","input":"hello"})");
  ASSERT_EQ(one.inputs.size(), 1u);
  EXPECT_EQ(*one.inputs[0].text, "hello");
  EXPECT_EQ(one.model, "m");
  EXPECT_FALSE(one.base64);
  EXPECT_FALSE(one.dimensions);

  EmbeddingsRequest strings = parse(R"({"input":["a","b c"]})");
  ASSERT_EQ(strings.inputs.size(), 2u);
  EXPECT_EQ(*strings.inputs[1].text, "b c");

  EmbeddingsRequest ids = parse(R"({"input":[1,2,99]})");
  ASSERT_EQ(ids.inputs.size(), 1u);
  EXPECT_FALSE(ids.inputs[0].text);
  EXPECT_EQ(ids.inputs[0].tokens, (std::vector<int32_t>{1, 2, 99}));

  EmbeddingsRequest lists = parse(R"({"input":[[1],[0,5]],"encoding_format":"base64","dimensions":8})");
  ASSERT_EQ(lists.inputs.size(), 2u);
  EXPECT_EQ(lists.inputs[1].tokens, (std::vector<int32_t>{0, 5}));
  EXPECT_TRUE(lists.base64);
  EXPECT_EQ(lists.dimensions, 8);

  EmbeddingsRequest nulls = parse(R"({"input":"x","encoding_format":null,"dimensions":null,"user":"u"})");
  EXPECT_FALSE(nulls.base64);
  EXPECT_FALSE(nulls.dimensions);
}

TEST(EmbeddingsRequest, ErrorMatrixNamesTheField) {
  EXPECT_API_ERROR(parse("{"), "", "invalid JSON");
  EXPECT_API_ERROR(parse("[]"), "", "JSON object");
  EXPECT_API_ERROR(parse("{}"), "input", "'input' is required");
  EXPECT_API_ERROR(parse(R"({"input":null})"), "input", "required");
  EXPECT_API_ERROR(parse(R"({"input":7})"), "input", "must be a string");
  EXPECT_API_ERROR(parse(R"({"input":""})"), "input", "empty string");
  EXPECT_API_ERROR(parse(R"({"input":[]})"), "input", "empty array");
  EXPECT_API_ERROR(parse(R"({"input":["a",""]})"), "input", "'input[1]' must not be an empty string");
  EXPECT_API_ERROR(parse(R"({"input":[[1],[]]})"), "input", "'input[1]' must not be an empty list");
  EXPECT_API_ERROR(parse(R"({"input":["a",[1]]})"), "input", "'input[1]' must be a string");
  EXPECT_API_ERROR(parse(R"({"input":[[1],"a"]})"), "input", "'input[1]' must be an array of token ids");
  EXPECT_API_ERROR(parse(R"({"input":[1,"a"]})"), "input", "token ids");
  EXPECT_API_ERROR(parse(R"({"input":[1,2.5]})"), "input", "token ids");
  EXPECT_API_ERROR(parse(R"({"input":[1,100]})"), "input", "token id 100 is outside the vocabulary [0, 100)");
  EXPECT_API_ERROR(parse(R"({"input":[[1,-3]]})"), "input", "token id -3");
  EXPECT_API_ERROR(parse(R"({"input":[{"text":"a"}]})"), "input", "must be");
  EXPECT_API_ERROR(parse("{\"input\":\"\xff\"}"), "", "invalid");  // invalid UTF-8 fails the JSON parse
  std::string many = R"({"input":[)";
  for (size_t i = 0; i <= kMaxInputs; ++i) many += (i ? ",\"a\"" : "\"a\"");
  EXPECT_API_ERROR(parse(many + "]}"), "input", "2049 items; at most 2048");
  EXPECT_API_ERROR(parse(R"({"input":"a","encoding_format":"int8"})"), "encoding_format", "\"float\" or \"base64\"");
  EXPECT_API_ERROR(parse(R"({"input":"a","encoding_format":3})"), "encoding_format", "string");
  EXPECT_API_ERROR(parse(R"({"input":"a","dimensions":0})"), "dimensions", "dimensions");
  EXPECT_API_ERROR(parse(R"({"input":"a","dimensions":"8"})"), "dimensions", "dimensions");
  EXPECT_API_ERROR(parse(R"({"input":"a","dimensions":1.5})"), "dimensions", "dimensions");
  EXPECT_API_ERROR(parse(R"({"input":"a","model":5})"), "model", "model");
}

TEST(NormalizedEmbedding, DividesByTheNormOfTheKeptPrefix) {
  const std::vector<float> v{3.0f, 4.0f, 12.0f};
  EXPECT_EQ(normalized_embedding(v, 3), (std::vector<float>{3.0f / 13, 4.0f / 13, 12.0f / 13}));
  EXPECT_EQ(normalized_embedding(v, 2), (std::vector<float>{0.6f, 0.8f}));  // Matryoshka: renormalised
  EXPECT_EQ(normalized_embedding(v, 1), (std::vector<float>{1.0f}));
  const std::vector<float> zero{0.0f, 0.0f};
  EXPECT_EQ(normalized_embedding(zero, 2), zero);
  const std::vector<float> neg{-5.0f, 0.0f};
  EXPECT_EQ(normalized_embedding(neg, 2), (std::vector<float>{-1.0f, 0.0f}));
}

TEST(Base64Floats, LittleEndianFloat32WithPadding) {
  EXPECT_EQ(base64_floats(std::vector<float>{}), "");
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f}), "AACAPw==");                   // 4 bytes: 2 padding
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");        // 8 bytes: 1
  EXPECT_EQ(base64_floats(std::vector<float>{0.5f, 0.25f, -1.5f}), "AAAAPwAAgD4AAMC/");  // 12: none
}

TEST(EmbeddingsResponse, OpenAIShapeWithShortestFloats) {
  EXPECT_EQ(embeddings_response_json("m", {{0.6f, 0.8f}, {1.0f, -0.1f}}, false, 7),
            R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.6,0.8]},)"
            R"({"object":"embedding","index":1,"embedding":[1,-0.1]}],"model":"m",)"
            R"("usage":{"prompt_tokens":7,"total_tokens":7}})");
  EXPECT_EQ(embeddings_response_json("m\"", {{1.0f}}, true, 1),
            R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":"AACAPw=="}],"model":"m\"",)"
            R"("usage":{"prompt_tokens":1,"total_tokens":1}})");
}

TEST(RerankRequest, ParsesDocumentsAsStringsOrTextObjects) {
  RerankRequest r = parse_rerank_request(
      R"({"model":"m","query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":true})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.query, "q");
  EXPECT_EQ(r.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.top_n, 1);
  EXPECT_TRUE(r.return_documents);
  EXPECT_API_ERROR(parse_rerank_request(R"({"documents":["a"]})"), "query", "'query' is required");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"","documents":["a"]})"), "query", "empty");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":1,"documents":["a"]})"), "query", "string");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q"})"), "documents", "required");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q","documents":"a"})"), "documents", "array");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q","documents":[]})"), "documents", "empty");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q","documents":["a",""]})"), "documents", "'documents[1]'");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q","documents":[{"txt":"a"}]})"), "documents", "'text'");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q","documents":["a"],"top_n":0})"), "top_n", "top_n");
  EXPECT_API_ERROR(parse_rerank_request(R"({"query":"q","documents":["a"],"return_documents":1})"),
                   "return_documents", "return_documents");
}

TEST(RerankScore, OneOutputIsTheScoreTwoAreTheFirstLabelsProbability) {
  EXPECT_FLOAT_EQ(rerank_score(std::vector<float>{0.5f}), 0.5f);
  EXPECT_FLOAT_EQ(rerank_score(std::vector<float>{-3.0f}), -3.0f);
  // softmax([2, 0])[0] = sigmoid(2) = 0.8807970779778823
  EXPECT_FLOAT_EQ(rerank_score(std::vector<float>{2.0f, 0.0f}), 0.88079708f);
  EXPECT_FLOAT_EQ(rerank_score(std::vector<float>{100.0f, 98.0f}), 0.88079708f);  // shift-invariant, no overflow
  EXPECT_FLOAT_EQ(rerank_score(std::vector<float>{0.0f, 0.0f}), 0.5f);
}

TEST(RerankPrompt, FillsTheTemplateInOnePass) {
  EXPECT_EQ(rerank_prompt("Q: {query}\nD: {document}!", "a", "b"), "Q: a\nD: b!");
  // A query spelling a placeholder stays text.
  EXPECT_EQ(rerank_prompt("{query}|{document}", "x{document}", "y"), "x{document}|y");
  EXPECT_EQ(rerank_prompt("{document}{document}", "q", "d"), "dd");
  EXPECT_EQ(rerank_prompt("", "the query", "the doc"), "the query\nthe doc");
}

TEST(RerankResponse, SortedByScoreTiesByIndexTopN) {
  RerankRequest r;
  r.documents = {"a", "b", "c", "d"};
  EXPECT_EQ(rerank_response_json("m", {0.1f, 0.9f, 0.5f, 0.9f}, r, 12),
            R"({"object":"list","model":"m","results":[{"index":1,"relevance_score":0.9},)"
            R"({"index":3,"relevance_score":0.9},{"index":2,"relevance_score":0.5},)"
            R"({"index":0,"relevance_score":0.1}],"usage":{"prompt_tokens":12,"total_tokens":12}})");
  r.top_n = 2;
  r.return_documents = true;
  EXPECT_EQ(rerank_response_json("m", {0.1f, 0.9f, 0.5f, 0.2f}, r, 3),
            R"({"object":"list","model":"m","results":[{"index":1,"relevance_score":0.9,"document":{"text":"b"}},)"
            R"({"index":2,"relevance_score":0.5,"document":{"text":"c"}}],)"
            R"("usage":{"prompt_tokens":3,"total_tokens":3}})");
  r.top_n = 10;  // more than there are documents: all of them
  r.return_documents = false;
  EXPECT_NE(rerank_response_json("m", {0.1f, 0.2f, 0.3f, 0.4f}, r, 0).find(R"("index":0)"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::server
