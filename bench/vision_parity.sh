#!/usr/bin/env bash
# Images side by side with llama-server: the same synthetic model and projector (pagoda
# synth --mmproj), the same chat request with a PNG at temperature 0, against the peer's
# llama-server (--mmproj) and pagoda serve. Prints each answer's text, prompt tokens and
# first-token log-probabilities; the two must agree in text and tokens.
#   gemma3: Gemma 3 with a 112 px SigLIP projector (16 image tokens)
#   qwen35: Qwen 3.5 (its tiny hybrid shape) with a qwen3vl_merger projector: dynamic
#           resolution (the four PNGs give 16, 16, 81 and 24 tokens) and M-RoPE positions
# Usage: bench/vision_parity.sh [PAGODA_BINARY] [PEER_BIN_DIR] [gemma3|qwen35]
set -euo pipefail
PAGODA=${1:-build/release/pagoda}
PEER=${2:-$HOME/.cache/pagoda-peer/portable/bin}
ARCH=${3:-gemma3}
PY=/usr/bin/python3
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
case "$ARCH" in
  gemma3)
    "$PAGODA" synth --arch gemma3 --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 -o "$WORK/model.gguf" \
      --mmproj "$WORK/mmproj.gguf" --mmproj-image-size 112 --mmproj-dim 64 --mmproj-layers 2 --mmproj-heads 4 \
      --mmproj-ffn 128 --mmproj-merge 2 >/dev/null ;;
  qwen35)
    # Qwen3's vocabulary and template (../shared): <|vision_start|> / <|vision_end|> are
    # its special tokens, and the random answer is valid UTF-8 (synth's own small vocabulary
    # gives stray bytes, which llama-server's output parser answers with a 500).
    "$PAGODA" synth --arch qwen35 --shape tiny --vocab-from "$(dirname "$0")/../../shared/models/qwen3-tokenizer" \
      -o "$WORK/model.gguf" --mmproj "$WORK/mmproj.gguf" \
      --mmproj-image-size 64 --mmproj-dim 64 --mmproj-layers 2 --mmproj-heads 4 --mmproj-ffn 128 >/dev/null ;;
  *) echo "vision_parity.sh: unknown model $ARCH (gemma3 or qwen35)" >&2; exit 2 ;;
esac
"$PY" - "$WORK" <<'PYEOF'
import struct, sys, zlib
def png(path, w, h, px):
    rows = b''.join(b'\x00' + bytes(c for x in range(w) for c in px(x, y)) for y in range(h))
    ch = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + ch(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
                           + ch(b'IDAT', zlib.compress(rows)) + ch(b'IEND', b''))
d = sys.argv[1]
grad = lambda w, h: lambda x, y: (x * 255 // (w - 1), y * 255 // (h - 1), ((x + y) * 7) & 255)
png(d + '/grad.png', 112, 112, grad(112, 112))
png(d + '/check.png', 112, 112, lambda x, y: (255 if (x // 14 + y // 14) % 2 else 0,) * 3)
png(d + '/grad300.png', 300, 300, grad(300, 300))
png(d + '/wide.png', 200, 120, lambda x, y: (x * 255 // 199, y * 255 // 119, (x * y >> 3) & 255))
PYEOF
cat > "$WORK/req.py" <<'PYEOF'
import base64, json, sys, urllib.request
parts = [{"type": "text", "text": "Describe this image."}]
for path in sys.argv[1].split(','):  # one image, or several in one message
    img = base64.b64encode(open(path, 'rb').read()).decode()
    parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + img}})
    parts.append({"type": "text", "text": "And then?"})
body = {"messages": [{"role": "user", "content": parts}],
        "temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 3}
req = urllib.request.Request(sys.argv[2], data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=300).read())
c = r["choices"][0]
lp = c["logprobs"]["content"][0]
print("text", json.dumps(c["message"]["content"]), "prompt_tokens", r["usage"]["prompt_tokens"],
      "first_logprob", round(lp["logprob"], 4))
PYEOF
OMP_WAIT_POLICY=passive LD_LIBRARY_PATH="$PEER" "$PEER/llama-server" -m "$WORK/model.gguf" --mmproj "$WORK/mmproj.gguf" \
  --port 18190 -t 2 -c 2048 --no-warmup >"$WORK/peer.log" 2>&1 &
"$PAGODA" serve -m "$WORK/model.gguf" --mmproj "$WORK/mmproj.gguf" --port 18191 -t 2 -c 2048 \
  >"$WORK/pagoda.log" 2>&1 &
for port in 18190 18191; do
  for _ in $(seq 60); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.5; done
done
imgs=(grad check grad300 wide)
[ "$ARCH" = qwen35 ] && imgs+=(wide,grad300)  # two images: the second's M-RoPE positions shift
for img in "${imgs[@]}"; do
  files=$(echo "$img" | sed "s|[^,]*|$WORK/&.png|g")
  echo "$img llama-server: $("$PY" "$WORK/req.py" "$files" http://127.0.0.1:18190/v1/chat/completions)"
  echo "$img pagoda:       $("$PY" "$WORK/req.py" "$files" http://127.0.0.1:18191/v1/chat/completions)"
done
