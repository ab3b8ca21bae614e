// Tokenizer behaviour: special tokens, BOS/EOS, empty input, multi-byte UTF-8
// and byte fallback, the decode leading-space rule, stop tokens, streaming
// decode, misuse, and one-line errors for malformed tokenizer descriptions.
// Expected ids come from the vocab files (or are worked out by hand on the
// synthetic vocabularies below).
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace pagoda {
namespace {

using testing_tok::gpt2;
using testing_tok::llama3;
using testing_tok::llama_spm;
using testing_tok::mistral;
using testing_tok::qwen3;
using testing_tok::write_temp;
using testing_tok::write_temp_gguf;
using Ids = std::vector<TokenId>;

const std::string kLlama = "\xF0\x9F\xA6\x99";  // 🦙 U+1F999

bool contains(const Ids& ids, TokenId id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// ---- special tokens ---------------------------------------------------------

TEST(Tokenizer, ParseSpecialTurnsControlTextIntoOneToken) {
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.encode("<|eot_id|>", false, true), Ids{128009});
  EXPECT_EQ(tok.encode("Hello<|eot_id|>", false, true), (Ids{9906, 128009}));
  EXPECT_EQ(llama_spm().encode("<s>Hello", false, true), (Ids{1, 15043}));
}

TEST(Tokenizer, WithoutParseSpecialControlTextIsPlainText) {
  const Ids ids = llama3().encode("<|eot_id|>", false, false);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_FALSE(contains(ids, 128009));
  EXPECT_EQ(llama3().decode(ids), "<|eot_id|>");
  const Ids spm = llama_spm().encode("<s>Hello", false, false);
  EXPECT_FALSE(contains(spm, 1));
  EXPECT_EQ(llama_spm().decode(spm), "<s>Hello");
}

TEST(Tokenizer, NonSpecialAddedTokensMatchEvenWithoutParseSpecial) {
  // Qwen3's <think> is an added token with special=false.
  EXPECT_EQ(qwen3().encode("<think>", false, false), Ids{151667});
  EXPECT_FALSE(qwen3().is_special(151667));
  EXPECT_EQ(qwen3().decode(Ids{151667}, /*skip_special=*/true), "<think>");
}

TEST(Tokenizer, SpecialTokenMatchingIsLongestFirst) {
  // "<|im_start|>" must not be cut as a shorter added token plus text.
  EXPECT_EQ(qwen3().encode("<|im_start|>user", false, true), (Ids{151644, 872}));
}

TEST(Tokenizer, SpmPutsASpaceAfterEachSpecialToken) {
  // llama.cpp: the text after a special token gets its own '▁' prefix.
  const Ids ids = llama_spm().encode("Hello</s>Hello", false, true);
  EXPECT_EQ(ids, (Ids{15043, 2, 15043}));
}

TEST(Tokenizer, RenderSpecialControlsSpecialPieces) {
  EXPECT_EQ(llama3().token_to_piece(128009, true), "<|eot_id|>");
  EXPECT_EQ(llama3().token_to_piece(128009, false), "");
  EXPECT_EQ(llama3().decode(Ids{9906, 128009}), "Hello<|eot_id|>");
  EXPECT_EQ(llama3().decode(Ids{9906, 128009}, /*skip_special=*/true), "Hello");
  EXPECT_TRUE(llama3().is_special(128009));
  EXPECT_FALSE(llama3().is_special(9906));
}

// ---- BOS / EOS ----------------------------------------------------------------

TEST(Tokenizer, AddSpecialPrependsBosWhenTheModelSaysSo) {
  EXPECT_TRUE(llama_spm().add_bos());
  EXPECT_FALSE(llama_spm().add_eos());
  EXPECT_EQ(llama_spm().encode("Hello", true, false), (Ids{1, 15043}));
  EXPECT_EQ(llama_spm().encode("Hello", false, false), (Ids{15043}));
  // Mistral: add_bos_token in tokenizer_config.json.
  EXPECT_EQ(mistral().encode("Hello", true, false), (Ids{1, 22557}));
}

TEST(Tokenizer, NoBosWhereTheConfigAndPostProcessorAddNone) {
  // Qwen3: add_bos_token false, bos_token null.
  EXPECT_FALSE(qwen3().add_bos());
  EXPECT_EQ(qwen3().bos(), -1);
  EXPECT_EQ(qwen3().eos(), 151645);  // <|im_end|>
  // This Llama 3 packaging has a ByteLevel post-processor and no
  // add_bos_token, so HF adds no BOS either; bos() is still known.
  EXPECT_FALSE(llama3().add_bos());
  EXPECT_EQ(llama3().bos(), 128000);
  EXPECT_EQ(llama3().eos(), 128001);
  EXPECT_EQ(llama3().encode("Hello", true, false), (Ids{9906}));
}

// ---- empty input, UTF-8, byte fallback ----------------------------------------

TEST(Tokenizer, EmptyTextEncodesToNothingOrJustBos) {
  for (const Tokenizer* tok : {&llama_spm(), &gpt2(), &llama3(), &qwen3(), &mistral()}) {
    EXPECT_TRUE(tok->encode("", false, false).empty()) << tok->model_name();
    EXPECT_TRUE(tok->encode("", false, true).empty()) << tok->model_name();
    EXPECT_EQ(tok->decode(Ids{}), "");
  }
  EXPECT_EQ(llama_spm().encode("", true, false), Ids{1});
}

TEST(Tokenizer, MultiByteTextRoundTripsThroughEveryVocabulary) {
  const std::vector<std::string> texts = {
      "h\xC3\xA9llo w\xC3\xB6rld",                   // héllo wörld
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",        // 日本語
      kLlama + kLlama + " llamas " + kLlama,         // emoji, repeated
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB",  // 👩‍💻 (ZWJ sequence)
      "  leading and trailing  ",
      "tabs\tand\nnewlines\r\n",
  };
  for (const Tokenizer* tok : {&llama_spm(), &gpt2(), &llama3(), &qwen3(), &mistral()}) {
    for (const std::string& text : texts) {
      EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text) << tok->model_name();
      EXPECT_EQ(tok->decode(tok->encode(text, true, false), true), text) << tok->model_name();
    }
  }
}

TEST(Tokenizer, SpmFallsBackToByteTokensForUnknownCharacters) {
  // 🦙 is not in Llama 2's vocabulary: '▁' then one <0xNN> token per byte
  // (byte b is id b + 3).
  EXPECT_EQ(llama_spm().encode(kLlama, false, false), (Ids{29871, 243, 162, 169, 156}));
  EXPECT_EQ(llama_spm().token_text(243), "<0xF0>");
  EXPECT_EQ(llama_spm().token_to_piece(243), "\xF0");
  // Mistral's tokenizer.json does the same with byte_fallback (<0xF0> = 243 there too).
  EXPECT_EQ(mistral().encode(kLlama, false, false), (Ids{28705, 243, 162, 169, 156}));
}

TEST(Tokenizer, InvalidUtf8IsTokenizedNotRejected) {
  const std::string bad = "ok\xFF\xC3(";
  for (const Tokenizer* tok : {&llama_spm(), &gpt2(), &llama3(), &qwen3()}) {
    const Ids ids = tok->encode(bad, false, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok->decode(ids), bad) << tok->model_name();
  }
}

TEST(Tokenizer, RandomTextRoundTripsThroughEveryVocabulary) {
  // Strings glued from fragments that stress the pre-tokenizer regexes
  // (contractions, digit runs, whitespace runs, CRLF) and the byte paths
  // (multi-byte, emoji, truncated and invalid UTF-8). Fixed seed.
  const std::vector<std::string> fragments = {
      "a", "Z", "hello", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL", "0", "12345", ".", "!!", "(",
      "-", "_", "\xC3\xA9", "\xE6\x97\xA5", kLlama, "\xE2\x80\x8D", "\xFF", "\xC3", "\xE2\x96\x81"};
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) text += fragments[rng() % fragments.size()];
    for (const Tokenizer* tok : {&llama_spm(), &gpt2(), &llama3(), &qwen3(), &mistral()}) {
      // SPM-style vocabularies spell spaces '▁', so a literal '▁' decodes as ' '.
      if (tok->model_name() == "llama" && text.find("\xE2\x96\x81") != std::string::npos) continue;
      ASSERT_EQ(tok->decode(tok->encode(text, false, false)), text) << tok->model_name();
    }
  }
}

// ---- pieces and the decode leading-space rule ----------------------------------

TEST(Tokenizer, PiecesUndoTheVocabularyEncoding) {
  EXPECT_EQ(llama_spm().token_text(15043), "\xE2\x96\x81Hello");  // ▁Hello
  EXPECT_EQ(llama_spm().token_to_piece(15043), " Hello");
  EXPECT_EQ(llama3().token_text(22691), "\xC4\xA0Hello");  // ĠHello
  EXPECT_EQ(llama3().token_to_piece(22691), " Hello");
  EXPECT_EQ(llama3().token_to_piece(198), "\n");  // Ċ
}

TEST(Tokenizer, SpmDecodeDropsOnlyTheSpaceItsEncoderAdded) {
  const Tokenizer& tok = llama_spm();
  EXPECT_TRUE(tok.strips_leading_space());
  EXPECT_EQ(tok.decode(Ids{15043}), "Hello");
  EXPECT_EQ(tok.decode(Ids{15043, 15043}), "Hello Hello");
  EXPECT_EQ(tok.decode(Ids{1, 15043}), "<s>Hello");  // BOS counts as the text start
  EXPECT_EQ(tok.decode(Ids{1, 15043}, true), "Hello");
  EXPECT_EQ(tok.decode(tok.encode(" Hello", false, false)), " Hello");
  // Byte-level BPE adds no space, so it strips none.
  EXPECT_FALSE(llama3().strips_leading_space());
  EXPECT_EQ(llama3().decode(Ids{22691}), " Hello");
}

// ---- stop tokens --------------------------------------------------------------

TEST(Tokenizer, EndOfGenerationCoversEosEotAndNamedStopTokens) {
  EXPECT_EQ(llama3().eot(), 128009);
  EXPECT_TRUE(llama3().is_eog(128009));  // <|eot_id|>
  EXPECT_TRUE(llama3().is_eog(128001));  // <|end_of_text|>
  EXPECT_FALSE(llama3().is_eog(128000));
  EXPECT_FALSE(llama3().is_eog(9906));
  EXPECT_EQ(qwen3().eot(), 151645);
  EXPECT_TRUE(qwen3().is_eog(151645));  // <|im_end|>
  EXPECT_TRUE(qwen3().is_eog(151643));  // <|endoftext|>
  EXPECT_TRUE(llama_spm().is_eog(2));
  EXPECT_FALSE(llama_spm().eot().has_value());
  EXPECT_TRUE(gpt2().is_eog(50256));
}

// ---- streaming decode ---------------------------------------------------------

TEST(StreamDecoder, HoldsBackASplitCharacterUntilItCompletes) {
  StreamDecoder dec(llama_spm());
  EXPECT_EQ(dec.push(243), "");  // <0xF0>
  EXPECT_EQ(dec.push(162), "");  // <0x9F>
  EXPECT_EQ(dec.push(169), "");  // <0xA6>
  EXPECT_EQ(dec.num_pending_bytes(), 3u);
  EXPECT_EQ(dec.push(156), kLlama);  // <0x99>
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, FlushTurnsAnUnfinishedCharacterIntoReplacementChar) {
  StreamDecoder dec(llama_spm());
  EXPECT_EQ(dec.push(243), "");
  EXPECT_EQ(dec.push(162), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.num_pending_bytes(), 0u);
}

TEST(StreamDecoder, BytesThatCanNeverCompleteAreReplacedAtOnce) {
  StreamDecoder dec(llama_spm());
  EXPECT_EQ(dec.push(0x80 + 3), "\xEF\xBF\xBD");  // a lone continuation byte
  EXPECT_EQ(dec.push(243), "");                   // F0 ...
  EXPECT_EQ(dec.push(15043), "\xEF\xBF\xBD Hello");  // ... cut short by ' '
}

TEST(StreamDecoder, ConcatenatedOutputEqualsDecode) {
  const std::string text = "Streaming " + kLlama + " caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC!";
  for (const Tokenizer* tok : {&llama_spm(), &llama3(), &qwen3(), &mistral()}) {
    const Ids ids = tok->encode(text, false, false);
    StreamDecoder dec(*tok, {.render_special = false, .at_text_start = true});
    std::string streamed;
    for (TokenId id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    EXPECT_EQ(streamed, tok->decode(ids)) << tok->model_name();
    EXPECT_EQ(streamed, text) << tok->model_name();
  }
}

TEST(StreamDecoder, KeepsTheLeadingSpaceOfAContinuation) {
  // Generated text continues a prompt, so by default nothing is stripped.
  StreamDecoder dec(llama_spm());
  EXPECT_EQ(dec.push(15043), " Hello");
  StreamDecoder start(llama_spm(), {.render_special = false, .at_text_start = true});
  EXPECT_EQ(start.push(1), "");  // BOS, not rendered
  EXPECT_EQ(start.push(15043), "Hello");
}

// ---- misuse -------------------------------------------------------------------

TEST(TokenizerDeathTest, PerTokenAccessorsRejectIdsOutOfRange) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tokenizer& tok = llama_spm();
  EXPECT_DEATH(tok.token_to_piece(32000), "outside");
  EXPECT_DEATH(tok.token_text(-1), "outside");
  EXPECT_DEATH(tok.is_special(1 << 30), "outside");
  EXPECT_DEATH(
      {
        StreamDecoder dec(tok);
        dec.push(-5);
      },
      "outside");
}

TEST(Tokenizer, DecodeReportsIdsOutOfRangeAsAnError) {
  EXPECT_THROW(llama_spm().decode(Ids{15043, 32000}), Error);
  EXPECT_THROW(llama_spm().decode(Ids{-1}), Error);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const Tokenizer& tok = llama3();
  const std::string text = "The quick brown fox " + kLlama + " jumps over 1234567 lazy dogs.\n";
  const Ids want = tok.encode(text, true, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 200; ++i) all = all && tok.encode(text, true, true) == want;
      ok[t] = all;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

}  // namespace
}  // namespace pagoda
