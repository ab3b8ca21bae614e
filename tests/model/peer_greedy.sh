#!/usr/bin/env bash
# Greedy continuation, pagoda against the llama.cpp peer: for each GGUF, `pagoda generate
# --temp 0` and the peer's llama-completion (greedy: --top-k 1 --temp 0, prompt not echoed)
# must print the same text, up to N tokens or end-of-text. Random-weight models emit bytes that are not UTF-8: pagoda
# prints U+FFFD for each such byte, the peer the raw byte, so the peer's output is decoded
# the same way (Python's errors="replace", one U+FFFD per invalid byte here) and trailing
# newlines are dropped before comparing. The peer can exit before its output is flushed on
# tiny models (its log thread), so a peer text that is a proper prefix of pagoda's (or
# empty, or cut inside a character) is retried up to 10 times; a differing one fails at once.
# PEER_FLAGS adds flags to the peer (e.g. "-fa off").
#
#   tests/model/peer_greedy.sh [-n TOKENS] [-p PROMPT] MODEL.gguf...
#   (peer built by ../shared/peer/build-peer.sh into ~/.cache/pagoda-peer/native/bin,
#    or PAGODA_PEER_BIN; pagoda from PAGODA_BINARY or build/release/pagoda)
set -uo pipefail
cd "$(dirname "$0")/../.."
n=48
prompt="Once upon a time"
while getopts "n:p:" o; do
  case $o in n) n=$OPTARG ;; p) prompt=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
P=${PAGODA_BINARY:-build/release/pagoda}
B=${PAGODA_PEER_BIN:-$HOME/.cache/pagoda-peer/native/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for f in "$@"; do
  "$P" generate -m "$f" -p "$prompt" -n "$n" --temp 0 -t 2 --kv-type-k f32 --kv-type-v f32 \
    >"$tmp/pagoda" 2>/dev/null || { echo "FAIL $f: pagoda generate failed"; status=1; continue; }
  verdict="FAIL $f: the peer printed nothing in 10 runs"
  for try in 1 2 3 4 5 6 7 8 9 10; do
    LD_LIBRARY_PATH=$B timeout 120 "$B/llama-completion" -m "$f" -p "$prompt" -n "$n" --temp 0 --top-k 1 \
      -t 2 -no-cnv --no-display-prompt -ctk f32 -ctv f32 ${PEER_FLAGS:-} >"$tmp/peer" 2>"$tmp/peer.err" </dev/null
    rc=$?
    if [ "$rc" -ge 128 ] && [ ! -s "$tmp/peer" ]; then
      # The native build's quantized prompt path dies on AMX CPUs (bench/peer.sh): name it.
      verdict="FAIL $f: the peer crashed (exit $rc) 10 times (quantized? try PAGODA_PEER_BIN=.../portable/bin)"
      continue
    fi
    outcome=$(python3 - "$tmp/pagoda" "$tmp/peer" <<'PY'
import sys
a = open(sys.argv[1], "rb").read().decode("utf-8", "replace").rstrip("\n")
b = open(sys.argv[2], "rb").read().decode("utf-8", "replace").rstrip("\n")
# Both stop at end-of-text (no --ignore-eos: llama.cpp bans EOS there, pagoda feeds it
# back as vLLM does, so past one the texts would part); the peer marks it.
if b.endswith(" [end of text]"):
    b = b[: -len(" [end of text]")]
# A <0x00> byte token: pagoda writes the NUL, llama.cpp's C-string printing drops it.
a, b = a.replace("\x00", ""), b.replace("\x00", "")
if a == b:
    print("same %d" % len(a))
elif a.startswith(b) or (len(b) < len(a) and a.startswith(b.rstrip("\ufffd"))):
    print("prefix")  # cut short (a cut multi-byte character ends in U+FFFD): run it again
else:
    i = next(i for i in range(min(len(a), len(b)) + 1) if i == len(a) or i == len(b) or a[i] != b[i])
    print("differ %d" % i)
PY
)
    case $outcome in
      same*) verdict="PASS $f: ${outcome#same } characters identical (peer try $try)"; break ;;
      prefix) continue ;;  # the peer stopped before flushing: try again
      *) verdict="FAIL $f: texts differ at character ${outcome#differ }"; break ;;
    esac
  done
  echo "$verdict"
  [[ $verdict == PASS* ]] || status=1
done
exit $status
