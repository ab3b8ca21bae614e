// Gemma 4's chat format end to end, on a tiny random gemma4 (sliding and global layers,
// shared KV, per-layer embeddings, experts) with a Gemma vocabulary whose Gemma 4 markers
// are special tokens and Gemma 4's template in the file (run.mjs writes the model): the
// template renders the system prompt, the tools and thinking on / off; a forced tool call
// (the grammar spells Gemma's `<|tool_call>call:NAME{key:<|"|>text<|"|>,...}<tool_call|>`)
// comes back as tool_calls in Chat Completions (plain and streamed, no markup in content),
// as a function_call item in Responses and as a tool_use block in Anthropic Messages (plain
// and streamed); and a grammar that makes the model write a thought channel then an answer
// shows the parser splitting them into reasoning_content and content, streamed too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { client, urls, applyTemplate, tokenize, collectChatStream } from './lib.mjs';

const openai = client('gemma4');
const claude = new Anthropic({ baseURL: urls.gemma4, apiKey: 'unused', maxRetries: 0, timeout: 20_000 });
const MODEL = 'gemma4-tiny.gguf';

// The city's length bound is what lets a random model finish the call: the grammar closes
// the string after at most 12 characters.
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
const MARKUP = /<\|?(turn|channel|tool_call|tool_response|tool|think|"|)\|?>/;

function checkArgs(json) {
  const args = JSON.parse(json);
  assert.deepEqual(Object.keys(args).sort(), ['city', 'unit'], json);
  assert.ok([...args.city].length >= 1 && [...args.city].length <= 12, json);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit), json);
  return args;
}

function streamedCalls(chunks) {
  let name = '', args = '', starts = 0;
  for (const chunk of chunks)
    for (const c of chunk.choices)
      for (const tc of c.delta?.tool_calls ?? []) {
        if (tc.id) starts++;
        if (tc.function?.name) name += tc.function.name;
        if (tc.function?.arguments) args += tc.function.arguments;
      }
  return { name, args, starts };
}

test('gemma 4 template: system prompt, tools, thinking off and on; markers are special tokens', async () => {
  const off = await applyTemplate(ask, urls.gemma4, { tools });
  assert.ok(off.startsWith('<bos><|turn>system\nAnswer briefly.<|tool>declaration:get_weather{'), off);
  assert.ok(off.includes('description:<|"|>Get the weather.<|"|>'), off);
  assert.ok(off.includes('city:{type:<|"|>STRING<|"|>}'), off);
  assert.ok(off.includes('unit:{enum:[<|"|>celsius<|"|>,<|"|>fahrenheit<|"|>],type:<|"|>STRING<|"|>}'), off);
  assert.ok(off.includes('required:[<|"|>city<|"|>,<|"|>unit<|"|>]'), off);
  assert.ok(off.includes('<tool|><turn|>\n<|turn>user\nWeather in Paris?<turn|>\n'), off);
  // Thinking off (the default): the model turn opens with a closed, empty thought.
  assert.ok(off.endsWith('<|turn>model\n<|channel>thought\n<channel|>'), off);

  const on = await applyTemplate(ask, urls.gemma4, { tools, chat_template_kwargs: { enable_thinking: true } });
  assert.ok(on.startsWith('<bos><|turn>system\n<|think|>'), on);
  assert.ok(on.endsWith('<turn|>\n<|turn>model\n'), on);

  // One token per marker (the ids run.mjs gave them), BOS first.
  const ids = await tokenize('<|turn>model\n<|channel>thought\n<channel|><|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|>', true,
    urls.gemma4);
  assert.equal(ids[0], 2, 'BOS');
  for (const id of [105, 14, 15, 8, 12, 9]) assert.ok(ids.includes(id), `${id} in ${ids}`);
});

test('chat completions: a forced call parses into tool_calls, plain and streamed', async () => {
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const req = {
      model: MODEL, messages: ask, tools, tool_choice, max_tokens: 120, temperature: 0, parallel_tool_calls: false,
    };
    const r = await openai.chat.completions.create(req);
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.reasoning_content ?? null, null, JSON.stringify(choice.message));
    assert.equal(choice.message.tool_calls.length, 1);
    assert.equal(choice.message.tool_calls[0].type, 'function');
    assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
    const args = checkArgs(choice.message.tool_calls[0].function.arguments);

    const s = await collectChatStream(await openai.chat.completions.create({ ...req, stream: true }));
    assert.equal(s.finishReason, 'tool_calls');
    const streamed = streamedCalls(s.chunks);
    assert.equal(streamed.starts, 1);
    assert.equal(streamed.name, 'get_weather');
    assert.deepEqual(checkArgs(streamed.args), args);
    assert.equal(streamed.args, choice.message.tool_calls[0].function.arguments);
    assert.equal(s.content, '', 'no Gemma markup leaks into content');
  }
});

test('chat completions: the thought channel is reasoning_content, the rest content, streamed', async () => {
  // Thinking on; a raw grammar covers the whole output: a thought, then the answer (ended
  // by EOS, which the grammar allows once it is complete).
  const grammar = 'root ::= "<|channel>thought\\n" [a-z]{3,12} "<channel|>" [a-z]{2,12}';
  const req = {
    model: MODEL, messages: ask, max_tokens: 60, temperature: 0, grammar,
    chat_template_kwargs: { enable_thinking: true },
  };
  const r = await openai.chat.completions.create(req);
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(r.choices[0]));
  assert.match(m.reasoning_content ?? '', /^[a-z]{3,12}$/, JSON.stringify(m));
  assert.match(m.content ?? '', /^[a-z]{2,12}$/, JSON.stringify(m));
  let reasoning = '', content = '';
  for await (const chunk of await openai.chat.completions.create({ ...req, stream: true }))
    for (const c of chunk.choices) {
      reasoning += c.delta?.reasoning_content ?? '';
      content += c.delta?.content ?? '';
    }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, m.content);
});

test('responses: a required call is a function_call item', async () => {
  const r = await openai.responses.create({
    model: MODEL, input: 'Weather in Paris?', instructions: 'Answer briefly.',
    tools: [{ type: 'function', name: 'get_weather', parameters: weather, strict: true }],
    tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 120, temperature: 0, store: false,
  });
  assert.equal(r.status, 'completed', JSON.stringify(r.output));
  const call = r.output.find((item) => item.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  checkArgs(call.arguments);
  assert.ok(!MARKUP.test(JSON.stringify(r.output)), JSON.stringify(r.output));
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
  assert.ok(!MARKUP.test(JSON.stringify(r.content)), JSON.stringify(r.content));
  const streamed = await claude.messages.stream(req).finalMessage();
  assert.deepEqual(streamed.content.find((b) => b.type === 'tool_use').input, use.input);
  assert.equal(streamed.stop_reason, 'tool_use');
  assert.ok(!MARKUP.test(JSON.stringify(streamed.content)), JSON.stringify(streamed.content));
});
