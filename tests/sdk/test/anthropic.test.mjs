// The Anthropic Messages API through the official @anthropic-ai/sdk: messages.create (shape,
// usage with cache reads), streaming (the raw event sequence and the SDK's stream() helper
// that accumulates it), a tool_use round trip (a forced tool call whose input the SDK hands
// over as an object, then the tool_result turn), count_tokens, and errors as the SDK's error
// classes (the server's {"type":"error","error":{type,message}} shape is what the SDK reads).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { client, urls, modelId, API_KEY } from './lib.mjs';

// maxRetries 0 for the same reason as the OpenAI client in lib.mjs: a retried 429 / 5xx
// would hide the errors the tests look for. The SDK appends /v1/messages to baseURL.
function anthropic(name = 'main', options = {}) {
  return new Anthropic({ baseURL: urls[name], apiKey: options.apiKey ?? 'unused', maxRetries: 0, timeout: 20_000 });
}

const claude = anthropic();
const messages = [{ role: 'user', content: 'Once upon a time, there was a little girl named Lily. Tell me more.' }];

test('messages.create: Anthropic message shape, stop_reason and usage', async () => {
  const model = await modelId();
  const r = await claude.messages.create({ model, max_tokens: 10, temperature: 0, messages });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.match(r.id, /^msg_/);
  assert.equal(r.model, model);
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.stop_sequence, null);
  assert.equal(r.content.length, 1);
  assert.equal(r.content[0].type, 'text');
  assert.ok(r.content[0].text.length > 0);
  assert.equal(r.usage.output_tokens, 10);
  assert.equal(typeof r.usage.cache_read_input_tokens, 'number');
  const promptTokens = r.usage.input_tokens + r.usage.cache_read_input_tokens;
  // The same prompt again: greedy, so the same text, and most of the prompt from the cache.
  const again = await claude.messages.create({ model, max_tokens: 10, temperature: 0, messages });
  assert.equal(again.content[0].text, r.content[0].text);
  assert.equal(again.usage.input_tokens + again.usage.cache_read_input_tokens, promptTokens);
  assert.ok(again.usage.cache_read_input_tokens > 0, JSON.stringify(again.usage));
});

test('stop_sequences: stop_reason stop_sequence names the sequence', async () => {
  const model = await modelId();
  const ref = await claude.messages.create({ model, max_tokens: 24, temperature: 0, messages });
  // A stop sequence taken from the middle of the greedy answer: the answer ends just before it.
  const text = ref.content[0].text;
  const stop = text.slice(6, 9);
  assert.equal(stop.length, 3, `answer long enough: ${JSON.stringify(text)}`);
  const r = await claude.messages.create({ model, max_tokens: 24, temperature: 0, messages, stop_sequences: [stop] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, stop);
  assert.equal(r.content[0].text, text.slice(0, text.indexOf(stop)));
});

test('streaming: the event sequence, deltas equal to the non-streamed text, the stream() helper', async () => {
  const model = await modelId();
  const body = { model, max_tokens: 16, temperature: 0, messages };
  const ref = await claude.messages.create(body);
  const stream = await claude.messages.create({ ...body, stream: true });
  const types = [];
  let text = '';
  let start;
  let delta;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'message_start') start = ev.message;
    if (ev.type === 'content_block_delta') {
      assert.equal(ev.delta.type, 'text_delta');
      assert.equal(ev.index, 0);
      text += ev.delta.text;
    }
    if (ev.type === 'message_delta') delta = ev;
  }
  // The SDK drops `ping` events (the server sends one after message_start; the raw stream is
  // checked below).
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.ok(!types.includes('ping'));
  assert.equal(types.at(-3), 'content_block_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(start.role, 'assistant');
  assert.deepEqual(start.content, []);
  assert.equal(text, ref.content[0].text);
  assert.equal(delta.delta.stop_reason, 'max_tokens');
  assert.equal(delta.usage.output_tokens, 16);

  // The SDK's helper accumulates the events into the same message.
  const helper = claude.messages.stream(body);
  let helperText = '';
  helper.on('text', (t) => { helperText += t; });
  const final = await helper.finalMessage();
  assert.equal(helperText, ref.content[0].text);
  assert.equal(final.content[0].text, ref.content[0].text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 16);

  // The raw SSE: `event:` lines naming each data's type, the ping right after message_start.
  const raw = await fetch(`${urls.main}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(raw.status, 200);
  assert.match(raw.headers.get('content-type'), /^text\/event-stream/);
  const events = (await raw.text()).trim().split('\n\n').map((frame) => {
    const [eventLine, dataLine] = frame.split('\n');
    const name = eventLine.replace(/^event: /, '');
    assert.equal(JSON.parse(dataLine.replace(/^data: /, '')).type, name);
    return name;
  });
  assert.deepEqual(events.slice(0, 3), ['message_start', 'ping', 'content_block_start']);
  assert.deepEqual(events.slice(3, -3), types.slice(2, -3));
  assert.deepEqual(events.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
});

// A forced tool (tool_choice tool): the grammar makes even stories260K emit a valid call.
const weather = {
  name: 'get_weather',
  description: 'Get the weather forecast for a city.',
  input_schema: {
    type: 'object',
    properties: {
      city: { type: 'string', minLength: 1, maxLength: 12 },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    },
    required: ['city', 'unit'],
    additionalProperties: false,
  },
};

function checkWeatherInput(input) {
  assert.equal(typeof input, 'object');
  assert.deepEqual(Object.keys(input).sort(), ['city', 'unit']);
  assert.equal(typeof input.city, 'string');
  assert.ok([...input.city].length >= 1 && [...input.city].length <= 12, JSON.stringify(input));
  assert.ok(['celsius', 'fahrenheit'].includes(input.unit), JSON.stringify(input));
}

test('tool use round trip: a forced tool_use block, then its tool_result answered in text', async () => {
  const model = await modelId();
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r = await claude.messages.create({
    model, max_tokens: 200, temperature: 0, messages: ask, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
  });
  assert.equal(r.stop_reason, 'tool_use', JSON.stringify(r.content));
  const uses = r.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, JSON.stringify(r.content));
  assert.match(uses[0].id, /^toolu_/);
  assert.equal(uses[0].name, 'get_weather');
  checkWeatherInput(uses[0].input);

  // Streamed, the call arrives as a tool_use block start and input_json_delta fragments that
  // the helper parses into the same input.
  const stream = claude.messages.stream({
    model, max_tokens: 200, temperature: 0, messages: ask, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
  });
  let json = '';
  stream.on('inputJson', (partial) => { json += partial; });
  const streamed = await stream.finalMessage();
  const streamedUse = streamed.content.find((b) => b.type === 'tool_use');
  assert.ok(streamedUse, JSON.stringify(streamed.content));
  assert.deepEqual(streamedUse.input, uses[0].input);
  assert.deepEqual(JSON.parse(json), uses[0].input);
  assert.equal(streamed.stop_reason, 'tool_use');

  // The second turn: the assistant's tool_use and the user's tool_result go back in.
  const next = await claude.messages.create({
    model, max_tokens: 8, temperature: 0, tools: [weather],
    messages: [
      ...ask,
      { role: 'assistant', content: r.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: 'Sunny, 21 degrees' }] },
    ],
  });
  assert.equal(next.type, 'message');
  assert.ok(['max_tokens', 'end_turn'].includes(next.stop_reason), next.stop_reason);
  // The continuation's prompt holds the whole first turn, so it is longer than the first one.
  const firstPrompt = r.usage.input_tokens + r.usage.cache_read_input_tokens;
  assert.ok(next.usage.input_tokens + next.usage.cache_read_input_tokens > firstPrompt);
});

test('messages.countTokens: the prompt tokens a create with the same body uses', async () => {
  const model = await modelId();
  const body = { model, system: 'You are a storyteller.', messages, tools: [weather] };
  const counted = await claude.messages.countTokens(body);
  assert.ok(Number.isInteger(counted.input_tokens) && counted.input_tokens > 0, JSON.stringify(counted));
  const r = await claude.messages.create({ ...body, max_tokens: 2, temperature: 0 });
  assert.equal(r.usage.input_tokens + r.usage.cache_read_input_tokens, counted.input_tokens);
  const shorter = await claude.messages.countTokens({ model, messages });
  assert.ok(shorter.input_tokens < counted.input_tokens);
});

test('errors: the SDK error classes with Anthropic error types', async () => {
  const model = await modelId();
  // max_tokens 0 passes the SDK's types but not the server.
  await assert.rejects(claude.messages.create({ model, max_tokens: 0, messages }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, 400);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    return true;
  });
  await assert.rejects(
    claude.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }),
    Anthropic.BadRequestError);
  // Another model name is served (a preset name in a client); 404 where names are strict.
  const served = await claude.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 4, messages });
  assert.equal(served.model, model);
  await assert.rejects(anthropic('auth', { apiKey: API_KEY }).messages.create({ model: 'no-such-model', max_tokens: 4, messages }), (e) => {
    assert.ok(e instanceof Anthropic.NotFoundError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.error.error.type, 'not_found_error');
    return true;
  });
  // The SDK sends the key as x-api-key.
  await assert.rejects(anthropic('auth', { apiKey: 'wrong' }).messages.create({ model, max_tokens: 4, messages }), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.error.error.type, 'authentication_error');
    return true;
  });
  const ok = await anthropic('auth', { apiKey: API_KEY }).messages.create({ model, max_tokens: 4, messages });
  assert.equal(ok.type, 'message');
  // The server keeps serving after the errors.
  const after = await claude.messages.create({ model, max_tokens: 2, messages });
  assert.equal(after.usage.output_tokens, 2);
});

// The tight server runs one request and queues none: while a long chat stream holds the only
// slot, a Messages request is answered 529 overloaded_error (Anthropic's status for it), which
// the SDK surfaces as an InternalServerError with status 529.
test('529 overloaded_error while the only slot is busy', async () => {
  const tight = client('tight');
  const model = (await tight.models.list()).data[0].id;
  const controller = new AbortController();
  const long = await tight.chat.completions.create(
    { model, messages, max_tokens: 1500, ignore_eos: true, stream: true },
    { signal: controller.signal });
  const first = await long[Symbol.asyncIterator]().next();
  assert.equal(first.done, false);
  try {
    await assert.rejects(anthropic('tight').messages.create({ model, max_tokens: 4, messages }), (e) => {
      assert.ok(e instanceof Anthropic.InternalServerError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 529);
      assert.equal(e.error.error.type, 'overloaded_error');
      return true;
    });
  } finally {
    controller.abort();
  }
  let r = null;
  for (let i = 0; i < 50 && !r; i++) {
    try {
      r = await anthropic('tight').messages.create({ model, max_tokens: 4, messages });
    } catch (e) {
      if (e.status !== 529) throw e;
      await new Promise((res) => setTimeout(res, 50));
    }
  }
  assert.ok(r, 'the slot was not freed after the stream was aborted');
  assert.equal(r.usage.output_tokens, 4);
});
