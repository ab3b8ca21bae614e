"""Independent numpy dequantizer for codecs_numpy_test.cpp.

Usage: dequant_numpy.py OUT_DIR TYPE_ID:N_VALUES:IN.bin [...]
Runs gguf_numpy's self-test (its vectorised decoders against its ggml-loop-order
scalar ones), then for each argument decodes IN.bin (raw blocks of ggml type
TYPE_ID holding N_VALUES values) with gguf_numpy.dequantize and writes the float32
values to OUT_DIR/IN.bin.f32. Prints one line per file; exits non-zero on any error.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import gguf_numpy  # noqa: E402


def main():
    gguf_numpy.self_test(verbose=False)
    out_dir = sys.argv[1]
    for arg in sys.argv[2:]:
        type_id, n_values, path = arg.split(":", 2)
        raw = np.fromfile(path, dtype=np.uint8)
        values = gguf_numpy.dequantize(raw, int(type_id), int(n_values))
        out = os.path.join(out_dir, os.path.basename(path) + ".f32")
        values.astype("<f4").tofile(out)
        print("decoded %s: %d values of %s" % (path, values.size, gguf_numpy.type_name(int(type_id))))


if __name__ == "__main__":
    main()
