// Tool calls through the SDK: tool_choice "required" and a named tool force a call whose
// arguments are valid against the tool's parameters (the server constrains decoding with a
// grammar, so even stories260K, which has never seen a tool, produces a valid call), streamed
// as OpenAI tool-call deltas, then a second turn with the call and its result.
//
// Parameters are bounded (enums, a string of at most 12 characters, an integer 1..7) and
// parallel_tool_calls is false, so a tiny model reaches the end of its one call well within
// max_tokens (with parallel calls allowed, stories260K keeps appending calls until the limit).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, modelId, collectChatStream } from './lib.mjs';

const openai = client();
const MAX_TOKENS = 120;

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the weather forecast for a city.',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', minLength: 1, maxLength: 12 },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
      },
      required: ['city', 'unit', 'days'],
      additionalProperties: false,
    },
  },
};
const timeTool = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'Get the local time in a time zone.',
    parameters: {
      type: 'object',
      properties: { zone: { type: 'string', enum: ['UTC', 'CET', 'JST'] } },
      required: ['zone'],
      additionalProperties: false,
    },
  },
};
const tools = [weatherTool, timeTool];
const messages = [{ role: 'user', content: 'What is the weather in Paris for the next 3 days?' }];
const named = { type: 'function', function: { name: 'get_weather' } };

// Checks parsed arguments against a parameters schema by hand (the subset used above:
// object with properties / required / additionalProperties false; string enum / minLength /
// maxLength; integer minimum / maximum), returning the object.
function validateArguments(argumentsJson, schema) {
  assert.equal(typeof argumentsJson, 'string', 'function.arguments is a JSON string');
  let args;
  assert.doesNotThrow(() => { args = JSON.parse(argumentsJson); }, `arguments parse: ${argumentsJson}`);
  assert.ok(args !== null && typeof args === 'object' && !Array.isArray(args), `arguments is an object: ${argumentsJson}`);
  for (const key of schema.required) assert.ok(key in args, `required "${key}" in ${argumentsJson}`);
  for (const [key, value] of Object.entries(args)) {
    const prop = schema.properties[key];
    assert.ok(prop, `no property "${key}" in the schema (additionalProperties false): ${argumentsJson}`);
    if (prop.type === 'string') {
      assert.equal(typeof value, 'string', `${key} is a string`);
      if (prop.enum) assert.ok(prop.enum.includes(value), `${key}=${JSON.stringify(value)} in ${prop.enum}`);
      // Lengths count code points, as JSON Schema does.
      if (prop.minLength !== undefined) assert.ok([...value].length >= prop.minLength, `${key} minLength`);
      if (prop.maxLength !== undefined) assert.ok([...value].length <= prop.maxLength, `${key} maxLength`);
    } else if (prop.type === 'integer') {
      assert.ok(Number.isInteger(value), `${key}=${JSON.stringify(value)} is an integer`);
      assert.ok(value >= prop.minimum && value <= prop.maximum, `${key}=${value} in ${prop.minimum}..${prop.maximum}`);
    }
  }
  return args;
}

function checkToolCallMessage(choice, allowedTools) {
  assert.equal(choice.finish_reason, 'tool_calls');
  const m = choice.message;
  assert.equal(m.role, 'assistant');
  assert.equal(m.content, null);
  // parallel_tool_calls: false -> exactly one call.
  assert.ok(Array.isArray(m.tool_calls) && m.tool_calls.length === 1, JSON.stringify(m));
  const ids = new Set();
  for (const call of m.tool_calls) {
    assert.equal(call.type, 'function');
    assert.equal(typeof call.id, 'string');
    assert.ok(call.id.length > 0);
    ids.add(call.id);
    const tool = allowedTools.find((t) => t.function.name === call.function.name);
    assert.ok(tool, `called ${call.function.name}, allowed ${allowedTools.map((t) => t.function.name)}`);
    validateArguments(call.function.arguments, tool.function.parameters);
  }
  assert.equal(ids.size, m.tool_calls.length, 'tool call ids are distinct');
  return m.tool_calls;
}

test('tools: named tool_choice forces a valid get_weather call (non-streamed)', async () => {
  const model = await modelId();
  const r = await openai.chat.completions.create({
    model, messages, tools, tool_choice: named, parallel_tool_calls: false, max_tokens: MAX_TOKENS, temperature: 0,
  });
  const calls = checkToolCallMessage(r.choices[0], [weatherTool]);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.ok(r.usage.completion_tokens <= MAX_TOKENS);
});

test('tools: tool_choice "required" calls one of the offered tools', async () => {
  const model = await modelId();
  const r = await openai.chat.completions.create({
    model, messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: MAX_TOKENS, temperature: 0,
  });
  checkToolCallMessage(r.choices[0], tools);
  // With the weather tool alone, "required" must call it.
  const one = await openai.chat.completions.create({
    model, messages, tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false, max_tokens: MAX_TOKENS, temperature: 0,
  });
  assert.equal(checkToolCallMessage(one.choices[0], [weatherTool])[0].function.name, 'get_weather');
});

test('tools: streamed call deltas (first with index/id/type/name, then argument fragments) rebuild the call', async () => {
  const model = await modelId();
  const params = {
    model, messages, tools, tool_choice: named, parallel_tool_calls: false, max_tokens: MAX_TOKENS, temperature: 0,
  };
  const ref = await openai.chat.completions.create(params);
  const refCalls = checkToolCallMessage(ref.choices[0], [weatherTool]);

  const stream = await openai.chat.completions.create({ ...params, stream: true });
  const { chunks, content, finishReason } = await collectChatStream(stream);
  assert.equal(content, '', 'no content deltas alongside a forced tool call');
  assert.equal(finishReason, 'tool_calls');
  const calls = [];  // rebuilt by index, as the SDK's accumulator does
  for (const chunk of chunks) {
    for (const delta of chunk.choices.flatMap((c) => c.delta?.tool_calls ?? [])) {
      assert.equal(typeof delta.index, 'number');
      if (!calls[delta.index]) {
        // The first delta of a call introduces it.
        assert.equal(typeof delta.id, 'string', JSON.stringify(delta));
        assert.equal(delta.type, 'function');
        assert.equal(typeof delta.function?.name, 'string');
        calls[delta.index] = { id: delta.id, name: delta.function.name, arguments: delta.function.arguments ?? '' };
      } else {
        // Later deltas carry argument fragments only.
        assert.equal(delta.id, undefined, JSON.stringify(delta));
        assert.equal(delta.function?.name, undefined, JSON.stringify(delta));
        calls[delta.index].arguments += delta.function?.arguments ?? '';
      }
    }
  }
  assert.equal(calls.length, refCalls.length);
  calls.forEach((call, i) => {
    assert.equal(call.name, refCalls[i].function.name);
    assert.deepEqual(validateArguments(call.arguments, weatherTool.function.parameters),
      JSON.parse(refCalls[i].function.arguments));
  });

  // The SDK's own accumulation (stream helper) gives the same message.
  const runner = openai.chat.completions.stream(params);
  const final = await runner.finalChatCompletion();
  const finalCalls = checkToolCallMessage(final.choices[0], [weatherTool]);
  assert.equal(finalCalls.length, refCalls.length);
  finalCalls.forEach((call, i) => {
    assert.equal(call.function.name, refCalls[i].function.name);
    assert.deepEqual(JSON.parse(call.function.arguments), JSON.parse(refCalls[i].function.arguments));
  });
});

test('tools: a second turn with the assistant tool_calls and a tool result reuses the cached prefix', async () => {
  const model = await modelId();
  const first = await openai.chat.completions.create({
    model, messages, tools, tool_choice: named, parallel_tool_calls: false, max_tokens: MAX_TOKENS, temperature: 0,
  });
  const calls = checkToolCallMessage(first.choices[0], [weatherTool]);
  const followUp = [
    ...messages,
    { role: 'assistant', content: null, tool_calls: calls },
    ...calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: JSON.stringify({ forecast: 'sunny', high: 21 }) })),
  ];
  const second = await openai.chat.completions.create({ model, messages: followUp, tools, max_tokens: 16, temperature: 0 });
  const choice = second.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(choice.finish_reason), choice.finish_reason);
  // At least the first turn's rendered prompt (tools, system part, user message) is reused.
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
});
