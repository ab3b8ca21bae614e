// gpt-oss's harmony format end to end, on a tiny random gpt-oss (sinks, windows, experts)
// with the real o200k_harmony tokenizer and pagoda's built-in harmony template (run.mjs
// writes the model): the template renders the system / developer / tools and
// reasoning_effort of the request; a forced tool call (the grammar spells harmony's
// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`) comes
// back as tool_calls in Chat Completions (plain and streamed), as a function_call item in
// Responses and as a tool_use block in Anthropic Messages (plain and streamed); and a
// grammar that makes the model write an analysis message then a final one shows the parser
// splitting them into reasoning_content and content, streamed too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { client, urls, applyTemplate, collectChatStream } from './lib.mjs';

const openai = client('gptoss');
const claude = new Anthropic({ baseURL: urls.gptoss, apiKey: 'unused', maxRetries: 0, timeout: 20_000 });
const MODEL = 'gpt-oss-tiny-harmony.gguf';

const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Get the weather.', parameters: weather } }];
const ask = [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'Weather in Paris?' }];

function checkArgs(json) {
  const args = JSON.parse(json);
  assert.deepEqual(Object.keys(args).sort(), ['city', 'unit'], json);
  assert.ok([...args.city].length >= 1 && [...args.city].length <= 12, json);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit), json);
  return args;
}

test('harmony template: system, developer instructions, tools and reasoning_effort', async () => {
  for (const effort of ['low', 'medium', 'high']) {
    const prompt = await applyTemplate(ask, urls.gptoss, { tools, reasoning_effort: effort });
    assert.ok(prompt.startsWith('<|start|>system<|message|>'), prompt);
    assert.ok(prompt.includes(`\nReasoning: ${effort}\n`), prompt);
    assert.ok(prompt.includes("Calls to these tools must go to the commentary channel: 'functions'."), prompt);
    assert.ok(prompt.includes('<|start|>developer<|message|># Instructions\n\nAnswer briefly.\n\n# Tools'), prompt);
    assert.ok(prompt.includes('type get_weather = (_: {\ncity: string,\nunit: "celsius" | "fahrenheit",\n}) => any;'), prompt);
    assert.ok(prompt.endsWith('<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant'), prompt);
  }
});

test('chat completions: a forced call parses into tool_calls, plain and streamed', async () => {
  const req = {
    model: MODEL, messages: ask, tools, max_tokens: 120, temperature: 0, parallel_tool_calls: false,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, reasoning_effort: 'low',
  };
  const r = await openai.chat.completions.create(req);
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1);
  assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
  const args = checkArgs(choice.message.tool_calls[0].function.arguments);

  const s = await collectChatStream(await openai.chat.completions.create({ ...req, stream: true }));
  assert.equal(s.finishReason, 'tool_calls');
  let name = '', streamed = '';
  for (const chunk of s.chunks)
    for (const c of chunk.choices)
      for (const tc of c.delta?.tool_calls ?? []) {
        if (tc.function?.name) name += tc.function.name;
        if (tc.function?.arguments) streamed += tc.function.arguments;
      }
  assert.equal(name, 'get_weather');
  assert.deepEqual(checkArgs(streamed), args);
  assert.equal(s.content, '', 'no harmony markup leaks into content');
});

test('chat completions: the analysis channel is reasoning_content, final is content, streamed', async () => {
  // A raw grammar covers the whole output: an analysis message, then a final one (ended by
  // EOS, which the grammar allows once it is complete: <|return|>).
  const grammar = 'root ::= "<|channel|>analysis<|message|>" [a-z]{3,12} "<|end|><|start|>assistant<|channel|>final<|message|>" [a-z]{2,12}';
  const req = { model: MODEL, messages: ask, max_tokens: 60, temperature: 0, grammar };
  const r = await openai.chat.completions.create(req);
  const m = r.choices[0].message;
  assert.match(m.reasoning_content ?? '', /^[a-z]{3,12}$/, JSON.stringify(m));
  assert.match(m.content ?? '', /^[a-z]{2,12}$/, JSON.stringify(m));
  const chunks = [];
  let reasoning = '', content = '';
  for await (const chunk of await openai.chat.completions.create({ ...req, stream: true })) {
    chunks.push(chunk);
    for (const c of chunk.choices) {
      reasoning += c.delta?.reasoning_content ?? '';
      content += c.delta?.content ?? '';
    }
  }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, m.content);
});

test('responses: a required call is a function_call item', async () => {
  const r = await openai.responses.create({
    model: MODEL, input: 'Weather in Paris?', instructions: 'Answer briefly.',
    tools: [{ type: 'function', name: 'get_weather', parameters: weather, strict: true }],
    tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 120, temperature: 0,
    reasoning: { effort: 'low' }, store: false,
  });
  assert.equal(r.status, 'completed', JSON.stringify(r.output));
  const call = r.output.find((item) => item.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  checkArgs(call.arguments);
  assert.ok(!r.output.some((item) => item.type === 'message' && JSON.stringify(item).includes('<|')), JSON.stringify(r.output));
});

test('anthropic messages: a forced tool is a tool_use block, plain and streamed', async () => {
  const req = {
    model: MODEL, max_tokens: 120, temperature: 0, system: 'Answer briefly.',
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [{ name: 'get_weather', description: 'Get the weather.', input_schema: weather }],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
  };
  const r = await claude.messages.create(req);
  assert.equal(r.stop_reason, 'tool_use', JSON.stringify(r.content));
  const use = r.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(r.content));
  assert.equal(use.name, 'get_weather');
  checkArgs(JSON.stringify(use.input));
  const streamed = await claude.messages.stream(req).finalMessage();
  assert.deepEqual(streamed.content.find((b) => b.type === 'tool_use').input, use.input);
  assert.equal(streamed.stop_reason, 'tool_use');
});
