// The web UI's context logic (webui/context.js) under node's test runner: the default answer
// length and what the context meter shows. Run: node --test tests/webui/context.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MAX_DEFAULT_ANSWER_TOKENS, defaultAnswerTokens, meterReading, usedTokensOf } from '../../webui/context.js';

test('the default answer length is a quarter of the context, at most 1,024 tokens', () => {
  assert.equal(MAX_DEFAULT_ANSWER_TOKENS, 1024);
  assert.equal(defaultAnswerTokens(128), 32);
  assert.equal(defaultAnswerTokens(2048), 512);
  assert.equal(defaultAnswerTokens(4095), 1023);
  assert.equal(defaultAnswerTokens(4096), 1024);
  assert.equal(defaultAnswerTokens(131072), 1024);
  assert.equal(defaultAnswerTokens(3), 1);
  assert.equal(defaultAnswerTokens(1), 1);
});

test('an unknown or nonsensical context gives 1,024 tokens', () => {
  for (const bad of [null, undefined, 0, -5, 12.5, NaN, Infinity, '2048', {}, 2 ** 60]) {
    assert.equal(defaultAnswerTokens(bad), 1024, String(bad));
  }
});

const answer = (stats, extra = {}) => ({ role: 'assistant', content: 'x', stats, ...extra });

test('the conversation uses the last exchange\'s prompt plus its answer', () => {
  assert.equal(usedTokensOf([{ role: 'user', content: 'a' }, answer({ prompt: 80, cached: 3, generated: 32 })]), 112);
  assert.equal(usedTokensOf([answer({ prompt: 0, generated: 0 })]), 0);
});

test('without exact usage of a last answer the count is not known', () => {
  const user = { role: 'user', content: 'a' };
  for (const messages of [
    [], [user], [answer({ prompt: 80, generated: 32 }), user],       // ends in a user message (edited)
    [user, answer({ generated: 12, approx: true })],                 // stopped: delta count, no prompt
    [user, answer({ prompt: 80, generated: 12, approx: true })],
    [user, answer({}, { error: 'the prompt has 140 tokens but the context is 128 tokens' })],
    [user, answer({ prompt: 80, generated: 32 }, { error: 'boom' })],
    [user, answer(undefined)], [user, answer({ prompt: '80', generated: 32 })], [user, answer({ prompt: -1, generated: 2 })],
    [user, answer({ prompt: 1.5, generated: 2 })], [null], null, undefined, 'text', {},
  ]) {
    assert.equal(usedTokensOf(messages), null, JSON.stringify(messages));
  }
});

test('the meter reads used / context with a level', () => {
  assert.deepEqual(meterReading(1234, 2048, 512, 'en-US'), { text: '1,234 / 2,048 tokens', level: 'ok', fraction: 1234 / 2048 });
  assert.equal(meterReading(1600, 2048, 512, 'en-US').level, 'low');
  assert.equal(meterReading(1536, 2048, 512, 'en-US').level, 'ok');
  assert.equal(meterReading(2048, 2048, 512, 'en-US').level, 'full');
  assert.deepEqual(meterReading(130, 128, 32, 'en-US'), { text: '130 / 128 tokens', level: 'full', fraction: 1 });
  assert.equal(meterReading(127, 128, 0, 'en-US').level, 'ok');
  assert.deepEqual(meterReading(0, 128, 32, 'en-US'), { text: '0 / 128 tokens', level: 'ok', fraction: 0 });
});

test('the meter without a count or a context', () => {
  assert.deepEqual(meterReading(null, 2048, 512, 'en-US'), { text: '? / 2,048 tokens', level: 'unknown', fraction: 0 });
  assert.deepEqual(meterReading(NaN, null, 0, 'en-US'), { text: '? tokens', level: 'unknown', fraction: 0 });
  assert.deepEqual(meterReading(1234, null, 512, 'en-US'), { text: '1,234 tokens', level: 'ok', fraction: 0 });
  assert.deepEqual(meterReading(5, 0, 0, 'en-US'), { text: '5 tokens', level: 'ok', fraction: 0 });
  assert.equal(meterReading(-3, 128, 0, 'en-US').level, 'unknown');
});
