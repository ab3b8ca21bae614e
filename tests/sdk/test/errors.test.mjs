// pagoda's OpenAI error objects surface as the SDK's typed error classes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { client, modelId, API_KEY } from './lib.mjs';

const messages = [{ role: 'user', content: 'Hello' }];

test('400 BadRequestError: temperature out of range, naming the parameter', async () => {
  const model = await modelId();
  await assert.rejects(
    client().chat.completions.create({ model, messages, max_tokens: 4, temperature: 5 }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 400);
      assert.equal(e.type, 'invalid_request_error');
      assert.match(e.message, /temperature/);
      return true;
    });
  // n > 1 is rejected rather than silently answered with one choice.
  await assert.rejects(client().completions.create({ model, prompt: 'Hi', max_tokens: 4, n: 2 }), OpenAI.BadRequestError);
});

test('401 AuthenticationError: wrong or missing key; the right key works', async () => {
  const model = 'any';  // the key is checked before the model
  for (const apiKey of ['wrong-key', 'x']) {
    await assert.rejects(
      client('auth', { apiKey }).chat.completions.create({ model, messages, max_tokens: 4 }),
      (e) => {
        assert.ok(e instanceof OpenAI.AuthenticationError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.status, 401);
        return true;
      });
  }
  const ok = client('auth', { apiKey: API_KEY });
  const models = await ok.models.list();
  const r = await ok.chat.completions.create({ model: models.data[0].id, messages, max_tokens: 4 });
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('another model name is served by the loaded model; 404 NotFoundError with --strict-model-names', async () => {
  // Many clients send a preset name (gpt-4o): served, and the answer names the real model.
  const served = await client().chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 4 });
  assert.equal(served.choices[0].message.role, 'assistant');
  const id = (await client().models.list()).data[0].id;
  assert.equal(served.model, id);
  const strict = client('auth', { apiKey: API_KEY });
  await assert.rejects(
    strict.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 4 }),
    (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 404);
      assert.match(e.message, /no-such-model/);
      return true;
    });
  await assert.rejects(strict.completions.create({ model: 'no-such-model', prompt: 'Hi', max_tokens: 4 }),
    OpenAI.NotFoundError);
});

// The tight server runs one request and queues none: while a long stream holds the only
// slot, a second request is answered 429 at once.
test('429 RateLimitError: a second request while the only slot is busy', async () => {
  const tight = client('tight');
  const model = (await tight.models.list()).data[0].id;
  const controller = new AbortController();
  // ignore_eos + 1500 tokens: the stream cannot end on its own before the second request.
  const long = await tight.chat.completions.create(
    { model, messages, max_tokens: 1500, ignore_eos: true, stream: true },
    { signal: controller.signal });
  const it = long[Symbol.asyncIterator]();
  const first = await it.next();  // the request is running once its first chunk arrives
  assert.equal(first.done, false);
  try {
    await assert.rejects(
      tight.chat.completions.create({ model, messages, max_tokens: 4 }),
      (e) => {
        assert.ok(e instanceof OpenAI.RateLimitError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.status, 429);
        assert.ok(e.headers.get('retry-after'), 'Retry-After header');
        return true;
      });
  } finally {
    controller.abort();  // disconnecting cancels the long request and frees the slot
  }
  // The slot frees within an engine step of the disconnect; retry briefly until it does.
  let r = null;
  for (let i = 0; i < 50 && !r; i++) {
    try {
      r = await tight.chat.completions.create({ model, messages, max_tokens: 4 });
    } catch (e) {
      if (!(e instanceof OpenAI.RateLimitError)) throw e;
      await new Promise((res) => setTimeout(res, 50));
    }
  }
  assert.ok(r, 'the slot was not freed after the stream was aborted');
  assert.equal(r.usage.completion_tokens, 4);
});
