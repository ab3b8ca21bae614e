// Structured outputs through the SDK: chat.completions.parse() with a zod schema
// (zodResponseFormat sends a strict json_schema response_format), response_format
// json_object, and a schema pagoda cannot compile answered 400 naming the keyword.
//
// The schema is bounded (an enum and an integer 0..9) so a tiny model reaches the closing
// brace well within max_tokens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { client, modelId, tokenize, collectChatStream } from './lib.mjs';

const openai = client();
const MAX_TOKENS = 64;

const Thing = z.object({
  color: z.enum(['red', 'green', 'blue']),
  count: z.number().int().min(0).max(9),
});
const messages = [{ role: 'user', content: 'Pick a color and a small number.' }];

test('parse(): zodResponseFormat gives message.parsed as a schema-valid object', async () => {
  const model = await modelId();
  const r = await openai.chat.completions.parse({
    model, messages, response_format: zodResponseFormat(Thing, 'thing'), max_tokens: MAX_TOKENS, temperature: 0,
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(m));
  assert.equal(m.refusal ?? null, null);
  assert.ok(m.parsed, `parsed from ${JSON.stringify(m.content)}`);
  assert.deepEqual(m.parsed, JSON.parse(m.content));
  assert.deepEqual(Thing.parse(m.parsed), m.parsed);
  assert.deepEqual(Object.keys(m.parsed).sort(), ['color', 'count']);

  // Sampled at temperature 1 with several seeds: every answer still fits the schema.
  for (const seed of [1, 2, 3]) {
    const s = await openai.chat.completions.parse({
      model, messages, response_format: zodResponseFormat(Thing, 'thing'), max_tokens: MAX_TOKENS, temperature: 1, seed,
    });
    assert.equal(s.choices[0].finish_reason, 'stop');
    Thing.parse(s.choices[0].message.parsed);
  }
});

test('json_schema response_format streamed: the concatenated deltas parse and fit the schema', async () => {
  const model = await modelId();
  const stream = await openai.chat.completions.create({
    model, messages, response_format: zodResponseFormat(Thing, 'thing'), max_tokens: MAX_TOKENS, temperature: 0,
    stream: true,
  });
  const { content, finishReason } = await collectChatStream(stream);
  assert.equal(finishReason, 'stop');
  Thing.parse(JSON.parse(content));
});

// stories260K left alone never closes a JSON object: it keeps adding members (1,500 tokens
// tried, greedy and five seeds). logit_bias makes '"' the top choice wherever the grammar
// allows it (so strings close at once) and '}' the next (so the object closes after its first
// member): the shortest object, {"":""}, give or take whitespace. Without the json_object
// grammar the same biases give a run of quotes, which does not parse.
test('response_format json_object: the content is a JSON object', async () => {
  const model = await modelId();
  const quote = (await tokenize('a"', false)).at(-1);
  const brace = (await tokenize('a}', false)).at(-1);
  const logit_bias = { [quote]: 100, [brace]: 50 };
  const params = { model, messages: [{ role: 'user', content: 'Describe a cat as JSON.' }], max_tokens: 40, temperature: 0, logit_bias };
  const r = await openai.chat.completions.create({ ...params, response_format: { type: 'json_object' } });
  const content = r.choices[0].message.content;
  assert.equal(r.choices[0].finish_reason, 'stop', `cut off: ${JSON.stringify(content)}`);
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(content); }, content);
  assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), content);

  const free = await openai.chat.completions.create(params);
  assert.throws(() => JSON.parse(free.choices[0].message.content), `unconstrained: ${free.choices[0].message.content}`);
});

test('json_schema with an unsupported keyword ("not"): 400 BadRequestError naming it', async () => {
  const model = await modelId();
  const response_format = {
    type: 'json_schema',
    json_schema: {
      name: 'thing',
      strict: true,
      schema: {
        type: 'object',
        properties: { color: { type: 'string', not: { enum: ['red'] } } },
        required: ['color'],
        additionalProperties: false,
      },
    },
  };
  await assert.rejects(
    openai.chat.completions.create({ model, messages, response_format, max_tokens: 8 }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 400);
      assert.match(e.message, /['"`]not['"`]/);
      return true;
    });
  // The same schema as a tool's parameters is refused the same way.
  await assert.rejects(
    openai.chat.completions.create({
      model, messages, max_tokens: 8, tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'f', parameters: response_format.json_schema.schema } }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && /['"`]not['"`]/.test(e.message));
});
