#!/usr/bin/env python3
"""Reference dequantization of random ggml blocks by the `gguf` Python package.

zinc's own dequantizers are checked against this file (tests/tests/formats.rs); the values
come from gguf-py's numpy implementation, not from zinc. Regenerate with:

    python3 -m pip install gguf numpy
    python3 scripts/reference/quant_blocks.py > tests/fixtures/reference/quant_blocks.json
"""
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# f16 scale fields per format: (byte offset, magnitude); the rest of each block is random.
SCALES = {
    T.Q4_0: [(0, 0.05)], T.Q4_1: [(0, 0.05), (2, 0.3)], T.Q5_0: [(0, 0.03)],
    T.Q5_1: [(0, 0.03), (2, 0.3)], T.Q8_0: [(0, 0.01)],
    T.Q2_K: [(80, 0.02), (82, 0.01)], T.Q3_K: [(108, 0.01)], T.Q4_K: [(0, 0.002), (2, 0.002)],
    T.Q5_K: [(0, 0.001), (2, 0.001)], T.Q6_K: [(208, 0.0005)],
    T.IQ4_NL: [(0, 0.01)], T.IQ4_XS: [(0, 0.0005)],
}

def main():
    rng = np.random.default_rng(20261202)
    out = {}
    for qtype in [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
                  T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS]:
        block, size = GGML_QUANT_SIZES[qtype]
        n_blocks = max(1, 256 // block)
        if qtype == T.F32:
            raw = rng.uniform(-2, 2, n_blocks).astype("<f4").tobytes()
        elif qtype == T.F16:
            raw = rng.uniform(-2, 2, n_blocks).astype("<f2").tobytes()
        elif qtype == T.BF16:
            raw = (rng.uniform(-2, 2, n_blocks).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = bytearray(rng.integers(0, 256, n_blocks * size, dtype=np.uint8).tobytes())
            for b in range(n_blocks):
                for off, mag in SCALES[qtype]:
                    v = np.array([rng.uniform(0.5, 1.5) * mag], dtype="<f2").tobytes()
                    data[b * size + off: b * size + off + 2] = v
            raw = bytes(data)
        values = dequantize(np.frombuffer(raw, dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
        out[qtype.name.lower()] = {"id": int(qtype), "hex": raw.hex(), "values": [float(v) for v in values]}
    json.dump({"generator": "gguf-py dequantize", "types": out}, sys.stdout, indent=0)

if __name__ == "__main__":
    main()
