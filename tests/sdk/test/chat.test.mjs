// Chat completions and (legacy) completions through the OpenAI SDK: response shapes, the
// SDK's stream iteration and stream helper, stop strings, seeds and usage.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, modelId, applyTemplate, tokenize, collectChatStream } from './lib.mjs';

const openai = client();
const messages = [
  { role: 'system', content: 'You tell short stories.' },
  { role: 'user', content: 'Tell me about a cat named Tim.' },
];

test('chat completion: shape, greedy text and usage counted by the server tokenizer', async () => {
  const model = await modelId();
  const r = await openai.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, model);
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0);
  assert.equal(c.finish_reason, 'length');  // 8 tokens cannot finish a story
  // prompt_tokens is the rendered template's token count (BOS included).
  const promptIds = await tokenize(await applyTemplate(messages));
  assert.equal(r.usage.prompt_tokens, promptIds.length);
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.ok(r.usage.prompt_tokens_details.cached_tokens < r.usage.prompt_tokens);

  // Greedy decoding is deterministic: the same request again gives the same text.
  const again = await openai.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  assert.equal(again.choices[0].message.content, c.message.content);
});

test('chat streaming: SDK iteration gives the non-streamed text, ordered chunks and a usage chunk', async () => {
  const model = await modelId();
  const ref = await openai.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  const stream = await openai.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const { chunks, content, finishReason, usage } = await collectChatStream(stream);
  assert.equal(content, ref.choices[0].message.content);
  assert.equal(finishReason, 'length');
  assert.ok(chunks.length >= 3);
  const id = chunks[0].id;
  for (const ch of chunks) {
    assert.equal(ch.object, 'chat.completion.chunk');
    assert.equal(ch.id, id);
    assert.equal(ch.model, model);
  }
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  // include_usage: the last chunk has no choices and the usage; earlier ones carry none.
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(usage, last.usage);
  for (const ch of chunks.slice(0, -1)) assert.ok(ch.usage == null);
  assert.equal(usage.prompt_tokens, ref.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, 12);
  assert.equal(usage.total_tokens, usage.prompt_tokens + 12);
  // finish_reason arrives once, on the last choice-bearing chunk.
  const withFinish = chunks.filter((ch) => ch.choices[0]?.finish_reason);
  assert.equal(withFinish.length, 1);
  assert.equal(withFinish[0], chunks.at(-2));
});

test('chat streaming: the SDK stream helper assembles the final completion', async () => {
  const model = await modelId();
  const ref = await openai.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
  const runner = openai.chat.completions.stream({ model, messages, max_tokens: 10, temperature: 0 });
  let deltas = '';
  runner.on('content', (delta) => { deltas += delta; });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, ref.choices[0].message.content);
  assert.equal(final.choices[0].message.role, 'assistant');
  assert.equal(final.choices[0].finish_reason, 'length');
  assert.equal(deltas, ref.choices[0].message.content);
});

test('completions: non-streamed and streamed text agree, usage, prompt as token ids', async () => {
  const model = await modelId();
  const prompt = 'Once upon a time';
  const r = await openai.completions.create({ model, prompt, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  // stories260K's README continuation of "Once upon a time" (greedy).
  assert.match(r.choices[0].text, /^, there was a little girl named Lily/);
  const promptIds = await tokenize(prompt);
  assert.equal(r.usage.prompt_tokens, promptIds.length);
  assert.equal(r.usage.completion_tokens, 16);
  assert.equal(r.usage.total_tokens, promptIds.length + 16);

  const stream = await openai.completions.create({
    model, prompt, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    for (const ch of chunk.choices) { text += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 16);
  assert.equal(usage.prompt_tokens, promptIds.length);

  // The same prompt as token ids gives the same text.
  const byIds = await openai.completions.create({ model, prompt: promptIds, max_tokens: 16, temperature: 0 });
  assert.equal(byIds.choices[0].text, r.choices[0].text);
});

// A stop string taken from the middle of the greedy continuation: the output ends right
// before its first occurrence, without it, and finish_reason is "stop".
test('stop strings: chat and completions, streamed and not', async () => {
  const model = await modelId();
  const prompt = 'Once upon a time';
  const full = (await openai.completions.create({ model, prompt, max_tokens: 24, temperature: 0 })).choices[0].text;
  const stop = full.slice(12, 17);
  const expected = full.slice(0, full.indexOf(stop));
  assert.ok(expected.length >= 1 && expected.length <= 12, `stop ${JSON.stringify(stop)} in ${JSON.stringify(full)}`);

  const r = await openai.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stop: [stop, 'zzzz'] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');

  const s = await openai.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stop, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of s) for (const ch of chunk.choices) { text += ch.text; finish = ch.finish_reason ?? finish; }
  assert.equal(text, expected);
  assert.equal(finish, 'stop');

  const chatFull = (await openai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 }))
    .choices[0].message.content;
  const chatStop = chatFull.slice(8, 12);
  const chatExpected = chatFull.slice(0, chatFull.indexOf(chatStop));
  const c = await openai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stop: chatStop });
  assert.equal(c.choices[0].message.content, chatExpected);
  assert.equal(c.choices[0].finish_reason, 'stop');
  const cs = await openai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stop: [chatStop], stream: true });
  const got = await collectChatStream(cs);
  assert.equal(got.content, chatExpected);
  assert.equal(got.finishReason, 'stop');
});

test('seeds: same seed at temperature 1 repeats the text, streamed or not; different seeds differ', async () => {
  const model = await modelId();
  const ask = (seed, extra = {}) => openai.chat.completions.create({
    model, messages, max_tokens: 24, temperature: 1, seed, ...extra,
  });
  const a = (await ask(42)).choices[0].message.content;
  const b = (await ask(42)).choices[0].message.content;
  assert.equal(a, b);
  const streamed = await collectChatStream(await ask(42, { stream: true }));
  assert.equal(streamed.content, a);

  const others = [];
  for (const seed of [1, 2, 3]) others.push((await ask(seed)).choices[0].message.content);
  // 24 tokens sampled at temperature 1 from a 512-token vocabulary: two seeds agreeing on all
  // of them is possible for one pair in principle, all four texts equal would mean the seed is
  // ignored.
  assert.ok(new Set([a, ...others]).size >= 3, JSON.stringify([a, ...others]));

  const c1 = await openai.completions.create({ model, prompt: 'The dog', max_tokens: 24, temperature: 1, seed: 7 });
  const c2 = await openai.completions.create({ model, prompt: 'The dog', max_tokens: 24, temperature: 1, seed: 7 });
  const c3 = await openai.completions.create({ model, prompt: 'The dog', max_tokens: 24, temperature: 1, seed: 8 });
  assert.equal(c1.choices[0].text, c2.choices[0].text);
  assert.notEqual(c1.choices[0].text, c3.choices[0].text);
});
