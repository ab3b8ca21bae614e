"""The cases numpy_reference_test.py runs, and the tolerances they are held to.

Each Case names a `pagoda synth` model (architecture, weight type, shape, extra
flags), the tokens its logits are compared on, what the written GGUF must contain
for the case to test what its name says (`expect`), and its Tolerance. The
tolerances' derivations (what was simulated, what bugs each bound still catches)
are kept beside their values below. build_cases() lists every synth case; the
runner, the comparison and the checks on real models stay in
numpy_reference_test.py.
"""

import gguf_numpy

# 16 tokens: BOS first, ids spread over the 320-token synthetic vocabulary,
# including 0 and the last id (an off-by-one in the embedding/output row shows).
TOKENS = [1, 5, 9, 42, 77, 100, 3, 250, 17, 64, 128, 199, 0, 31, 319, 8]
# 96 tokens (positions 0..95) for the RoPE-scaling and decode cases: Llama-3
# frequency factors only touch the slowest-turning pairs, which at 16 positions
# move < 0.01 rad (a missing rope_freqs then shows as only 1e-3 relative);
# at 96 positions the difference is several times larger. Also exercises a
# longer KV cache in the one-token-at-a-time path.
LONG_TOKENS = [1] + [(37 * i + 11) % 320 for i in range(95)]

# ---------------------------------------------------------------------------
# Tolerances.
#
# The reference decodes weights exactly as stored, so the only legitimate
# differences come from pagoda's arithmetic: float32 instead of float64, other
# summation orders, and the activation rounding its matmul kernels do (inputs
# rounded to f16 / bf16 for half-precision weights, quantized to Q8_0 blocks of
# 32 or Q8_K blocks of 256 for quantized weights, as ggml does).
#
# The bounds were set by simulating exactly that in numpy: the reference
# forward with every matmul input rounded that way and computed in float32,
# on 20 seeds of synth's weight distribution (uniform, std 1/sqrt(fan_in),
# embeddings std 1), dim 256, ffn 768, 2 layers, the 16 TOKENS. Worst case
# over the seeds, max|diff| / max|ref|:
#     f32 9.5e-7   f16 5.1e-4   bf16 3.8e-3   Q8_0 1.3e-2   Q8_K 1.9e-2
# and 1 - correlation: f32 ~1e-12, f16 1e-7, bf16 6e-6, Q8_0 6e-5, Q8_K 1.3e-4.
# A layout bug (nibble order, scale packing, RoPE pairing, GQA mapping) gives
# errors of the order of the logits themselves and correlation far below 0.99,
# so each bound leaves ~2x (or more) margin over the legitimate error while
# staying well below a real bug. (First run against pagoda: f32/f16/bf16
# ~3e-7 -- its f16/bf16 kernels keep activations in f32 -- and quantized types
# 1.0e-2..1.8e-2, as simulated.) Bugs checked to fail: NeoX vs normal RoPE
# (0.36), missing qwen2 biases (0.19), missing qwen3 q/k norm (0.11), ignored
# linear RoPE factor (0.31), missing llama3 rope_freqs (3.8e-3 at 96 tokens),
# wrong attention scale for head_dim != dim/heads (0.18), swapped Q4_K nibble
# halves (1.4, correlation 0.39). Not detectable at these scales: RMS eps
# 1e-6 vs 1e-5 (6e-6). Gemma bugs, measured on the gemma cases' files: no
# window mask (0.47 / 0.56), gemma3 local layers on the global RoPE (0.90), no
# final soft-cap (gemma2 30: 2.2e-2, gemma3 4: 0.74), no gemma2 attention cap
# (50: 2.6e-4; the strong-softcaps case's 2: 0.42), QK-norm dropped (0.23), a
# wrong query scale (0.32), norms shifted by 1 twice (0.29), post-attention norm
# dropped (0.25).
#   f32:   1e-4 relative (100x the measured 1e-6 float32 noise; catches e.g. a
#          RoPE angle computed in float16 or a misplaced norm weight).
#   f16:   1e-3 relative (2x the f16-activation error).
#   bf16:  1e-2 relative — not 1e-3: bf16 keeps 8 mantissa bits, so rounding
#          activations to bf16 costs 3.8e-3 by itself (2.6x margin).
#   quant: 3e-2 relative (1.6x over Q8_K's 1.9e-2; Q8_0 types have 2.3x).
#          Correlation must exceed 0.999 (7x margin in 1 - corr).
# Argmax: must agree at >= 90% of positions, not counting positions where the
# reference's top two logits are within 2 * (allowed abs error) of each other:
# there either choice is within tolerance (plain argmax agreement dropped to
# 88% for Q8_K on one seed in the simulation, all from such near-ties).
# ---------------------------------------------------------------------------
#
# Mixture of experts: routing is discrete. Where the reference's logit gap
# between the last chosen and the first unchosen expert (at any layer) is below
# the router-logit error the weight type allows, pagoda may pick the other
# expert and that position's logits legitimately differ by O(0.1-1) (seen:
# mixtral q4_0, position 35 of 96, gap 0.0033, max|diff| 0.27 = 6.5e-2
# relative). Such positions are left out of the max|diff| and argmax checks,
# as near-ties are. The bounds scale with each type's error above; for the
# quantized types, on the 7 MoE cases (~500 positions, 2 layers each): the one
# flip seen had gap 0.0033, no position with a gap over 0.006 differed, and
# 0.03 skips ~8% of positions (0.1 skipped 22%). A routing bug (wrong expert
# slice, softmax without renormalisation, k off by one) moves every position
# (checked on qwen3moe-f32: no renormalisation 0.29 relative, k = 1 0.48),
# not only near-ties, so skipping these keeps the test's power.
# ---------------------------------------------------------------------------
class Tolerance:
    def __init__(self, max_rel, min_corr, min_argmax=0.9, min_route_gap=0.0):
        self.max_rel = max_rel
        self.min_corr = min_corr
        self.min_argmax = min_argmax
        self.min_route_gap = min_route_gap


TOL_F32 = Tolerance(max_rel=1e-4, min_corr=0.99999, min_route_gap=1e-4)
TOL_F16 = Tolerance(max_rel=1e-3, min_corr=0.99999, min_route_gap=3e-3)
TOL_BF16 = Tolerance(max_rel=1e-2, min_corr=0.9999, min_route_gap=1e-2)
TOL_QUANT = Tolerance(max_rel=3e-2, min_corr=0.999, min_route_gap=0.03)
TOLERANCES = {"f32": TOL_F32, "f16": TOL_F16, "bf16": TOL_BF16}


def tolerance_for(weight_type):
    return TOLERANCES.get(weight_type, TOL_QUANT)


# qwen35 with quantized weights. Each Gated DeltaNet head's output o = S^T q is
# RMS-normed (ssm_norm) before the silu(z) gate, so where o nearly cancels (|o| 100x
# below its typical size: with synth's fast decays, 0.0003..0.45 per token, the state
# is mostly the last token's k v^T and o ~ (q . k) v, q . k ~ N(0, 1/d)) the norm
# magnifies the activations' 8-bit rounding into an O(1) change of that head at that
# position. The float32 path is unaffected (pagoda vs reference 6e-7..3.4e-6 over 20
# seeds: TOL_F32 holds with 30x margin). Simulated as for TOL_QUANT above (the
# reference with Q8_0 / Q8_K-rounded matmul inputs in float32) on 20 seeds of the
# tiny shape (Q8_0) and of --dim 256 --layers 8 (Q8_0, Q4_K), 16 and 96 tokens:
# worst max|diff| / max|ref| 0.185 (Q8_0, tiny, 96 tokens; typical 0.02-0.05, the
# worst always one position), 1 - corr 1.3e-3 (Q4_K / Q8_K, 16 tokens). pagoda on
# the same 120 files: 0.198 and 1.3e-3 (same seeds worst), i.e. as simulated.
# Bounds: max_rel 0.4 (2x), correlation > 0.997 (2.3x in 1 - corr). Skipping
# ill-conditioned positions (as MoE near-ties are) was tried and rejected: dropping
# those whose |o| is below 1% of ||S||_2 on any head skips 12% of positions and still
# leaves 0.084 -- the spikes come from many heads, not a few. What this still catches,
# measured on the cases' q8_0 / q4_k files (1 - corr): value head h on key head
# h // (Hv/Hk) instead of h % Hk 0.07-0.22, reversed conv taps 0.38-0.53, no L2 norm
# of q/k 0.04-0.06, missing 1/sqrt(d) 0.04-0.06, gate norm order 0.17-0.25, q/k
# swapped 0.05, no sigmoid attention gate 0.014, query/gate rows split in halves
# instead of per head 0.007-0.011. Smaller structural bugs (normal instead of NeoX
# RoPE 5e-4..1.2e-3, no ssm_dt.bias 4e-4, no k norm 1e-4) are left to the f32 cases,
# where each is >= 200x TOL_F32 (relative 0.02-0.05). Argmax is effectively not
# checked (near-ties within 0.8 of the largest logit are excused); the qwen35 greedy
# case is f32 for that reason.
TOL_QWEN35_QUANT = Tolerance(max_rel=0.4, min_corr=0.997)

# qwen35moe with quantized weights: qwen35's trunk (its DeltaNet norm magnifies the 8-bit
# rounding, see above) feeding a router at every layer, near-tie routings skipped as for
# the other MoE cases (gap < 0.03: 10-25 of 96 positions on the tiny shape, 4 layers x
# top-3 of 8). Simulated as above (the reference with Q8_0-rounded inputs to every
# quantized matmul, float32; F32 routers, beta / alpha and shared-expert gates unrounded)
# on 20 seeds of the tiny qwen35moe as Q8_0, and pagoda on the same files: over 96 tokens
# (prefill and decode) worst max|diff| / max|ref| 0.242 simulated, 0.324 pagoda (seed 8;
# typical 0.04-0.14), 1 - corr 1.6e-3 / 2.2e-3. Over the 16 TOKENS one spiking position
# weighs 6x more: 1 - corr reached 6.3e-3 simulated and 1.0e-2 pagoda (seeds 13, 8), so
# the quantized cases use the 96 tokens. Bounds: max_rel 0.6 (1.85x pagoda's worst),
# correlation > 0.995 (2.3x in 1 - corr). The MoE FFN's own bugs, measured on the f32
# tiny file (numpy, relative / 1 - corr): no renormalisation 0.19 / 7.8e-3, k = 2 of 3
# 0.39 / 0.025, shared expert ungated 0.72 / 0.13, sigmoid(-x) gate 0.69 / 0.18, no
# shared expert 0.72 / 0.19, expert e on e-1's weights 0.82 / 0.33, the shared gate on
# the routed sum 0.73 / 0.20: each >= 1800x TOL_F32, and above this correlation bound.
TOL_QWEN35MOE_QUANT = Tolerance(max_rel=0.6, min_corr=0.995, min_route_gap=0.03)

QWEN35_ARCHS = ("qwen35", "qwen35moe")

# gemma4 with quantized weights. Every branch's output is RMS-normed before it joins
# the residual (post_attention_norm, post_ffw_norm, post_ffw_norm_1/2, the per-layer
# embedding's post_norm) and V is RMS-normed per head, so a branch whose raw output
# nearly cancels at some position has its activations' 8-bit rounding blown up to full
# size there. Simulated as above (gemma4_numpy.ACT_ROUND rounding every quantized
# matmul's input to Q8_0 blocks, float32) on 20 seeds of the tiny shape (Q8_0, 16 and
# 96 tokens, routing near-ties skipped): worst max|diff| / max|ref| 0.218 (typical
# 0.02-0.05, the worst always one or two positions, coming from different branches on
# different seeds), 1 - corr 5.3e-3; pagoda on the same 20 files 0.228 and 1.5e-3.
# (With synth's q/k norm weights at 1 instead of d^-1/4 every softmax is near one-hot
# and the same study gave 0.31 / 8.8e-3.) Bounds: max_rel 0.45 (2x), correlation >
# 0.988 (2.3x in 1 - corr). Structure is checked by the f32 cases at TOL_F32.
TOL_GEMMA4_QUANT = Tolerance(max_rel=0.45, min_corr=0.988, min_route_gap=0.03)


# Fidelity: a quantized model against the f32 model it was quantized from (synth
# draws the same weights for a seed whatever the type), i.e. how much the weight
# type itself moves the logits. The bound comes from the type's weight error: the
# relative RMS error of quantize -> dequantize on N(0,1) rows, as measured by
# tests/tensor/codecs_test.cpp (RoundTrip.RelativeRmsErrorOnGaussianDataIsWithinBound).
# Measured on 2 seeds (7, 8) of the SHAPE_K llama: relative RMS logit error = 1.7-2.1 x
# the weight error for every type (Q8_0 2.7x: there the 8-bit activations' own ~1.4e-2
# dominates), max|diff| / max|ref| = 1.5-2.3 x (Q8_0 3.0x). Bounds: max_rel = 3 x
# weight error + 0.03, correlation > 1 - (3 x weight error + 0.02)^2 / 2 (1 - corr is
# about half the squared relative RMS error); argmax not checked (Q2_K legitimately
# flips most near-ties). A broken quantizer or layout gives errors of the order of the
# logits (relative RMS ~1.4 for unrelated logits), above every bound here.
WEIGHT_REL_RMS = {"q8_0": 0.0053, "q4_0": 0.085, "q4_1": 0.077, "q5_0": 0.043, "q5_1": 0.038,
                  "q2_k": 0.269, "q3_k": 0.152, "q4_k": 0.071, "q5_k": 0.036, "q6_k": 0.0177,
                  "iq4_nl": 0.0758, "iq4_xs": 0.0764, "mxfp4": 0.111}


def fidelity_tolerance(weight_type):
    w = WEIGHT_REL_RMS[weight_type]
    return Tolerance(max_rel=3 * w + 0.03, min_corr=1 - (3 * w + 0.02) ** 2 / 2, min_argmax=0.0)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
SHAPE = ["--dim", "256", "--layers", "2", "--heads", "4", "--kv-heads", "2",
         "--ffn", "512", "--vocab", "320", "--ctx", "128"]
# K-quants have 256-value super-blocks: ffn_down's width (ffn) must be a multiple of 256.
SHAPE_K = ["--dim", "256", "--layers", "2", "--heads", "4", "--kv-heads", "2",
           "--ffn", "768", "--vocab", "320", "--ctx", "128"]
SHAPE_HEAD_DIM = ["--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "32",
                  "--ffn", "128", "--vocab", "320", "--ctx", "128"]
K_QUANTS = ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs")  # 256-value (super-)blocks
SEED = "7"


class Case:
    """A synth model compared on a token list (TOKENS unless given). `expect(gguf)`
    returns a list of problems with the written file, so a case fails if the file
    does not contain what the case's name says it tests."""

    def __init__(self, name, arch, weight_type, shape, extra=(), logits_extra=(), expect=None, tokens=TOKENS,
                 ref_ctx=None, greedy_steps=0, tol=None):
        self.name = name
        self.tol = tol if tol is not None else tolerance_for(weight_type)
        # > 0: the tokens are BOS and the reference's greedy continuation of it
        # (greedy_steps - 1 ids), and pagoda's top-1 must pick the reference's
        # next id at every one of the greedy_steps positions (near-ties excepted).
        self.greedy_steps = greedy_steps
        self.ref_ctx = ref_ctx  # context the reference assumes (LongRoPE factor choice); None: the file's
        self.tokens = tokens
        self.arch = arch
        self.weight_type = weight_type
        self.shape = shape
        self.extra = list(extra)
        self.logits_extra = list(logits_extra)
        self.expect = expect


def expect_arch_and_type(arch, weight_type):
    ggml_type = {"f32": gguf_numpy.F32, "f16": gguf_numpy.F16, "bf16": gguf_numpy.BF16,
                 "q8_0": gguf_numpy.Q8_0, "q4_0": gguf_numpy.Q4_0, "q4_1": gguf_numpy.Q4_1,
                 "q5_0": gguf_numpy.Q5_0, "q5_1": gguf_numpy.Q5_1, "q4_k": gguf_numpy.Q4_K,
                 "q5_k": gguf_numpy.Q5_K, "q6_k": gguf_numpy.Q6_K, "q2_k": gguf_numpy.Q2_K,
                 "q3_k": gguf_numpy.Q3_K, "iq4_nl": gguf_numpy.IQ4_NL, "iq4_xs": gguf_numpy.IQ4_XS,
                 "mxfp4": gguf_numpy.MXFP4}[weight_type]

    # llama.cpp's llama_ftype values (llama.h), which general.file_type holds;
    # not the tensor type ids above (Q8_0 is tensor type 8 but file type 7).
    file_type = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
                 "q2_k": 10, "q3_k": 11, "q4_k": 14, "q5_k": 16, "q6_k": 18, "iq4_nl": 25, "iq4_xs": 30,
                 "bf16": 32, "mxfp4": 38}[weight_type]

    def check(g):
        problems = []
        if g.get("general.file_type") != file_type:
            problems.append("general.file_type is %r, want %d (LLAMA_FTYPE for %s)"
                            % (g.get("general.file_type"), file_type, weight_type))
        if g.get("general.architecture") != arch:
            problems.append("architecture is %r, want %r" % (g.get("general.architecture"), arch))
        first = "blk.0.attn_qkv.weight" if arch in ("phi3", "qwen35", "qwen35moe") else "blk.0.attn_q.weight"
        down = ("blk.0.ffn_down_exps.weight" if g.get(arch + ".expert_count") and arch != "gemma4"
                else "blk.0.ffn_down.weight")
        # qwen35(moe): layers 0-2 are Gated DeltaNet (attn_qkv, ssm_out); 3 is full attention.
        attn_out = "blk.3.attn_output.weight" if arch in ("qwen35", "qwen35moe") else "blk.1.attn_output.weight"
        for name in (first, down, attn_out):
            t = g.tensors.get(name)
            if t is None:
                problems.append("no tensor " + name)
            elif t.ggml_type != ggml_type:
                problems.append("%s is %s, want %s" % (name, gguf_numpy.type_name(t.ggml_type),
                                                       gguf_numpy.type_name(ggml_type)))
        return problems
    return check


def with_checks(base, *more):
    """Combine expect functions; each extra one is (description, predicate(gguf))."""
    def check(g):
        problems = base(g)
        problems += [desc for desc, ok in more if not ok(g)]
        return problems
    return check


def build_cases():
    llama_f32 = expect_arch_and_type("llama", "f32")
    cases = [
        Case("llama-f32-gqa", "llama", "f32", SHAPE, expect=with_checks(
            llama_f32, ("has output.weight", lambda g: g.has_tensor("output.weight")))),
        Case("llama-f32-tied", "llama", "f32", SHAPE, extra=["--tied"], expect=with_checks(
            llama_f32, ("no output.weight (tied)", lambda g: not g.has_tensor("output.weight")))),
        Case("llama-f32-rope-llama3", "llama", "f32", SHAPE, extra=["--rope-scaling", "llama3"], tokens=LONG_TOKENS,
             expect=with_checks(llama_f32, ("has rope_freqs.weight", lambda g: g.has_tensor("rope_freqs.weight")))),
        Case("llama-f32-rope-linear", "llama", "f32", SHAPE, extra=["--rope-scaling", "linear"], tokens=LONG_TOKENS,
             expect=with_checks(llama_f32, ("rope.scaling.type is linear with a factor",
                                            lambda g: g.get("llama.rope.scaling.type") == "linear"
                                            and g.get("llama.rope.scaling.factor", 1.0) != 1.0))),
        Case("llama-f32-head-dim-32", "llama", "f32", SHAPE_HEAD_DIM, expect=with_checks(
            llama_f32, ("attention.key_length is 32", lambda g: g.get("llama.attention.key_length") == 32))),
        Case("qwen2-f32-bias", "qwen2", "f32", SHAPE, expect=with_checks(
            expect_arch_and_type("qwen2", "f32"),
            ("has attn_q/k/v biases", lambda g: all(g.has_tensor("blk.0.attn_%s.bias" % x) for x in "qkv")))),
        Case("qwen3-f32-qk-norm", "qwen3", "f32", SHAPE, expect=with_checks(
            expect_arch_and_type("qwen3", "f32"),
            ("has attn_q_norm/attn_k_norm", lambda g: g.has_tensor("blk.0.attn_q_norm.weight")
             and g.has_tensor("blk.0.attn_k_norm.weight")))),
    ]
    for t in ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
              "iq4_nl", "iq4_xs", "mxfp4"):
        cases.append(Case("llama-" + t, "llama", t, SHAPE_K if t in K_QUANTS else SHAPE,
                          expect=expect_arch_and_type("llama", t)))
    # Quantized weights together with the qwen-specific parts.
    cases.append(Case("qwen2-q8_0-bias", "qwen2", "q8_0", SHAPE, expect=expect_arch_and_type("qwen2", "q8_0")))
    cases.append(Case("qwen3-q4_k-qk-norm", "qwen3", "q4_k", SHAPE_K, expect=expect_arch_and_type("qwen3", "q4_k")))
    # phi3: fused QKV and gate-up; LongRoPE with the long factors (the default
    # context, 128, exceeds the original 32) and with the short ones (--ctx-size 32).
    phi3_f32 = expect_arch_and_type("phi3", "f32")
    has_longrope = ("has rope_factors_long/short and attn_factor",
                    lambda g: g.has_tensor("rope_factors_long.weight") and g.has_tensor("rope_factors_short.weight")
                    and g.get("phi3.rope.scaling.attn_factor", 1.0) > 1.0)
    cases.append(Case("phi3-f32-fused", "phi3", "f32", SHAPE, expect=with_checks(
        phi3_f32, ("fused ffn_up [dim, 2*ffn] and no ffn_gate",
                   lambda g: not g.has_tensor("blk.0.ffn_gate.weight")
                   and tuple(g.tensors["blk.0.ffn_up.weight"].dims) == (256, 1024)))))
    cases.append(Case("phi3-f32-longrope-long", "phi3", "f32", SHAPE, extra=["--rope-scaling", "longrope"],
                      tokens=LONG_TOKENS, ref_ctx=128, expect=with_checks(phi3_f32, has_longrope)))
    cases.append(Case("phi3-f32-longrope-short", "phi3", "f32", SHAPE, extra=["--rope-scaling", "longrope"],
                      logits_extra=["--ctx-size", "32"], tokens=LONG_TOKENS, ref_ctx=32,
                      expect=with_checks(phi3_f32, has_longrope)))
    cases.append(Case("phi3-q8_0-longrope-decode", "phi3", "q8_0", SHAPE, extra=["--rope-scaling", "longrope"],
                      logits_extra=["--one-by-one"], tokens=LONG_TOKENS, ref_ctx=128,
                      expect=expect_arch_and_type("phi3", "q8_0")))
    cases.append(Case("phi3-q8_0-greedy-64", "phi3", "q8_0", SHAPE, extra=["--rope-scaling", "longrope"],
                      logits_extra=["--one-by-one"], ref_ctx=128, greedy_steps=64,
                      expect=expect_arch_and_type("phi3", "q8_0")))
    # gemma2 / gemma3: (1 + w) norms as stored, sqrt(dim) embeddings, post-norms, GELU-tanh,
    # soft-caps, QK-norm (gemma3), and sliding windows shorter than the token list, so the
    # local layers' mask cuts (gemma2: layer 0 local, 1 global; gemma3 needs 6 layers for
    # one global layer). The greedy cases run 64 steps one token at a time through the
    # paged KV cache with a window of 16.
    def gemma_checks(arch, window, softcaps):
        def post_norms(g):
            return all(g.has_tensor("blk.%d.%s.weight" % (i, n)) for i in (0, 1)
                       for n in ("post_attention_norm", "post_ffw_norm", "ffn_norm"))
        checks = [("post_attention_norm, post_ffw_norm, ffn_norm in every block", post_norms),
                  ("no output.weight (tied)", lambda g: not g.has_tensor("output.weight")),
                  ("attention.sliding_window is %d" % window,
                   lambda g: g.get(arch + ".attention.sliding_window") == window)]
        if softcaps:
            checks.append(("attn/final_logit_softcapping %s" % (softcaps,),
                           lambda g: (g.get(arch + ".attn_logit_softcapping"),
                                      g.get(arch + ".final_logit_softcapping")) == softcaps))
        if arch == "gemma3":
            checks.append(("attn_q_norm / attn_k_norm", lambda g: g.has_tensor("blk.0.attn_q_norm.weight")
                           and g.has_tensor("blk.0.attn_k_norm.weight")))
        return checks
    shape6 = [x if x != "2" or i == 0 or SHAPE[i - 1] != "--layers" else "6" for i, x in enumerate(SHAPE)]
    cases.append(Case("gemma2-f32-window-8", "gemma2", "f32", SHAPE, extra=["--sliding-window", "8"],
                      expect=with_checks(expect_arch_and_type("gemma2", "f32"),
                                         *gemma_checks("gemma2", 8, (50.0, 30.0)))))
    cases.append(Case("gemma2-f32-strong-softcaps", "gemma2", "f32", SHAPE,
                      extra=["--sliding-window", "24", "--attn-softcap", "2", "--final-softcap", "3"],
                      tokens=LONG_TOKENS, expect=with_checks(expect_arch_and_type("gemma2", "f32"),
                                                             *gemma_checks("gemma2", 24, (2.0, 3.0)))))
    cases.append(Case("gemma2-q8_0-greedy-64", "gemma2", "q8_0", SHAPE, extra=["--sliding-window", "16"],
                      logits_extra=["--one-by-one"], greedy_steps=64,
                      expect=with_checks(expect_arch_and_type("gemma2", "q8_0"),
                                         *gemma_checks("gemma2", 16, (50.0, 30.0)))))
    cases.append(Case("gemma3-f32-window-8", "gemma3", "f32", shape6, extra=["--sliding-window", "8"],
                      tokens=LONG_TOKENS, expect=with_checks(expect_arch_and_type("gemma3", "f32"),
                                                             *gemma_checks("gemma3", 8, None))))
    cases.append(Case("gemma3-f32-linear-global", "gemma3", "f32", shape6,
                      extra=["--sliding-window", "24", "--rope-scaling", "linear", "--final-softcap", "4"],
                      tokens=LONG_TOKENS, expect=with_checks(
                          expect_arch_and_type("gemma3", "f32"), *gemma_checks("gemma3", 24, None),
                          ("linear scaling 8", lambda g: g.get("gemma3.rope.scaling.factor") == 8.0),
                          ("final_logit_softcapping 4", lambda g: g.get("gemma3.final_logit_softcapping") == 4.0))))
    cases.append(Case("gemma3-q8_0-greedy-64", "gemma3", "q8_0", shape6, extra=["--sliding-window", "16"],
                      logits_extra=["--one-by-one"], greedy_steps=64,
                      expect=with_checks(expect_arch_and_type("gemma3", "q8_0"),
                                         *gemma_checks("gemma3", 16, None))))
    # Mixture of experts: qwen3moe (its own expert width) and mixtral (GGUF `llama`
    # with llama.expert_count). Prefill groups tokens by expert; --one-by-one is
    # the decode path that reads only the chosen experts.
    def moe_checks(gguf_arch, n_expert, n_used, ffn_exp):
        return (("%s.expert_count %d, expert_used_count %d" % (gguf_arch, n_expert, n_used),
                 lambda g: g.get(gguf_arch + ".expert_count") == n_expert
                 and g.get(gguf_arch + ".expert_used_count") == n_used),
                ("3-D ffn_gate_exps [dim, %d, %d], ffn_down_exps [%d, dim, %d], F32 router [dim, %d]"
                 % (ffn_exp, n_expert, ffn_exp, n_expert, n_expert),
                 lambda g: tuple(g.tensors["blk.1.ffn_gate_exps.weight"].dims) == (256, ffn_exp, n_expert)
                 and tuple(g.tensors["blk.1.ffn_up_exps.weight"].dims) == (256, ffn_exp, n_expert)
                 and tuple(g.tensors["blk.1.ffn_down_exps.weight"].dims) == (ffn_exp, 256, n_expert)
                 and tuple(g.tensors["blk.1.ffn_gate_inp.weight"].dims) == (256, n_expert)
                 and g.tensors["blk.1.ffn_gate_inp.weight"].ggml_type == gguf_numpy.F32
                 and not g.has_tensor("blk.0.ffn_gate.weight")))

    qmoe = ["--experts", "8", "--experts-used", "2", "--expert-ffn", "128"]
    qmoe_k = ["--experts", "8", "--experts-used", "2", "--expert-ffn", "256"]
    qmoe_has = moe_checks("qwen3moe", 8, 2, 128)
    cases.append(Case("qwen3moe-f32", "qwen3moe", "f32", SHAPE, extra=qmoe, tokens=LONG_TOKENS, expect=with_checks(
        expect_arch_and_type("qwen3moe", "f32"), *qmoe_has,
        ("expert_feed_forward_length 128", lambda g: g.get("qwen3moe.expert_feed_forward_length") == 128))))
    cases.append(Case("qwen3moe-f32-decode", "qwen3moe", "f32", SHAPE, extra=qmoe, logits_extra=["--one-by-one"],
                      tokens=LONG_TOKENS, expect=with_checks(expect_arch_and_type("qwen3moe", "f32"), *qmoe_has)))
    cases.append(Case("qwen3moe-q8_0-greedy-64", "qwen3moe", "q8_0", SHAPE, extra=qmoe, greedy_steps=64,
                      expect=with_checks(expect_arch_and_type("qwen3moe", "q8_0"), *qmoe_has)))
    cases.append(Case("qwen3moe-q4_k-decode", "qwen3moe", "q4_k", SHAPE_K, extra=qmoe_k, logits_extra=["--one-by-one"],
                      expect=with_checks(expect_arch_and_type("qwen3moe", "q4_k"), *moe_checks("qwen3moe", 8, 2, 256))))
    mix = ["--experts", "4", "--experts-used", "2"]
    mix_has = moe_checks("llama", 4, 2, 512)
    cases.append(Case("mixtral-f32", "mixtral", "f32", SHAPE, extra=mix, tokens=LONG_TOKENS, expect=with_checks(
        expect_arch_and_type("llama", "f32"), *mix_has,
        ("no expert_feed_forward_length (llama's feed_forward_length is the expert width)",
         lambda g: g.get("llama.expert_feed_forward_length") is None))))
    cases.append(Case("mixtral-q4_0-decode", "mixtral", "q4_0", SHAPE, extra=mix, logits_extra=["--one-by-one"],
                      tokens=LONG_TOKENS, expect=with_checks(expect_arch_and_type("llama", "q4_0"), *mix_has)))
    cases.append(Case("mixtral-q8_0-greedy-64-decode", "mixtral", "q8_0", SHAPE, extra=mix,
                      logits_extra=["--one-by-one"], greedy_steps=64,
                      expect=with_checks(expect_arch_and_type("llama", "q8_0"), *mix_has)))
    # olmoe: q/k norms over the whole projection, top-k weights not renormalised.
    omoe = ["--experts", "8", "--experts-used", "2"]
    omoe_has = moe_checks("olmoe", 8, 2, 512) + (
        ("attn_q_norm [q_dim], attn_k_norm [kv_dim]",
         lambda g: tuple(g.tensors["blk.0.attn_q_norm.weight"].dims) == (256,)
         and tuple(g.tensors["blk.0.attn_k_norm.weight"].dims) == (128,)),)
    cases.append(Case("olmoe-f32", "olmoe", "f32", SHAPE, extra=omoe, tokens=LONG_TOKENS,
                      expect=with_checks(expect_arch_and_type("olmoe", "f32"), *omoe_has)))
    cases.append(Case("olmoe-q8_0-greedy-64-decode", "olmoe", "q8_0", SHAPE, extra=omoe,
                      logits_extra=["--one-by-one"], greedy_steps=64,
                      expect=with_checks(expect_arch_and_type("olmoe", "q8_0"), *omoe_has)))
    # smollm3: a llama whose every fourth layer has no RoPE (4 layers: layer 3 is NoPE).
    smol_checks = ("4 blocks, so layer 3 is a NoPE layer", lambda g: g.get("smollm3.block_count") == 4)
    shape4 = [x if x != "2" or i == 0 or SHAPE[i - 1] != "--layers" else "4" for i, x in enumerate(SHAPE)]
    cases.append(Case("smollm3-f32-nope", "smollm3", "f32", shape4, tokens=LONG_TOKENS,
                      expect=with_checks(expect_arch_and_type("smollm3", "f32"), smol_checks)))
    cases.append(Case("smollm3-q8_0-greedy-64-decode", "smollm3", "q8_0", shape4, logits_extra=["--one-by-one"],
                      greedy_steps=64, expect=with_checks(expect_arch_and_type("smollm3", "q8_0"), smol_checks)))
    # gpt-oss (synth's tiny shape: 4 layers, even ones a 16-token window, 8 heads of 32 over
    # dim 128, sinks, YaRN 32 over an original 16, 4 of 8 experts with biases): prefill over 96
    # positions, decode one by one (the sinks on the decode path), and 64 greedy steps in
    # MXFP4 (experts MXFP4, the rest Q8_0, as llama.cpp ships it).
    def gptoss_checks(weight_type):
        mx = weight_type == "mxfp4"
        t_exp = gguf_numpy.MXFP4 if mx else gguf_numpy.F32
        t_attn = gguf_numpy.Q8_0 if mx else gguf_numpy.F32
        return (("architecture gpt-oss", lambda g: g.get("general.architecture") == "gpt-oss"),
                ("attn_sinks [8] F32 in every block", lambda g: all(
                    tuple(g.tensors["blk.%d.attn_sinks.weight" % i].dims) == (8,)
                    and g.tensors["blk.%d.attn_sinks.weight" % i].ggml_type == gguf_numpy.F32 for i in range(4))),
                ("sliding_window 16 and yarn 32", lambda g: g.get("gpt-oss.attention.sliding_window") == 16
                 and g.get("gpt-oss.rope.scaling.type") == "yarn" and g.get("gpt-oss.rope.scaling.factor") == 32.0),
                ("8 experts, 4 used, biases", lambda g: g.get("gpt-oss.expert_count") == 8
                 and g.get("gpt-oss.expert_used_count") == 4 and g.has_tensor("blk.0.ffn_gate_inp.bias")
                 and tuple(g.tensors["blk.0.ffn_down_exps.bias"].dims) == (128, 8)),
                ("experts %s, attention %s" % (weight_type, "q8_0" if mx else weight_type),
                 lambda g: g.tensors["blk.1.ffn_up_exps.weight"].ggml_type == t_exp
                 and g.tensors["blk.1.attn_q.weight"].ggml_type == t_attn))
    tiny = ["--shape", "tiny"]
    cases.append(Case("gpt-oss-f32-tiny", "gpt-oss", "f32", tiny, tokens=LONG_TOKENS,
                      expect=with_checks(lambda g: [], *gptoss_checks("f32"))))
    cases.append(Case("gpt-oss-f32-decode", "gpt-oss", "f32", tiny, logits_extra=["--one-by-one"], tokens=LONG_TOKENS,
                      expect=with_checks(lambda g: [], *gptoss_checks("f32"))))
    cases.append(Case("gpt-oss-mxfp4-greedy-64-decode", "gpt-oss", "mxfp4", tiny, logits_extra=["--one-by-one"],
                      greedy_steps=64, expect=with_checks(lambda g: [], *gptoss_checks("mxfp4"))))
    # The decode path: one token per forward call, through the KV cache.
    cases.append(Case("llama-f32-decode", "llama", "f32", SHAPE, logits_extra=["--one-by-one"], expect=llama_f32,
                      tokens=LONG_TOKENS))
    cases.append(Case("llama-q4_k-decode", "llama", "q4_k", SHAPE_K, logits_extra=["--one-by-one"],
                      expect=expect_arch_and_type("llama", "q4_k"), tokens=LONG_TOKENS))
    # MXFP4 (gpt-oss's expert type) and Q3_K through the decode path too.
    cases.append(Case("qwen3-mxfp4-decode", "qwen3", "mxfp4", SHAPE, logits_extra=["--one-by-one"],
                      expect=expect_arch_and_type("qwen3", "mxfp4"), tokens=LONG_TOKENS))
    cases.append(Case("llama-q3_k-decode", "llama", "q3_k", SHAPE_K, logits_extra=["--one-by-one"],
                      expect=expect_arch_and_type("llama", "q3_k"), tokens=LONG_TOKENS))
    cases += qwen35_cases()
    cases += qwen35moe_cases()
    cases += gemma4_cases()
    return cases


def gemma4_cases():
    """Gemma 4 (gemma4_numpy): synth's tiny shape has every Gemma 4 feature: 6 layers, 2
    and 5 global (heads of 64 on 1 KV head, a quarter of the pairs turning through
    rope_freqs.weight) and the rest local (heads of 32 on 2 KV heads, window 8, their own
    RoPE base); layers 3-5 reuse K/V (3 and 4 that of local layer 1, 5 that of global
    layer 2) and have a double-width FFN; layer 2's V is its K (no attn_v); experts (4,
    2 used, fused gate/up, per-expert output scales) beside the dense FFN in layers 1
    and 4; per-layer token embeddings of 32; layer output scales; final soft-cap 30.
    Prefill, decode (one token per call), 96 tokens (windows and shared layers far past
    the window), 64 greedy steps, Q8_0; and without sharing (--kv-shared 0)."""
    tiny = ["--shape", "tiny"]

    def has(shared):
        checks = [
            ("sliding_window_pattern [1, 1, 0, 1, 1, 0], window 8",
             lambda g: list(g.get("gemma4.attention.sliding_window_pattern")) == [1, 1, 0, 1, 1, 0]
             and g.get("gemma4.attention.sliding_window") == 8),
            ("shared_kv_layers %d" % shared, lambda g: g.get("gemma4.attention.shared_kv_layers") == shared),
            ("per-layer embeddings", lambda g: g.has_tensor("per_layer_token_embd.weight")
             and g.has_tensor("blk.0.inp_gate.weight")),
            ("experts in layers 1 and 4 only", lambda g: [g.has_tensor("blk.%d.ffn_gate_inp.weight" % i)
                                                         for i in range(6)] == [0, 1, 0, 0, 1, 0]),
            ("layer 2 without attn_v", lambda g: not g.has_tensor("blk.2.attn_v.weight")),
            ("local heads of 32, global of 64", lambda g: g.get("gemma4.attention.key_length_swa") == 32
             and g.get("gemma4.attention.key_length") == 64),
        ]
        if shared:
            checks.append(("layers 3-5 without attn_k", lambda g: not any(
                g.has_tensor("blk.%d.attn_k.weight" % i) for i in (3, 4, 5))))
        return checks

    def expect(t, shared=3):
        return with_checks(expect_arch_and_type("gemma4", t), *has(shared))
    return [
        Case("gemma4-f32-tiny", "gemma4", "f32", tiny, expect=expect("f32")),
        Case("gemma4-f32-tiny-long", "gemma4", "f32", tiny, tokens=LONG_TOKENS, expect=expect("f32")),
        Case("gemma4-f32-tiny-decode", "gemma4", "f32", tiny, logits_extra=["--one-by-one"], tokens=LONG_TOKENS,
             expect=expect("f32")),
        Case("gemma4-f32-greedy-64-decode", "gemma4", "f32", tiny, logits_extra=["--one-by-one"], greedy_steps=64,
             expect=expect("f32")),
        Case("gemma4-f32-tiny-unshared", "gemma4", "f32", tiny, extra=["--kv-shared", "0"], tokens=LONG_TOKENS,
             expect=expect("f32", 0)),
        Case("gemma4-q8_0-tiny", "gemma4", "q8_0", tiny, tokens=LONG_TOKENS, expect=expect("q8_0"),
             tol=TOL_GEMMA4_QUANT),
    ]


def qwen35_checks(n_layer, attention_layers, n_nextn, k_heads, v_heads, state, tied, arch="qwen35"):
    """What a qwen35 (or qwen35moe) synth file must contain for the case to test what it says."""
    def layers_ok(g):
        if g.get(arch + ".block_count") != n_layer + n_nextn:
            return False
        for il in range(n_layer):
            attn = g.has_tensor("blk.%d.attn_q.weight" % il)
            gdn = g.has_tensor("blk.%d.ssm_conv1d.weight" % il)
            if attn == gdn or attn != (il in attention_layers):
                return False
        return True

    def mtp_ok(g):
        if n_nextn == 0:
            return g.get(arch + ".nextn_predict_layers", 0) == 0
        return (g.get(arch + ".nextn_predict_layers") == n_nextn
                and g.has_tensor("blk.%d.nextn.eh_proj.weight" % n_layer)
                and g.has_tensor("blk.%d.attn_q.weight" % n_layer))
    return (("%d trunk layers, full attention at %s, Gated DeltaNet elsewhere" % (n_layer, attention_layers),
             layers_ok),
            ("%d MTP block(s) after the trunk" % n_nextn, mtp_ok),
            ("ssm group_count %d, time_step_rank %d, state_size %d" % (k_heads, v_heads, state),
             lambda g: (g.get(arch + ".ssm.group_count"), g.get(arch + ".ssm.time_step_rank"),
                        g.get(arch + ".ssm.state_size")) == (k_heads, v_heads, state)),
            ("tied output" if tied else "output.weight", lambda g: g.has_tensor("output.weight") != tied))


def qwen35_cases():
    """Qwen 3.5 (qwen35_numpy): synth's tiny shape is 4 trunk layers (Gated DeltaNet at
    0-2, full attention at 3) plus one MTP block blk.4 that must not run, dim 128, 2
    query heads on 1 KV head of 64 with n_rot 16, DeltaNet heads of 32 with Hk = 2 key
    heads and Hv = 4 value heads (Hv / Hk = 2: the h % Hk tiling differs from
    h // 2 for heads 1 and 2), a 4-tap conv. --dim 256 --layers 8 has full attention
    at 3 and 7 (state 64, Hk 2, Hv 4, no MTP); it is also the K-quant shape (rows of
    256). The recurrence is exercised prefill (all tokens in one call), decode (one
    token per call through pagoda's recurrent states) and over 64 greedy steps."""
    tiny = ["--shape", "tiny"]
    big = ["--dim", "256", "--layers", "8"]
    tiny_has = qwen35_checks(4, (3,), 1, 2, 4, 32, tied=False)
    big_has = qwen35_checks(8, (3, 7), 0, 2, 4, 64, tied=True)
    big_untied = qwen35_checks(8, (3, 7), 0, 2, 4, 64, tied=False)

    def expect(t, checks):
        return with_checks(expect_arch_and_type("qwen35", t), *checks)
    return [
        Case("qwen35-f32-tiny", "qwen35", "f32", tiny, expect=expect("f32", tiny_has)),
        Case("qwen35-f32-tiny-long", "qwen35", "f32", tiny, tokens=LONG_TOKENS, expect=expect("f32", tiny_has)),
        Case("qwen35-f32-tiny-decode", "qwen35", "f32", tiny, logits_extra=["--one-by-one"], tokens=LONG_TOKENS,
             expect=expect("f32", tiny_has)),
        # f32, not q8_0 as the other archs' greedy cases: TOL_QWEN35_QUANT's near-tie
        # margin would excuse nearly every step.
        Case("qwen35-f32-greedy-64-decode", "qwen35", "f32", tiny, logits_extra=["--one-by-one"], greedy_steps=64,
             expect=expect("f32", tiny_has)),
        Case("qwen35-f32-d256-8l-tied", "qwen35", "f32", big, extra=["--tied"], tokens=LONG_TOKENS,
             expect=expect("f32", big_has)),
        Case("qwen35-f16-tiny", "qwen35", "f16", tiny, expect=expect("f16", tiny_has)),
        Case("qwen35-q8_0-tiny", "qwen35", "q8_0", tiny, expect=expect("q8_0", tiny_has), tol=TOL_QWEN35_QUANT),
        Case("qwen35-q4_k-d256-decode", "qwen35", "q4_k", big, logits_extra=["--one-by-one"], tokens=LONG_TOKENS,
             expect=expect("q4_k", big_untied), tol=TOL_QWEN35_QUANT),
    ]


def qwen35moe_checks(n_layer, n_nextn, n_expert, n_used, ffn_exp, ffn_shexp, dim):
    """What a qwen35moe synth file must hold besides qwen35_checks': every trunk layer's
    FFN is routed experts (F32 router) plus a shared expert with its [dim] F32 gate, the
    MTP block's too (as llama.cpp's qwen35moe MTP block), and no dense FFN width."""
    def ffn_ok(g):
        for il in range(n_layer + n_nextn):
            p = "blk.%d." % il
            dims = {n: tuple(g.tensors[p + n].dims) if g.has_tensor(p + n) else None
                    for n in ("ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                              "ffn_down_exps.weight", "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight",
                              "ffn_up_shexp.weight", "ffn_down_shexp.weight")}
            if dims != {"ffn_gate_inp.weight": (dim, n_expert), "ffn_gate_exps.weight": (dim, ffn_exp, n_expert),
                        "ffn_up_exps.weight": (dim, ffn_exp, n_expert),
                        "ffn_down_exps.weight": (ffn_exp, dim, n_expert), "ffn_gate_inp_shexp.weight": (dim,),
                        "ffn_gate_shexp.weight": (dim, ffn_shexp), "ffn_up_shexp.weight": (dim, ffn_shexp),
                        "ffn_down_shexp.weight": (ffn_shexp, dim)}:
                return False
            if g.has_tensor(p + "ffn_down.weight") or any(
                    g.tensors[p + n].ggml_type != gguf_numpy.F32
                    for n in ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")):
                return False
        return True
    return (("qwen35moe.expert_count %d, expert_used_count %d, expert / shared widths %d / %d, "
             "no feed_forward_length" % (n_expert, n_used, ffn_exp, ffn_shexp),
             lambda g: (g.get("qwen35moe.expert_count"), g.get("qwen35moe.expert_used_count"),
                        g.get("qwen35moe.expert_feed_forward_length"),
                        g.get("qwen35moe.expert_shared_feed_forward_length"),
                        g.get("qwen35moe.feed_forward_length")) == (n_expert, n_used, ffn_exp, ffn_shexp, None)),
            ("routed experts, F32 router, shared expert with a [dim] F32 gate in every block", ffn_ok))


def qwen35moe_cases():
    """Qwen 3.5 / 3.6 MoE (qwen35_numpy with its MoE FFN): synth's tiny qwen35moe is the
    tiny qwen35 trunk (above) with 8 experts of width 64, 3 used, and a shared expert of
    width 96 (routed and shared widths differ, so a stride mixup shows); --dim 256
    --layers 8 --experts 16 --experts-used 4 --shared-ffn 128 derives expert width 64
    (dim / 4) with full attention at 3 and 7. Prefill, decode and 64 greedy steps in
    f32; Q8_0 through prefill and decode (96 tokens: TOL_QWEN35MOE_QUANT)."""
    tiny = ["--shape", "tiny"]
    big = ["--dim", "256", "--layers", "8", "--experts", "16", "--experts-used", "4", "--shared-ffn", "128"]
    tiny_has = (qwen35_checks(4, (3,), 1, 2, 4, 32, tied=False, arch="qwen35moe")
                + qwen35moe_checks(4, 1, 8, 3, 64, 96, 128))
    big_has = (qwen35_checks(8, (3, 7), 0, 2, 4, 64, tied=True, arch="qwen35moe")
               + qwen35moe_checks(8, 0, 16, 4, 64, 128, 256))

    def expect(t, checks):
        return with_checks(expect_arch_and_type("qwen35moe", t), *checks)
    return [
        Case("qwen35moe-f32-tiny", "qwen35moe", "f32", tiny, expect=expect("f32", tiny_has)),
        Case("qwen35moe-f32-tiny-decode", "qwen35moe", "f32", tiny, logits_extra=["--one-by-one"],
             tokens=LONG_TOKENS, expect=expect("f32", tiny_has)),
        Case("qwen35moe-f32-greedy-64-decode", "qwen35moe", "f32", tiny, logits_extra=["--one-by-one"],
             greedy_steps=64, expect=expect("f32", tiny_has)),
        Case("qwen35moe-f32-d256-8l-tied", "qwen35moe", "f32", big, extra=["--tied"], tokens=LONG_TOKENS,
             expect=expect("f32", big_has)),
        Case("qwen35moe-q8_0-tiny", "qwen35moe", "q8_0", tiny, tokens=LONG_TOKENS, expect=expect("q8_0", tiny_has),
             tol=TOL_QWEN35MOE_QUANT),
        Case("qwen35moe-q8_0-tiny-decode", "qwen35moe", "q8_0", tiny, logits_extra=["--one-by-one"],
             tokens=LONG_TOKENS, expect=expect("q8_0", tiny_has), tol=TOL_QWEN35MOE_QUANT),
    ]
