#!/usr/bin/python3
"""Checks pagoda's forward pass against an independent numpy reference.

For each case: `pagoda synth` writes a small random-weight GGUF, `pagoda
logits` writes its float32 logits for every position of a fixed token list,
and the numpy reference (llama_numpy.py over gguf_numpy.py, which share no code
with pagoda) computes the same logits in float64 from the same file. Cases
cover llama (GQA, tied embeddings, llama3 and linear RoPE scaling, head_dim !=
dim/heads), qwen2 (q/k/v biases), qwen3 (q/k norm), phi3 (fused QKV and
gate-up, LongRoPE with long and short factors, 64 greedy steps), gemma2 and
gemma3 (sliding windows shorter than the tokens, soft-caps, post-norms, local
and global RoPE, 64 greedy steps), gemma4 (through gemma4_numpy.py: per-layer
window pattern and head sizes, shared-KV layers, per-layer embeddings, experts
beside the dense FFN, prefill, decode, 64 greedy steps, Q8_0), mixture of experts (qwen3moe, mixtral,
olmoe: router, top-k, grouped prefill and decode, 64 greedy steps), qwen35
(Qwen 3.5's hybrid of Gated DeltaNet and gated full attention, through
qwen35_numpy.py: prefill, decode, 64 greedy steps, Hv = 2 Hk value heads, an
MTP block that must not run, two full-attention layers, Q8_0 / Q4_K), qwen35moe
(that trunk with routed experts and a gated shared expert: prefill, decode, 64
greedy steps, Q8_0), every
supported weight type, the one-token-at-a-time decode path, and the real
stories260K model. The fidelity cases compare each quantized type's logits
with the reference of the f32 model it was quantized from, within a bound
derived from the type's weight error.

Before any pagoda case it checks the reference itself: the dequantizer
self-test (gguf_numpy.self_test), greedy decoding of stories260K from BOS,
which must give the 32 ids recorded in shared/models/stories260K/README.md, and
qwen35_numpy.self_test (its delta rule against a closed form, chunked against
one-pass forwards, an all-attention qwen35 against llama_numpy's qwen3 on the
same weights, qwen35moe files whose routed or shared experts are copies of a
dense FFN against that dense qwen35). Each qwen35 / qwen35moe case also checks,
on its own file, that the reference's chunked (stateful) pass equals its
one-pass forward.

Usage (Debian's interpreter, which has numpy):
    /usr/bin/python3 tests/model/numpy_reference_test.py --pagoda build/release/pagoda --workdir /tmp/npref
    [--models DIR] [--threads N] [-k SUBSTRING]
Without --pagoda only the reference self-checks run. Exit status 0 when every
case passes, 1 otherwise.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_numpy  # noqa: E402
import gptoss_numpy  # noqa: E402
import llama_numpy  # noqa: E402
import phi3_hf_numpy  # noqa: E402
import qwen35_numpy  # noqa: E402
import gemma4_numpy  # noqa: E402
from numpy_reference_cases import (  # noqa: E402
    LONG_TOKENS, QWEN35_ARCHS, SEED, SHAPE_K, TOKENS, TOL_F32, WEIGHT_REL_RMS, Tolerance, build_cases,
    fidelity_tolerance)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODELS = os.path.join(REPO_ROOT, "..", "shared", "models")

# stories260K greedy continuation of BOS (shared/models/stories260K/README.md).
STORIES_GREEDY = [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                  401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385]


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------
class Result:
    def __init__(self, name, weight_type):
        self.name = name
        self.weight_type = weight_type
        self.ok = False
        self.max_abs = None
        self.rel = None
        self.corr = None
        self.argmax = ""
        self.tol = None
        self.error = ""
        self.note = ""
        self.seconds = 0.0


def compare(result, ref, got, tol, route_gap=None):
    """Fill result's metrics; result.ok = every criterion holds. ref float64, got float32, same shape.
    route_gap: (n_tokens,) the reference's routing margins (MoE), or None."""
    result.tol = tol
    if not np.all(np.isfinite(got)):
        bad = np.argwhere(~np.isfinite(got))[0]
        result.error = "pagoda logits not finite at position %d, token %d" % (bad[0], bad[1])
        return
    diff = np.abs(got.astype(np.float64) - ref)
    routed = np.ones(ref.shape[0], dtype=bool) if route_gap is None else route_gap >= tol.min_route_gap
    if route_gap is not None and not routed.all():
        result.note = "%d near-tie routings skipped" % int((~routed).sum())
    diff = diff * routed[:, None]
    scale = np.abs(ref).max()
    result.max_abs = float(diff.max())
    result.rel = result.max_abs / scale if scale > 0 else float("inf")
    result.corr = float(np.corrcoef(ref.ravel(), got.ravel().astype(np.float64))[0, 1])

    # Argmax agreement, not counting near-ties (see the tolerance notes).
    allowed_abs = tol.max_rel * scale
    ref_top2 = np.sort(ref, axis=1)[:, -2:]
    clear = ((ref_top2[:, 1] - ref_top2[:, 0]) > 2 * allowed_abs) & routed
    same = ref.argmax(axis=1) == got.argmax(axis=1)
    n_clear = int(clear.sum())
    n_agree = int((same & clear).sum())
    result.argmax = "%d/%d" % (int(same.sum()), len(same))
    argmax_ok = n_clear == 0 or n_agree >= tol.min_argmax * n_clear

    problems = []
    if not result.rel <= tol.max_rel:
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        problems.append("max|diff| %.3g at position %d token %d (ref %.6g, pagoda %.6g) > %.0e * max|ref| %.4g"
                        % (result.max_abs, worst[0], worst[1], ref[worst], got[worst], tol.max_rel, scale))
    if not result.corr > tol.min_corr:
        problems.append("correlation %.6f <= %s" % (result.corr, tol.min_corr))
    if not argmax_ok:
        problems.append("argmax agrees at %d of %d clear positions (< %d%%)" % (n_agree, n_clear, 100 * tol.min_argmax))
    result.error = "; ".join(problems)
    result.ok = not problems


def run(cmd, timeout=300):
    """Runs cmd; returns None on success, else a one-line reason (last stderr line)."""
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except FileNotFoundError:
        return "cannot execute %s" % cmd[0]
    except subprocess.TimeoutExpired:
        return "timed out after %ds: %s" % (timeout, " ".join(cmd))
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.decode("utf-8", "replace").splitlines() if l.strip()]
        last = lines[-1].strip() if lines else "(no stderr)"
        return "`%s %s` exited %d: %s" % (os.path.basename(cmd[0]), cmd[1], proc.returncode, last)
    return None


def read_logits(path, n_tokens, n_vocab):
    got = np.fromfile(path, dtype="<f4")
    if got.size != n_tokens * n_vocab:
        raise ValueError("%s holds %d floats, want %d tokens x %d vocab = %d"
                         % (path, got.size, n_tokens, n_vocab, n_tokens * n_vocab))
    return got.reshape(n_tokens, n_vocab)


def pagoda_logits(args, model_path, tokens, out_path, extra=()):
    # f32 KV: this test checks the forward pass itself; KV quantization (f16 by
    # default) has its own tests in tests/kv and tests/model/paged_kv_model_test.cpp.
    cmd = [args.pagoda, "logits", "-m", model_path, "--tokens", ",".join(map(str, tokens)), "--out", out_path,
           "--kv-type-k", "f32", "--kv-type-v", "f32"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return run(cmd + list(extra))


def reference_model(g, n_ctx):
    """The numpy reference for the file's architecture."""
    if g.get("general.architecture") == "gpt-oss":
        return gptoss_numpy.GptOssModel(g)
    if g.get("general.architecture") in QWEN35_ARCHS:
        return qwen35_numpy.Qwen35Model(g)
    if g.get("general.architecture") == "gemma4":
        return gemma4_numpy.Gemma4Model(g)
    return llama_numpy.LlamaModel(g, n_ctx=n_ctx)


def run_case(args, case):
    result = Result(case.name, case.weight_type)
    model_path = os.path.join(args.workdir, case.name + ".gguf")
    logits_path = os.path.join(args.workdir, case.name + ".f32")
    for p in (model_path, logits_path):
        if os.path.exists(p):
            os.unlink(p)
    err = run([args.pagoda, "synth", "--arch", case.arch, "--type", case.weight_type, "--seed", SEED]
              + case.shape + case.extra + ["-o", model_path])
    if err:
        result.error = err
        return result
    try:
        g = gguf_numpy.GgufFile(model_path)
        problems = case.expect(g) if case.expect else []
        if problems:
            result.error = "synth file does not fit the case: " + "; ".join(problems)
            return result
        model = reference_model(g, case.ref_ctx)
        greedy_ids = None
        if case.greedy_steps:
            greedy_ids = model.greedy([1], case.greedy_steps)
            case.tokens = [1] + greedy_ids[:-1]
        ref = model.forward(case.tokens)
        route_gap = model.route_gap  # of this forward (the self-test below runs others)
        if case.arch in QWEN35_ARCHS:
            problems = qwen35_numpy.self_test_model(model, case.tokens)
            if problems:
                result.error = "reference self-test on this file: " + "; ".join(problems)
                return result
    except (gguf_numpy.GgufError, ValueError) as e:
        result.error = "reference: %s" % e
        return result
    err = pagoda_logits(args, model_path, case.tokens, logits_path, case.logits_extra)
    if err:
        result.error = err
        return result
    try:
        got = read_logits(logits_path, len(case.tokens), model.n_vocab)
    except ValueError as e:
        result.error = str(e)
        return result
    tol = case.tol
    compare(result, ref, got, tol, route_gap)
    if greedy_ids is not None:
        # Greedy agreement: pagoda's top-1 at position t is the reference's id t+1,
        # except where the reference's top two are within 2x the allowed error
        # (or its routing is a near-tie).
        allowed_abs = tol.max_rel * np.abs(ref).max()
        top2 = np.sort(ref, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * allowed_abs
        if route_gap is not None:
            clear &= route_gap >= tol.min_route_gap
        picks = got.argmax(axis=1)
        bad = [t for t in range(len(greedy_ids)) if clear[t] and picks[t] != greedy_ids[t]]
        result.argmax = "%d/%d" % (len(greedy_ids) - len(bad), len(greedy_ids))
        if bad:
            t = bad[0]
            result.ok = False
            result.error = ((result.error + "; ") if result.error else "") + (
                "greedy step %d: pagoda picks %d, reference %d" % (t, picks[t], greedy_ids[t]))
    return result


class F32Reference:
    """The numpy logits of the f32 SHAPE_K llama synth (seed SEED), computed once."""

    def __init__(self, args):
        self.args = args
        self.logits = None
        self.error = ""

    def get(self):
        if self.logits is None and not self.error:
            path = os.path.join(self.args.workdir, "fidelity-f32.gguf")
            if os.path.exists(path):
                os.unlink(path)
            self.error = run([self.args.pagoda, "synth", "--arch", "llama", "--type", "f32", "--seed", SEED]
                             + SHAPE_K + ["-o", path]) or ""
            if not self.error:
                self.logits = llama_numpy.LlamaModel(gguf_numpy.GgufFile(path)).forward(TOKENS)
        return self.logits


def check_fidelity(args, f32_ref, weight_type):
    """pagoda on the weight_type synth vs the numpy reference of the f32 synth."""
    result = Result("fidelity-" + weight_type + "-vs-f32", weight_type)
    ref = f32_ref.get()
    if ref is None:
        result.error = "f32 reference: " + f32_ref.error
        return result
    model_path = os.path.join(args.workdir, result.name + ".gguf")
    logits_path = os.path.join(args.workdir, result.name + ".f32")
    for p in (model_path, logits_path):
        if os.path.exists(p):
            os.unlink(p)
    err = run([args.pagoda, "synth", "--arch", "llama", "--type", weight_type, "--seed", SEED] + SHAPE_K
              + ["-o", model_path]) or pagoda_logits(args, model_path, TOKENS, logits_path)
    if err:
        result.error = err
        return result
    try:
        got = read_logits(logits_path, len(TOKENS), ref.shape[1])
    except ValueError as e:
        result.error = str(e)
        return result
    compare(result, ref, got, fidelity_tolerance(weight_type))
    return result


# ---------------------------------------------------------------------------
# Reference self-checks and the real-model case
# ---------------------------------------------------------------------------
def stories_path(args):
    return os.path.join(args.models, "stories260K", "stories260K.gguf")


def check_reference_dequant():
    result = Result("reference: dequant self-test", "-")
    try:
        gguf_numpy.self_test(verbose=False)
        result.ok = True
    except AssertionError as e:
        result.error = str(e)
    return result


def check_reference_qwen35(args):
    """qwen35_numpy against itself and llama_numpy, on files it writes (no pagoda)."""
    result = Result("reference: qwen35 self-test", "f32")
    try:
        problems = qwen35_numpy.self_test(args.workdir)
    except (gguf_numpy.GgufError, ValueError, AssertionError) as e:
        problems = ["raised %s: %s" % (type(e).__name__, e)]
    result.ok = not problems
    result.error = "; ".join(problems)
    return result


def check_qwen35_attention_only(args):
    """pagoda on qwen35_numpy's all-attention qwen35 (full_attention_interval 1: no Gated
    DeltaNet layer, which llama.cpp reads; pagoda once asked the store for zero recurrent
    state slots and aborted) against the reference, 16 tokens of its 50-token vocabulary."""
    result = Result("qwen35-f32-attention-only", "f32")
    path = os.path.join(args.workdir, "qwen35-attention-only.gguf")
    out = os.path.join(args.workdir, "qwen35-attention-only.f32")
    tokens = [1, 7, 49, 0, 23, 23, 5, 31, 44, 2, 17, 38, 9, 12, 30, 3]
    qwen35_numpy.write_attention_only_pair(path, os.path.join(args.workdir, "qwen35-attention-only-as-qwen3.gguf"))
    ref = qwen35_numpy.Qwen35Model(gguf_numpy.GgufFile(path)).forward(tokens)
    err = pagoda_logits(args, path, tokens, out)
    if err:
        result.error = err
        return result
    compare(result, ref, read_logits(out, len(tokens), ref.shape[1]), TOL_F32)
    return result


def check_reference_stories(args):
    """The reference must reproduce stories260K's known greedy continuation of BOS."""
    result = Result("reference: stories260K greedy", "f32")
    path = stories_path(args)
    if not os.path.exists(path):
        result.error = "missing %s (pass --models)" % path
        return result
    model = llama_numpy.LlamaModel(gguf_numpy.GgufFile(path))
    ids = model.greedy([1], len(STORIES_GREEDY))
    n_same = 0
    while n_same < len(ids) and ids[n_same] == STORIES_GREEDY[n_same]:
        n_same += 1
    result.argmax = "%d/%d" % (n_same, len(STORIES_GREEDY))
    if n_same == len(STORIES_GREEDY):
        result.ok = True
    else:
        result.error = "greedy ids differ from README at step %d: got %d, want %d" % (
            n_same, ids[n_same], STORIES_GREEDY[n_same])
    return result


def check_pagoda_stories(args):
    """pagoda vs reference on the real stories260K model (F32, tied in training,
    separate output.weight in the GGUF), over BOS + its greedy continuation."""
    result = Result("stories260K-f32-real", "f32")
    path = stories_path(args)
    if not os.path.exists(path):
        result.error = "missing %s (pass --models)" % path
        return result
    tokens = [1] + STORIES_GREEDY[:15]
    model = llama_numpy.LlamaModel(gguf_numpy.GgufFile(path))
    ref = model.forward(tokens)
    out = os.path.join(args.workdir, "stories260K.f32")
    if os.path.exists(out):
        os.unlink(out)
    err = pagoda_logits(args, path, tokens, out)
    if err:
        result.error = err
        return result
    try:
        got = read_logits(out, len(tokens), model.n_vocab)
    except ValueError as e:
        result.error = str(e)
        return result
    compare(result, ref, got, TOL_F32)
    return result


def check_phi3_hf_dir(args):
    """A Phi-3 Hugging Face directory (Phi-4-mini-like: partial rotary 0.75, tied,
    LongRoPE), against phi3_hf_numpy's transformers-convention reference: pagoda on
    the directory with the long factors (default context 128 > original 32) and
    the short ones (--ctx-size 32); `pagoda convert` of it gives bit-identical
    logits; and llama_numpy on the converted GGUF agrees with the HF reference
    (two independent references, no pagoda arithmetic: checks the conversion)."""
    results = []
    d = os.path.join(args.workdir, "phi3-hf")
    phi3_hf_numpy.write_phi3_dir(d)
    ref = phi3_hf_numpy.Phi3Reference(d)
    tokens = LONG_TOKENS
    ref_long = ref.forward(tokens, use_long=True)
    ref_short = ref.forward(tokens, use_long=False)
    got = {}
    for name, extra, want in (("phi3-hf-dir-long", [], ref_long),
                              ("phi3-hf-dir-short", ["--ctx-size", "32"], ref_short)):
        r = Result(name, "f32")
        out = os.path.join(args.workdir, name + ".f32")
        err = pagoda_logits(args, d, tokens, out, extra)
        if err:
            r.error = err
        else:
            got[name] = read_logits(out, len(tokens), ref.n_vocab)
            compare(r, want, got[name], TOL_F32)
        results.append(r)

    r = Result("phi3-hf-convert-identical", "f32")
    gguf_path = os.path.join(args.workdir, "phi3-hf.gguf")
    out = os.path.join(args.workdir, "phi3-hf-gguf.f32")
    err = run([args.pagoda, "convert", d, "-o", gguf_path]) or pagoda_logits(args, gguf_path, tokens, out)
    if err:
        r.error = err
    elif "phi3-hf-dir-long" in got:
        g = read_logits(out, len(tokens), ref.n_vocab)
        n_diff = int(np.sum(g != got["phi3-hf-dir-long"]))
        r.max_abs = float(np.abs(g - got["phi3-hf-dir-long"]).max())
        r.ok = n_diff == 0
        r.error = "" if r.ok else "%d logits differ between the directory and its GGUF" % n_diff
    results.append(r)

    r = Result("phi3-hf-gguf-vs-hf-reference", "f32")
    try:
        model = llama_numpy.LlamaModel(gguf_numpy.GgufFile(gguf_path), n_ctx=128)
        # 1e-6: both float64, but GGUF keeps the attention factor and the LongRoPE
        # factors as float32 (rounding ~6e-8 relative; measured 8e-8 on the logits).
        compare(r, ref_long, model.forward(tokens), Tolerance(max_rel=1e-6, min_corr=0.999999999))
    except (gguf_numpy.GgufError, ValueError, OSError) as e:
        r.error = "reference on converted GGUF: %s" % e
    results.append(r)
    return results


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
def fmt(x, spec):
    return "-" if x is None else spec % x


def print_table(results):
    header = "%-30s %-5s %10s %9s %7s %12s %7s  %s" % (
        "case", "type", "max|diff|", "relative", "tol", "correlation", "argmax", "result")
    print(header)
    print("-" * len(header))
    for r in results:
        print("%-30s %-5s %10s %9s %7s %12s %7s  %s" % (
            r.name, r.weight_type, fmt(r.max_abs, "%.3g"), fmt(r.rel, "%.2e"),
            fmt(r.tol.max_rel if r.tol else None, "%.0e"), fmt(r.corr, "%.8f"), r.argmax or "-",
            "PASS" if r.ok else "FAIL"))
    failed = [r for r in results if not r.ok]
    for r in results:
        if r.note:
            print("note %s: %s" % (r.name, r.note))
    if failed:
        print()
        for r in failed:
            print("FAIL %s: %s" % (r.name, r.error))
    print()
    print("%d passed, %d failed" % (len(results) - len(failed), len(failed)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pagoda", help="path to the pagoda binary (omit to run only the reference self-checks)")
    parser.add_argument("--workdir", default="numpy_ref_work", help="where GGUF and logits files are written")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="shared models directory (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="passed to `pagoda logits --threads`")
    parser.add_argument("-k", dest="filter", default="", help="run only cases whose name contains this")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    results = [check_reference_dequant(), check_reference_stories(args), check_reference_qwen35(args)]
    if args.pagoda:
        if not os.path.isfile(args.pagoda) or not os.access(args.pagoda, os.X_OK):
            print("warning: pagoda binary not found or not executable: %s" % args.pagoda)
        jobs = [lambda: check_pagoda_stories(args)] if args.filter in "stories260K-f32-real" else []
        if args.filter in "qwen35-f32-attention-only":
            jobs.append(lambda: check_qwen35_attention_only(args))
        jobs += [(lambda c=c: run_case(args, c)) for c in build_cases() if args.filter in c.name]
        f32_ref = F32Reference(args)
        jobs += [(lambda t=t: check_fidelity(args, f32_ref, t)) for t in WEIGHT_REL_RMS
                 if args.filter in "fidelity-" + t + "-vs-f32"]
        for job in jobs:
            start = time.time()
            r = job()
            r.seconds = time.time() - start
            results.append(r)
        if args.filter in "phi3-hf-dir":
            results += check_phi3_hf_dir(args)
    else:
        print("(no --pagoda given: reference self-checks only)")
    print_table(results)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
