// usage.prompt_tokens_details.cached_tokens over a multi-turn conversation, checked against
// the exact prefix-cache rule (docs/cache.md, "Prefix cache"), and the generated text checked
// against a server with the prefix cache off.
//
// Expected value for turn n: the sequence turn n-1 left in the cache is its prompt followed by
// its generated tokens, except the last one sampled (it is never fed back through the model,
// so it has no KV). Its token ids are rebuilt with the server's own /apply-template and
// /tokenize; turn n's prompt ids likewise. With L the length of their common prefix,
// cached_tokens is L when turn n's prompt goes past it and L - 1 when the prompt is the
// prefix itself (the last prompt token is always recomputed for its logits).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, urls, modelId, applyTemplate, tokenize, commonPrefixLength, collectChatStream } from './lib.mjs';

const MAX_TOKENS = 10;
const userTurns = [
  'Tell me a story about a red ball.',
  'What did the ball do next?',
  'And then what happened to the dog?',
  'How did the story end?',
];

async function ask(openai, model, messages, stream) {
  const params = { model, messages, max_tokens: MAX_TOKENS, temperature: 0 };
  if (!stream) {
    const r = await openai.chat.completions.create(params);
    return { content: r.choices[0].message.content, finishReason: r.choices[0].finish_reason, usage: r.usage };
  }
  const s = await openai.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  return collectChatStream(s);
}

// The token ids a finished turn left in the prefix cache.
async function cachedSequence(messages, turn) {
  const prompt = await applyTemplate(messages);
  const ids = await tokenize(prompt + turn.content);
  const computed = turn.usage.prompt_tokens + turn.usage.completion_tokens - 1;
  assert.ok(ids.length >= computed,
    `re-tokenized prompt + completion is shorter (${ids.length}) than the sequence the server computed (${computed})`);
  return ids.slice(0, computed);
}

test('cached_tokens over 4 turns equals the re-sent token-identical prefix; same text with the cache off', async () => {
  const model = await modelId();
  const cached = client('main');
  const uncached = client('nocache');
  // Files run one at a time (run.mjs), so nothing else touches the cache between turns.
  const reset = await fetch(`${urls.main}/v1/cache/reset`, { method: 'POST' });
  assert.equal(reset.status, 200);

  const messages = [{ role: 'system', content: 'You are a storyteller for small children.' }];
  let previous = null;  // { messages, turn } of the last turn
  const seen = [];
  for (let n = 0; n < userTurns.length; n++) {
    messages.push({ role: 'user', content: userTurns[n] });
    const stream = n % 2 === 1;  // turns 2 and 4 streamed: usage of the final chunk
    const turn = await ask(cached, model, messages, stream);
    const promptIds = await tokenize(await applyTemplate(messages));
    assert.equal(turn.usage.prompt_tokens, promptIds.length, `turn ${n + 1} prompt_tokens`);
    assert.equal(turn.usage.completion_tokens, MAX_TOKENS);
    // The rule for the cached sequence assumes the turn ran to max_tokens (no EOS).
    assert.equal(turn.finishReason, 'length', `turn ${n + 1} finish_reason`);

    let expected = 0;
    if (previous) {
      const seq = await cachedSequence(previous.messages, previous.turn);
      const L = commonPrefixLength(promptIds, seq);
      expected = L < promptIds.length ? L : L - 1;
      assert.ok(expected > 0);
    }
    assert.equal(turn.usage.prompt_tokens_details.cached_tokens, expected, `turn ${n + 1} cached_tokens`);

    // The same conversation with the prefix cache off: same greedy text, nothing cached.
    const ref = await ask(uncached, model, messages, stream);
    assert.equal(ref.content, turn.content, `turn ${n + 1} text with the cache off`);
    assert.equal(ref.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(ref.usage.prompt_tokens, turn.usage.prompt_tokens);

    seen.push({ cached: turn.usage.prompt_tokens_details.cached_tokens, prompt: turn.usage.prompt_tokens });
    previous = { messages: messages.slice(), turn };
    messages.push({ role: 'assistant', content: turn.content });
  }
  // Each turn re-sends everything before it: the cached share grows turn over turn.
  for (let n = 2; n < seen.length; n++) assert.ok(seen[n].cached > seen[n - 1].cached, JSON.stringify(seen));

  // The last prompt re-sent unchanged is the prefix itself: everything but its last token.
  const lastMessages = previous.messages;
  const again = await ask(cached, model, lastMessages, false);
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens - 1);
  assert.equal(again.content, previous.turn.content);
});

test('completions: a prompt extending a cached prompt + completion, the prompt as the prefix itself, cache_prompt: false', async () => {
  const model = await modelId();
  const openai = client('main');
  const base = 'Once upon a time there was a tiny robot who lived in a box of old toys.';
  const first = await openai.completions.create({ model, prompt: base, max_tokens: 4, temperature: 0 });
  assert.equal(first.choices[0].finish_reason, 'length');
  const baseIds = await tokenize(base);
  // The cached sequence: prompt + the 3 generated tokens that were fed back (not the 4th).
  const seq = (await tokenize(base + first.choices[0].text)).slice(0, baseIds.length + 4 - 1);

  // Goes past the cached sequence: everything cached is reused, not the unfed 4th token.
  const longer = `${base}${first.choices[0].text} Then the`;
  const longerIds = await tokenize(longer);
  const L = commonPrefixLength(longerIds, seq);
  assert.ok(L < longerIds.length);
  const r = await openai.completions.create({ model, prompt: longer, max_tokens: 4, temperature: 0 });
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, L);

  // The base prompt again is a prefix of what is cached: all but its last token.
  const same = await openai.completions.create({ model, prompt: base, max_tokens: 4, temperature: 0 });
  assert.equal(same.usage.prompt_tokens_details.cached_tokens, baseIds.length - 1);
  assert.equal(same.choices[0].text, first.choices[0].text);

  // cache_prompt: false (pagoda's opt-out, passed through the SDK's untyped body) reuses nothing.
  const off = await openai.completions.create({ model, prompt: longer, max_tokens: 4, temperature: 0, cache_prompt: false });
  assert.equal(off.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(off.choices[0].text, r.choices[0].text);
});
