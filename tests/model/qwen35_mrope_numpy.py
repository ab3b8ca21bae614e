#!/usr/bin/python3
"""Logits of a qwen35 / qwen35moe GGUF for a prompt with embedded rows (an image's) at
M-RoPE positions, from tests/model/qwen35_numpy.py (float64, independent of pagoda).

  qwen35_mrope_numpy.py MODEL.gguf IN.json OUT.f32
IN.json: {"tokens": [T ids, -1 where a row is fed], "rows": [T entries, null or [dim]
floats], "mrope": [T [t, h, w]]}. OUT: float32 [T][n_vocab] logits, every position.
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_numpy  # noqa: E402
import qwen35_numpy  # noqa: E402


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model = qwen35_numpy.Qwen35Model(gguf_numpy.GgufFile(argv[0]))
    spec = json.load(open(argv[1]))
    tokens = np.array(spec["tokens"], dtype=np.int64)
    dim = model.token_embd.shape[1]
    embd = np.zeros((tokens.size, dim))
    for i, r in enumerate(spec["rows"]):
        if r is not None:
            embd[i] = r
    logits = model.mm(model.hidden_states(tokens, embd=embd, mrope=np.array(spec["mrope"])), model.output)
    logits.astype("<f4").tofile(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
