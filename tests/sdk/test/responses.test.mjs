// The Responses API through the SDK's client.responses: create (the SDK's output_text
// convenience), streaming events and the stream() helper, previous_response_id with the
// store (retrieve, delete), parse() with a zod text format, function calls and their
// outputs, and errors as the SDK's error classes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { client, modelId } from './lib.mjs';

const openai = client();
const input = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';

test('responses.create: shape, output_text and usage', async () => {
  const model = await modelId();
  const r = await openai.responses.create({ model, input, max_output_tokens: 10, temperature: 0, store: false });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, model);
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.output_text, r.output[0].content[0].text);
  assert.equal(r.usage.output_tokens, 10);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 10);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  const again = await openai.responses.create({ model, input, max_output_tokens: 10, temperature: 0, store: false });
  assert.equal(again.output_text, r.output_text);
});

test('responses streaming: ordered events whose deltas are the non-streamed text', async () => {
  const model = await modelId();
  const body = { model, input: 'Tell me a story.', max_output_tokens: 16, temperature: 0, store: false };
  const ref = await openai.responses.create(body);
  const stream = await openai.responses.create({ ...body, stream: true });
  const types = [];
  let text = '';
  let last = -1;
  let final;
  for await (const ev of stream) {
    assert.ok(ev.sequence_number > last, `sequence_number ${ev.sequence_number} after ${last}`);
    last = ev.sequence_number;
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.incomplete' || ev.type === 'response.completed') final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.incomplete');
  assert.ok(types.includes('response.output_item.added'));
  assert.ok(types.includes('response.content_part.done'));
  assert.equal(text, ref.output_text);
  assert.equal(final.output[0].content[0].text, ref.output_text);

  // The SDK's stream() helper accumulates the same response.
  const helper = openai.responses.stream(body);
  let helperText = '';
  helper.on('response.output_text.delta', (ev) => { helperText += ev.delta; });
  const done = await helper.finalResponse();
  assert.equal(helperText, ref.output_text);
  assert.equal(done.output_text, ref.output_text);
});

test('previous_response_id continues from the store and the prefix cache; retrieve and delete', async () => {
  const model = await modelId();
  const first = await openai.responses.create({ model, input, max_output_tokens: 8, temperature: 0 });
  const got = await openai.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  assert.equal(got.output_text, first.output_text);
  const second = await openai.responses.create({
    model, input: 'What did Lily do next?', previous_response_id: first.id, max_output_tokens: 6, temperature: 0,
  });
  assert.equal(second.previous_response_id, first.id);
  assert.ok(second.usage.input_tokens > first.usage.total_tokens);
  assert.ok(second.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
  await openai.responses.delete(first.id);
  await assert.rejects(openai.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(
    openai.responses.create({ model, input: 'x', previous_response_id: first.id }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'previous_response_id');
});

test('responses.parse: a zod text format gives output_parsed that fits the schema', async () => {
  const model = await modelId();
  const Thing = z.object({ color: z.enum(['red', 'green', 'blue']), count: z.number().int().min(0).max(9) });
  const r = await openai.responses.parse({
    model, input: 'Pick a color and a small number.', text: { format: zodTextFormat(Thing, 'thing') },
    max_output_tokens: 64, temperature: 0, store: false,
  });
  assert.equal(r.status, 'completed', JSON.stringify(r.output));
  assert.ok(['red', 'green', 'blue'].includes(r.output_parsed.color));
  assert.ok(Number.isInteger(r.output_parsed.count));
});

test('function tools: a required call comes back as a function_call item, its output continues', async () => {
  const model = await modelId();
  const tools = [{
    type: 'function', name: 'get_time', strict: true,
    parameters: { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'], additionalProperties: false },
  }];
  const r = await openai.responses.create({
    model, input: 'What time is it?', tools, tool_choice: 'required', parallel_tool_calls: false,
    max_output_tokens: 80, temperature: 0,
  });
  assert.equal(r.status, 'completed');
  const call = r.output.find((item) => item.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_time');
  assert.ok(['UTC', 'CET'].includes(JSON.parse(call.arguments).tz));
  const next = await openai.responses.create({
    model, previous_response_id: r.id, tools, max_output_tokens: 6, temperature: 0,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '12:00' }],
  });
  assert.equal(next.output[0].type, 'message');
});

test('responses errors: bad requests are BadRequestError naming the field', async () => {
  const model = await modelId();
  await assert.rejects(openai.responses.create({ model, input: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  await assert.rejects(openai.responses.create({ model, input: 'hi', tools: [{ type: 'web_search' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools');
  await assert.rejects(openai.responses.create({ model, input: 'hi', max_output_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_output_tokens');
  await assert.rejects(openai.responses.retrieve('resp_nope'), (e) => e instanceof OpenAI.NotFoundError);
});
