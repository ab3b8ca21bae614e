#!/usr/bin/python3
"""Checks `pagoda serve --embeddings` (/v1/embeddings, /v1/rerank) against an
independent numpy reference.

The reference is tests/model/llama_numpy.py (over gguf_numpy.py; neither shares code
with pagoda): its hidden_states() gives the final hidden states after the output norm
in float64, from which this script pools (mean, first token, last token), normalises
(L2, after Matryoshka truncation) and scores (the reranker head cls.output.weight,
softmax over its (yes, no) rows) by hand. pagoda runs with f32 weights and an f32 KV
cache, so the only differences are float32 rounding and summation order.

Cases, on `pagoda synth` qwen3 models with {arch}.pooling_type metadata (last; a
reranker with pooling rank and a head) and the real stories260K (llama, no pooling
metadata: the default, last):
  - every pooling (the metadata's, and --pooling mean / cls overriding it) against the
    reference, for inputs of 1..150 tokens; --max-batch-tokens 64 makes the longest
    ones prefill in several chunks (the mean accumulates across them);
  - a batch of inputs against each input sent alone (and sent again, when the prefix
    cache hands the last-token pooling its cached prompt): within BATCH_TOL (below);
    the same batch sent again gives the same bytes (mean, cls: no prefix cache);
  - encoding_format base64 decodes to exactly the float answer;
  - dimensions: the first k components renormalised, against the reference;
  - usage.prompt_tokens; text input equals its /tokenize ids;
  - /v1/rerank: relevance_score = softmax(cls_out @ h_last)[0] = P(yes), results sorted
    by score, top_n, return_documents, usage; and on a model without a head (--pooling
    rank, GPT-2's vocabulary) sigmoid(logit_yes - logit_no) at the last token;
  - the error matrix of both routes (status, OpenAI error shape, param), and the
    server still answers afterwards.

Usage (Debian's interpreter, which has numpy):
    /usr/bin/python3 tests/server/embeddings_reference_test.py --pagoda build/release/pagoda --workdir /tmp/embref
    [--models DIR]
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import base64
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import gguf_numpy  # noqa: E402
import llama_numpy  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_MODELS = os.path.join(REPO_ROOT, "..", "shared", "models")

# Tolerance on each component of a unit vector (components ~0.1): float32 arithmetic
# against float64 gives ~1e-6 (measured: see the printed max|diff| per case); a wrong
# pooling row, a missing norm or an off-by-one position moves components by O(0.1).
TOL = 1e-4

# Batch against one by one: not bit-identical. The forward is deterministic for a given
# batch (the same batch sent again gives the same bytes, checked), but the attention
# kernels pick their path from the batch's make-up (prefill tiles over several query
# tokens of a sequence, or one token over a cached prefix; split long contexts), which
# changes the float summation order. Measured: at most 8.2e-8 per component (about one
# float32 ulp at these magnitudes) over every case below; 1e-6 leaves 12x margin and is
# still 100x below TOL.
BATCH_TOL = 1e-6

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what)
    return cond


class Server:
    """A `pagoda serve` on a free port; stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, pagoda, model, extra, log_path):
        args = [pagoda, "serve", "-m", model, "--port", "0", "-t", "1", "--kv-cache-bytes", "32MiB",
                "--kv-type-k", "f32", "--kv-type-v", "f32", "--shutdown-timeout", "1",
                "--strict-model-names"] + extra
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.PIPE, text=True)
        self.url = None
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.write(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            self.stop()
            raise RuntimeError("pagoda serve did not start: " + " ".join(args))
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("pagoda serve not healthy: " + " ".join(args))

    def request(self, method, path, body=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rest = self.proc.stderr.read() if self.proc.stderr else ""
        self.log.write(rest)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def reference(model, tokens, pooling, dims=None):
    h = model.hidden_states(tokens)
    pooled = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[pooling]
    if dims is not None:
        pooled = pooled[:dims]
    return pooled / np.linalg.norm(pooled)


def embeddings(server, inputs, **extra):
    status, body = server.post("/v1/embeddings", dict({"input": inputs}, **extra))
    if not check(status == 200, "embeddings answered %d: %s" % (status, body)):
        return None, body
    vecs = [np.array(d["embedding"], dtype=np.float32) for d in body["data"]]
    return vecs, body


def token_inputs(n_vocab):
    # Lengths 1..150: a one-token input (every pooling is its only row) and inputs longer
    # than --max-batch-tokens 64 (prefilled in 2-3 chunks). BOS first like a real prompt.
    rng = np.random.default_rng(7)
    out = []
    for n in (1, 2, 5, 17, 33, 64, 65, 150):
        out.append([1] + [int(x) for x in rng.integers(3, n_vocab, size=n - 1)])
    return out


def check_error(server, path, body, status, param, what):
    got, answer = server.post(path, body)
    err = answer.get("error") if isinstance(answer, dict) else None
    ok = got == status and isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"] and \
        err.get("code") == status and "type" in err
    if param is not None and ok:
        ok = err.get("param") == param
    shown = body.decode() if isinstance(body, bytes) else json.dumps(body)[:80]
    check(ok, "%s: %s %s -> want %d param %s, got %d %s" % (what, path, shown, status, param,
                                                          got, json.dumps(answer)[:200]))


def pooling_cases(pagoda, workdir, model_path, np_model):
    inputs = token_inputs(np_model.n_vocab)
    for pooling, extra in (("last", []), ("mean", ["--pooling", "mean"]), ("cls", ["--pooling", "cls"])):
        log = os.path.join(workdir, "serve-%s.log" % pooling)
        with Server(pagoda, model_path, ["--embeddings", "--max-batch-tokens", "64"] + extra, log) as s:
            batch, body = embeddings(s, inputs)
            if batch is None:
                continue
            check(body["object"] == "list" and body["model"] == os.path.basename(model_path), "list / model")
            check([d["index"] for d in body["data"]] == list(range(len(inputs))), "indices in order")
            check(body["usage"]["prompt_tokens"] == sum(len(t) for t in inputs) and
                  body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"], "usage %s" % body["usage"])
            worst = 0.0
            for toks, got in zip(inputs, batch):
                ref = reference(np_model, toks, pooling)
                diff = float(np.max(np.abs(got - ref)))
                worst = max(worst, diff)
                check(diff <= TOL, "%s pooling, %d tokens: max|diff| %.3g > %g" % (pooling, len(toks), diff, TOL))
                check(abs(float(np.linalg.norm(got.astype(np.float64))) - 1.0) < 1e-5, "unit norm")
            print("%-5s pooling: %d inputs, max|diff| vs numpy %.2e" % (pooling, len(inputs), worst))
            if pooling != "last":  # last-token pooling borrows the now cached prompts: BATCH_TOL
                again, _ = embeddings(s, inputs)
                check(again is not None and all(np.array_equal(a, b) for a, b in zip(again, batch)),
                      "%s pooling: the same batch twice gives the same bytes" % pooling)
            # One by one (twice: the second time last-token pooling borrows the cached prompt).
            worst = 0.0
            for rnd in range(2):
                for i, toks in enumerate(inputs):
                    alone, _ = embeddings(s, toks)
                    if alone is not None:
                        diff = float(np.max(np.abs(alone[0] - batch[i])))
                        worst = max(worst, diff)
                        check(diff <= BATCH_TOL, "%s pooling: input %d alone (round %d) differs from the batch "
                              "by %.3g" % (pooling, i, rnd, diff))
            print("%-5s pooling: one by one vs batch max|diff| %.2e" % (pooling, worst))
            # base64: the same float32 values as the float answer to the same batch (sent
            # after it, so both find the same prefix cache state).
            floats, _ = embeddings(s, inputs[:3])
            _, raw = s.post("/v1/embeddings", {"input": inputs[:3], "encoding_format": "base64"})
            for i in range(3):
                blob = base64.b64decode(raw["data"][i]["embedding"])
                vals = np.array(struct.unpack("<%df" % (len(blob) // 4), blob), dtype=np.float32)
                check(floats is not None and np.array_equal(vals, floats[i]),
                      "base64 input %d decodes to the float answer" % i)
            # dimensions: Matryoshka truncation, renormalised.
            for dims in (1, 8, np_model.cfg.n_embd):
                got, _ = embeddings(s, inputs[3:5], dimensions=dims)
                if got is None:
                    continue
                for toks, g in zip(inputs[3:5], got):
                    check(g.shape == (dims,), "dimensions %d: got %d" % (dims, g.shape[0]))
                    ref = reference(np_model, toks, pooling, dims)
                    check(float(np.max(np.abs(g - ref))) <= TOL, "dimensions %d vs reference" % dims)


def rerank_cases(pagoda, workdir, rank_path, np_model, gguf):
    cls = gguf.tensor("cls.output.weight").astype(np.float64)  # (2, n_embd): yes, no
    template = gguf.get("tokenizer.chat_template.rerank")
    with Server(pagoda, rank_path, ["--embeddings"], os.path.join(workdir, "serve-rank.log")) as s:
        query = "the cat sat"
        docs = ["on the mat", "a dog barked", "in the garden of the old house", "cat"]
        status, body = s.post("/v1/rerank", {"query": query, "documents": docs})
        if not check(status == 200, "rerank answered %d: %s" % (status, body)):
            return
        results = body["results"]
        check(sorted(r["index"] for r in results) == list(range(len(docs))), "every document ranked")
        scores = [r["relevance_score"] for r in results]
        check(scores == sorted(scores, reverse=True), "results sorted by score")
        total = 0
        worst = 0.0
        for r in results:
            text = template.replace("{query}", query).replace("{document}", docs[r["index"]])
            st, tk = s.post("/tokenize", {"content": text, "add_special": True})
            toks = tk["tokens"]
            total += len(toks)
            logits = cls @ np_model.hidden_states(toks)[-1]
            p_yes = 1.0 / (1.0 + np.exp(logits[1] - logits[0]))
            worst = max(worst, abs(r["relevance_score"] - p_yes))
            check(abs(r["relevance_score"] - p_yes) <= TOL, "rerank doc %d: %.7f vs P(yes) %.7f" %
                  (r["index"], r["relevance_score"], p_yes))
        print("rerank: %d documents, max|score diff| vs numpy %.2e" % (len(docs), worst))
        check(body["usage"]["prompt_tokens"] == total, "rerank usage %s != %d" % (body["usage"], total))
        status, top = s.post("/v1/rerank", {"query": query, "documents": [{"text": d} for d in docs], "top_n": 2,
                                            "return_documents": True})
        check(status == 200 and [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]],
              "top_n 2 keeps the two best")
        check(status == 200 and all(r["document"]["text"] == docs[r["index"]] for r in top["results"]),
              "return_documents")
        # The reranker is not an embedding model.
        check_error(s, "/v1/embeddings", {"input": "hi"}, 400, None, "embeddings on a reranker")
        check_error(s, "/v1/rerank", {"query": "", "documents": ["a"]}, 400, "query", "empty query")
        check_error(s, "/v1/rerank", {"query": "q"}, 400, "documents", "no documents")
        check_error(s, "/v1/rerank", {"query": "q", "documents": []}, 400, "documents", "empty documents")
        check_error(s, "/v1/rerank", {"query": "q", "documents": [3]}, 400, "documents", "document not a string")
        check_error(s, "/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, 400, "top_n", "top_n 0")
        check_error(s, "/v1/rerank", {"query": "q", "documents": ["a"], "model": "nope"}, 404, "model",
                    "unknown model")
        # Again, after the errors: the shared template prefix now comes from the prefix
        # cache (BATCH_TOL: another attention path).
        status, again = s.post("/v1/rerank", {"query": query, "documents": docs})
        same = status == 200 and sorted(r["index"] for r in again["results"]) == list(range(len(docs)))
        if same:
            by_index = {r["index"]: r["relevance_score"] for r in again["results"]}
            same = all(abs(by_index[r["index"]] - r["relevance_score"]) <= BATCH_TOL for r in results)
        check(same, "rerank answers the same after the errors")


def rerank_by_logits_case(pagoda, workdir, models):
    # A reranker without cls.output.weight (a Qwen3-Reranker Hugging Face directory):
    # --pooling rank scores with the "yes" / "no" logits at the last token. A synth qwen3
    # with GPT-2's vocabulary, where both are single tokens; the prompt is Qwen3-Reranker's
    # format, which the server fills in when the model has no rerank template.
    vocab = os.path.join(models, "ggml-vocab", "ggml-vocab-gpt-2.gguf")
    if not os.path.exists(vocab):
        print("skip rerank by logits: %s not found" % vocab)
        return
    path = os.path.join(workdir, "qwen3-gpt2.gguf")
    subprocess.run([pagoda, "synth", "--arch", "qwen3", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads",
                    "2", "--ffn", "128", "--vocab", "50257", "--type", "f32", "--vocab-from", vocab, "-o", path],
                   check=True, stderr=subprocess.DEVNULL)
    model = llama_numpy.LlamaModel(gguf_numpy.GgufFile(path))
    with Server(pagoda, path, ["--embeddings", "--pooling", "rank"], os.path.join(workdir, "serve-ranklogits.log")) as s:
        yes = s.post("/tokenize", {"content": "yes", "add_special": False})[1]["tokens"]
        no = s.post("/tokenize", {"content": "no", "add_special": False})[1]["tokens"]
        check(len(yes) == 1 and len(no) == 1, "yes / no single tokens in GPT-2's vocabulary")
        query, docs = "what is a cat", ["a cat is an animal", "the sky is blue", "cats"]
        status, body = s.post("/v1/rerank", {"query": query, "documents": docs})
        if not check(status == 200, "rerank by logits answered %d: %s" % (status, body)):
            return
        worst = 0.0
        for r in body["results"]:
            text = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
                    "the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer "
                    "the query\n<Query>: %s\n<Document>: %s<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                    "</think>\n\n") % (query, docs[r["index"]])
            toks = s.post("/tokenize", {"content": text, "add_special": True})[1]["tokens"]
            h = model.hidden_states(toks)[-1]
            l_yes, l_no = model.output[yes[0]] @ h, model.output[no[0]] @ h
            p_yes = 1.0 / (1.0 + np.exp(l_no - l_yes))
            worst = max(worst, abs(r["relevance_score"] - p_yes))
        check(worst <= TOL, "rerank by yes/no logits: max|diff| %.3g" % worst)
        print("rerank by yes/no logits (no head): max|score diff| vs numpy %.2e" % worst)


def error_cases(pagoda, workdir, model_path, n_vocab):
    # pooling rank on a model with neither a head nor single-token "yes" / "no": start-up error.
    r = subprocess.run([pagoda, "serve", "-m", model_path, "--port", "0", "--embeddings", "--pooling", "rank"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 1 and "cls.output.weight" in r.stderr and r.stderr.count("\n") <= 2,
          "serve --pooling rank without a head fails at start-up: %d %s" % (r.returncode, r.stderr[-300:]))
    # Without --embeddings neither route is served.
    with Server(pagoda, model_path, [], os.path.join(workdir, "serve-off.log")) as s:
        check_error(s, "/v1/embeddings", {"input": "hi"}, 404, None, "embeddings not enabled")
        check_error(s, "/v1/rerank", {"query": "q", "documents": ["a"]}, 404, None, "rerank not enabled")
        check_error(s, "/v1/embeddings", b"{not json", 404, None, "embeddings not enabled, whatever the body")
        status, _ = s.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2})
        check(status == 200, "generation still served without --embeddings")
    with Server(pagoda, model_path, ["--embeddings", "--ctx-size", "64", "--pooling", "none"],
                os.path.join(workdir, "serve-none.log")) as s:
        check_error(s, "/v1/embeddings", {"input": [1, 2]}, 400, None, "pooling none on /v1/embeddings")
    with Server(pagoda, model_path, ["--embeddings", "--ctx-size", "64"], os.path.join(workdir, "serve-err.log")) as s:
        e = "/v1/embeddings"
        check_error(s, e, b"{not json", 400, None, "invalid JSON")
        check_error(s, e, {}, 400, "input", "no input")
        check_error(s, e, {"input": 5}, 400, "input", "input a number")
        check_error(s, e, {"input": ""}, 400, "input", "empty string")
        check_error(s, e, {"input": []}, 400, "input", "empty array")
        check_error(s, e, {"input": ["a", ""]}, 400, "input", "an empty string in the array")
        check_error(s, e, {"input": [[1, 2], []]}, 400, "input", "an empty id list")
        check_error(s, e, {"input": ["a", [1, 2]]}, 400, "input", "strings and ids mixed")
        check_error(s, e, {"input": [1, "a"]}, 400, "input", "ids and a string mixed")
        check_error(s, e, {"input": [1, 2.5]}, 400, "input", "a fractional id")
        check_error(s, e, {"input": [1, n_vocab]}, 400, "input", "an id past the vocabulary")
        check_error(s, e, {"input": [1, -1]}, 400, "input", "a negative id")
        check_error(s, e, {"input": [{"text": "a"}]}, 400, "input", "an object input")
        check_error(s, e, {"input": [[1]] * 2049}, 400, "input", "2049 inputs")
        check_error(s, e, {"input": [1] * 65}, 400, "input", "an input longer than the context")
        check_error(s, e, {"input": [[1, 2], [1] * 65]}, 400, "input", "the second input too long")
        check_error(s, e, {"input": "hi", "encoding_format": "int8"}, 400, "encoding_format", "bad encoding_format")
        check_error(s, e, {"input": "hi", "encoding_format": 1}, 400, "encoding_format", "encoding_format a number")
        check_error(s, e, {"input": "hi", "dimensions": 0}, 400, "dimensions", "dimensions 0")
        check_error(s, e, {"input": "hi", "dimensions": 65}, 400, "dimensions", "dimensions past n_embd")
        check_error(s, e, {"input": "hi", "dimensions": "8"}, 400, "dimensions", "dimensions a string")
        check_error(s, e, {"input": "hi", "model": "nope"}, 404, "model", "unknown model")
        check_error(s, "/v1/rerank", {"query": "q", "documents": ["a"]}, 400, None, "rerank on a non-reranker")
        # 64 tokens fill the context exactly: nothing is generated, so that is allowed.
        got, _ = embeddings(s, [1] * 64)
        check(got is not None, "an input of exactly the context length")
        got, _ = embeddings(s, ["hello", "world"])
        check(got is not None and len(got) == 2, "the server still serves after the errors")


def text_case(pagoda, workdir, stories):
    # stories260K: llama without pooling metadata (default last), text through its tokenizer.
    with Server(pagoda, stories, ["--embeddings"], os.path.join(workdir, "serve-stories.log")) as s:
        text = "Once upon a time, there was a little girl"
        got, body = embeddings(s, [text, "Lily"])
        _, tk = s.post("/tokenize", {"content": text, "add_special": True})
        ids, _ = embeddings(s, tk["tokens"])
        check(got is not None and ids is not None and float(np.max(np.abs(got[0] - ids[0]))) <= BATCH_TOL,
              "text input equals its token ids")
        check(got is not None and body["usage"]["prompt_tokens"] >= len(tk["tokens"]) + 1, "text usage")
        model = llama_numpy.LlamaModel(gguf_numpy.GgufFile(stories))
        ref = reference(model, tk["tokens"], "last")
        diff = float(np.max(np.abs(got[0] - ref))) if got is not None else 1.0
        # stories260K runs with an f32 KV cache here too; its weights are f32.
        check(diff <= TOL, "stories260K last pooling: max|diff| %.3g" % diff)
        print("stories260K (default pooling last): max|diff| vs numpy %.2e" % diff)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--models", default=DEFAULT_MODELS)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    shape = ["--arch", "qwen3", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
             "--vocab", "320", "--type", "f32"]
    last = os.path.join(a.workdir, "qwen3-last.gguf")
    rank = os.path.join(a.workdir, "qwen3-rank.gguf")
    subprocess.run([a.pagoda, "synth"] + shape + ["--pooling", "last", "-o", last], check=True,
                   stderr=subprocess.DEVNULL)
    subprocess.run([a.pagoda, "synth"] + shape + ["--pooling", "rank", "--seed", "3", "-o", rank], check=True,
                   stderr=subprocess.DEVNULL)
    g_last = gguf_numpy.GgufFile(last)
    check(g_last.get("qwen3.pooling_type") == 3, "synth wrote qwen3.pooling_type 3")
    np_last = llama_numpy.LlamaModel(g_last)
    g_rank = gguf_numpy.GgufFile(rank)
    np_rank = llama_numpy.LlamaModel(g_rank)

    pooling_cases(a.pagoda, a.workdir, last, np_last)
    rerank_cases(a.pagoda, a.workdir, rank, np_rank, g_rank)
    rerank_by_logits_case(a.pagoda, a.workdir, a.models)
    error_cases(a.pagoda, a.workdir, last, np_last.n_vocab)
    stories = os.path.join(a.models, "stories260K", "stories260K.gguf")
    if os.path.exists(stories):
        text_case(a.pagoda, a.workdir, stories)
    else:
        print("skip stories260K: %s not found" % stories)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("all embeddings / rerank checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
