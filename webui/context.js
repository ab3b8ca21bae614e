// The conversation against the model's context window: the default answer length, and (for
// the page's context meter and its "the conversation no longer fits" choice) what the
// conversation uses and which of its oldest turns to drop. Pure functions: no DOM, no fetch
// (tests/webui/context.test.mjs runs them under node).

// The answer length the page asks for when the user has set no max_tokens. Without one the
// server generates until the context is full, so one long answer fills it and the next
// message is refused. 1,024 tokens (about 750 English words) holds a long answer with code;
// a quarter of a smaller context keeps three quarters for the conversation (2,048 -> 512,
// 128 -> 32). Half was rejected: two exchanges would already fill the context.
export const MAX_DEFAULT_ANSWER_TOKENS = 1024;

export function defaultAnswerTokens(nCtx) {
  if (!Number.isSafeInteger(nCtx) || nCtx <= 0) return MAX_DEFAULT_ANSWER_TOKENS;
  return Math.max(1, Math.min(MAX_DEFAULT_ANSWER_TOKENS, Math.floor(nCtx / 4)));
}

// The tokens a conversation holds after its last exchange, from the server's usage: the
// prompt it was sent plus the answer. null when the last message is not an answer with exact
// usage (a stopped answer has none, a failed one none that counts, an edited conversation
// ends in a user message): the page then asks the server to count (api.js countPromptTokens).
export function usedTokensOf(messages) {
  const last = Array.isArray(messages) ? messages.at(-1) : null;
  if (!last || last.role !== 'assistant' || last.error) return null;
  const s = last.stats;
  if (!s || s.approx) return null;
  const count = (n) => Number.isSafeInteger(n) && n >= 0;
  return count(s.prompt) && count(s.generated) ? s.prompt + s.generated : null;
}

// What the context meter shows for `used` tokens of an `nCtx`-token context: the text
// ("1,234 / 2,048 tokens"; "? / ..." when the count is not known; the count alone when the
// context is not) and a level: 'full' when nothing is left (the last answer ran to the end of
// the context, so no next message fits), 'low' when less than `reserve` (an answer's room) is
// left, 'ok' otherwise, 'unknown' without a count. `fraction` (0..1) is for the bar.
export function meterReading(used, nCtx, reserve = 0, locale = undefined) {
  const known = (n) => Number.isSafeInteger(n) && n >= 0;
  const fmt = (n) => n.toLocaleString(locale);
  const ctxKnown = known(nCtx) && nCtx > 0;
  if (!known(used)) return { text: ctxKnown ? `? / ${fmt(nCtx)} tokens` : '? tokens', level: 'unknown', fraction: 0 };
  if (!ctxKnown) return { text: `${fmt(used)} tokens`, level: 'ok', fraction: 0 };
  const left = nCtx - used;
  const level = left <= 0 ? 'full' : left < reserve ? 'low' : 'ok';
  return { text: `${fmt(used)} / ${fmt(nCtx)} tokens`, level, fraction: Math.min(1, used / nCtx) };
}

// Whether a refused request was refused because its prompt does not fit the context: a 400
// whose message speaks of the context (pagoda: "the prompt has 140 tokens but the context is
// 128 tokens ..."; llama-server: "... exceeds the available context size"; vLLM and OpenAI:
// "This model's maximum context length is ..."). Matching the word rather than pagoda's exact
// sentence keeps the page useful behind another OpenAI-compatible server.
export function isContextFull(status, message) {
  return status === 400 && typeof message === 'string' && /\bcontext\b/i.test(message);
}

// Where each turn of `messages` starts: a turn is a user message and the answers after it
// (messages before the first user message form a turn of their own). Dropping the oldest k
// turns keeps messages from turnStarts(messages)[k] on, so no answer loses its question.
export function turnStarts(messages) {
  const starts = [];
  if (!Array.isArray(messages)) return starts;
  messages.forEach((m, i) => {
    if (i === 0 || m?.role === 'user') starts.push(i);
  });
  return starts;
}

// The fewest of the oldest turns (at least `min`, at most `nTurns`) to drop so that
// `fits(k)` holds, or null when dropping all of them is not enough. fits is async (the
// server counts the tokens) and monotonic (dropping more never lengthens the prompt), so a
// binary search asks it 1 + log2(nTurns) times rather than once per turn.
export async function fewestTurnsToDrop(nTurns, fits, min = 1) {
  if (!Number.isSafeInteger(nTurns) || nTurns < min) return null;
  if (!(await fits(nTurns))) return null;
  let lo = min;
  let hi = nTurns;  // fits
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (await fits(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
