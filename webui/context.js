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
