#!/usr/bin/env bash
# Does llama.cpp read pagoda's GGUFs as pagoda does? For each architecture: `pagoda synth
# --arch A --shape tiny --type f32` with stories260K's vocabulary, then the same prompt
# continued greedily by `pagoda generate` and by the peer's llama-completion; the texts must
# be equal. Prints one line per architecture (same / DIFFERENT, and both texts on a
# difference); exits 1 when any differs.
#
#   bench/peer_greedy.sh [ARCH...]      (default: qwen35; peer from ../shared/peer/build-peer.sh)
#
# llama-completion can exit before its log thread prints the continuation on models this
# small: it is retried until its output holds the prompt. Needs /usr/bin/python3.
set -uo pipefail
cd "$(dirname "$0")/.."
P=build/release/pagoda
D=${PAGODA_PEER_DIR:-$HOME/.cache/pagoda-peer}
L="$D/portable/bin/llama-completion"
vocab=../shared/models/stories260K/stories260K.gguf
prompt="Once upon a time"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for arch in "${@:-qwen35}"; do
  f="$tmp/$arch.gguf"
  $P synth --arch "$arch" --shape tiny --type f32 --vocab-from "$vocab" -o "$f" >/dev/null 2>&1
  ours=$($P generate -m "$f" -p "$prompt" -n 48 --temp 0 2>/dev/null)
  theirs=""
  for _ in $(seq 1 10); do
    theirs=$(LD_LIBRARY_PATH="$D/portable/bin" "$L" -m "$f" -p "$prompt" -n 48 --temp 0 -t 2 -no-cnv --no-warmup \
      2>/dev/null)
    [[ "$theirs" == *"$prompt"* ]] && break
  done
  # pagoda writes U+FFFD for each ill-formed UTF-8 subpart a token left; llama.cpp the raw
  # bytes: compared after the same replacement.
  theirs=$(printf '%s' "${theirs#*"$prompt"}" | /usr/bin/python3 -c \
    'import sys; sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "replace"))')
  # llama-completion marks a continuation that sampled end-of-text; pagoda stops there too.
  what="48-token greedy continuation"
  if [[ "$theirs" == *" [end of text]" ]]; then
    theirs=${theirs%" [end of text]"}
    what="greedy continuation up to end-of-text"
  fi
  if [ "$ours" == "$theirs" ]; then
    echo "$arch: same $what"
  else
    echo "$arch: DIFFERENT"; echo "  pagoda:    $ours"; echo "  llama.cpp: $theirs"; status=1
  fi
done
exit $status
