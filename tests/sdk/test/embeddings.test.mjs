// client.embeddings through the SDK: by default the SDK asks for base64 and decodes it to
// a Float32Array, so this checks pagoda's base64 (little-endian float32) against its float
// answer; batches, token-id inputs, dimensions, usage, and errors as the SDK's classes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { client, modelId, tokenize } from './lib.mjs';

const openai = client('embed');
const texts = ['Once upon a time', 'there was a little girl named Lily', 'She liked to play outside.'];

function norm(v) {
  let s = 0;
  for (const x of v) s += x * x;
  return Math.sqrt(s);
}

test('embeddings.create: base64 (the SDK default) decodes to the float answer; unit vectors; usage', async () => {
  const model = await modelId();
  // The first request puts the prompts in the prefix cache; the next two both find them
  // there, so they compute the same bytes (a vector computed over a cached prefix may
  // differ from the first by ~1 float32 ulp: docs/api.md, Embeddings and reranking).
  const first = await openai.embeddings.create({ model, input: texts, encoding_format: 'float' });
  const floats = await openai.embeddings.create({ model, input: texts, encoding_format: 'float' });
  const decoded = await openai.embeddings.create({ model, input: texts });
  for (let i = 0; i < texts.length; i++)
    for (let d = 0; d < 64; d++) assert.ok(Math.abs(first.data[i].embedding[d] - floats.data[i].embedding[d]) < 1e-6);
  assert.equal(floats.object, 'list');
  assert.equal(floats.model, model);
  assert.equal(floats.data.length, texts.length);
  for (let i = 0; i < texts.length; i++) {
    assert.equal(floats.data[i].index, i);
    assert.equal(floats.data[i].object, 'embedding');
    assert.ok(Array.isArray(floats.data[i].embedding));
    assert.equal(floats.data[i].embedding.length, 64);  // stories260K's width
    assert.ok(Math.abs(norm(floats.data[i].embedding) - 1) < 1e-5);
    // The SDK's Float32Array holds exactly the float32 values the float answer wrote.
    assert.deepEqual(Array.from(decoded.data[i].embedding), floats.data[i].embedding.map((x) => Math.fround(x)));
  }
  let tokens = 0;
  for (const t of texts) tokens += (await tokenize(t, true, undefined)).length;
  assert.equal(floats.usage.prompt_tokens, tokens, JSON.stringify(floats.usage));
  assert.equal(floats.usage.total_tokens, floats.usage.prompt_tokens);
});

test('embeddings.create: token ids, a single string, dimensions', async () => {
  const model = await modelId();
  const one = await openai.embeddings.create({ model, input: texts[0], encoding_format: 'float' });
  assert.equal(one.data.length, 1);
  const ids = await openai.embeddings.create({ model, input: [[1, 403, 407], [1, 261]], encoding_format: 'float' });
  assert.equal(ids.data.length, 2);
  assert.equal(ids.usage.prompt_tokens, 5);
  const short = await openai.embeddings.create({ model, input: texts, dimensions: 16, encoding_format: 'float' });
  for (const d of short.data) {
    assert.equal(d.embedding.length, 16);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5);
  }
});

test('embeddings errors: BadRequestError naming the parameter, NotFoundError', async () => {
  const model = await modelId();
  await assert.rejects(openai.embeddings.create({ model, input: '' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  await assert.rejects(openai.embeddings.create({ model, input: 'x', dimensions: 65 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
  await assert.rejects(openai.embeddings.create({ model, input: 'x', encoding_format: 'int8' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'encoding_format');
  await assert.rejects(openai.embeddings.create({ model: 'nope', input: 'x' }), OpenAI.NotFoundError);
  // The main server runs without --embeddings: 404.
  await assert.rejects(client().embeddings.create({ model, input: 'x' }), OpenAI.NotFoundError);
});
