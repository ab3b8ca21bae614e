// The web UI's context logic (webui/context.js) under node's test runner: the default answer
// length, what the context meter shows, a refusal for a full context, and which turns to drop.
// Run: node --test tests/webui/context.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  MAX_DEFAULT_ANSWER_TOKENS, defaultAnswerTokens, fewestTurnsToDrop, isContextFull, meterReading, turnStarts, usedTokensOf,
} from '../../webui/context.js';

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

test('a 400 that speaks of the context is a full context', () => {
  assert.ok(isContextFull(400, 'the prompt has 140 tokens but the context is 128 tokens (at least one must be left to generate)'));
  assert.ok(isContextFull(400, 'the request exceeds the available context size, try increasing it'));
  assert.ok(isContextFull(400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."));
  assert.ok(!isContextFull(400, 'temperature must be >= 0'));
  assert.ok(!isContextFull(400, 'a sequence of 900 tokens needs 29 KV blocks but the whole KV budget is 8 blocks'));
  assert.ok(!isContextFull(500, 'the context is 128 tokens'));
  assert.ok(!isContextFull(429, 'context'));
  assert.ok(!isContextFull(400, undefined));
  assert.ok(!isContextFull(400, { message: 'context' }));
});

test('turns start at user messages; what comes before the first is a turn too', () => {
  const u = (c) => ({ role: 'user', content: c });
  const a = (c) => ({ role: 'assistant', content: c });
  assert.deepEqual(turnStarts([]), []);
  assert.deepEqual(turnStarts([u('1'), a('1'), u('2'), a('2'), u('3')]), [0, 2, 4]);
  assert.deepEqual(turnStarts([u('1'), a('1a'), a('1b'), u('2'), u('3'), a('3')]), [0, 3, 4]);
  assert.deepEqual(turnStarts([a('greeting'), u('1'), a('1')]), [0, 1]);
  assert.deepEqual(turnStarts([null, 'x', u('1')]), [0, 2]);
  assert.deepEqual(turnStarts(null), []);
  assert.deepEqual(turnStarts('text'), []);
});

// A prompt of `sizes` turns against `room` tokens: fits(k) when the turns left fit. Counts the calls.
function oracle(sizes, room) {
  const calls = [];
  const fits = async (k) => {
    calls.push(k);
    return sizes.slice(k).reduce((a, b) => a + b, 0) <= room;
  };
  return { fits, calls };
}

test('the fewest oldest turns to drop, found by binary search', async () => {
  for (const [sizes, room, want] of [
    [[10, 10, 10, 10], 35, 1],
    [[10, 10, 10, 10], 20, 2],
    [[10, 10, 10, 10], 0, 4],
    [[50, 1, 1, 1], 3, 1],
    [[1, 1, 1, 50], 50, 3],
    [[5], 0, 1],
  ]) {
    const { fits, calls } = oracle(sizes, room);
    assert.equal(await fewestTurnsToDrop(sizes.length, fits), want, `${sizes} in ${room}`);
    assert.ok(calls.length <= 1 + Math.ceil(Math.log2(sizes.length + 1)), `${calls.length} calls`);
    assert.ok(calls.every((k) => k >= 1 && k <= sizes.length), `asked about ${calls}`);
  }
  const many = Array.from({ length: 1000 }, (_, i) => i % 7 + 1);
  const { fits, calls } = oracle(many, 100);
  const k = await fewestTurnsToDrop(many.length, fits);
  assert.ok(many.slice(k).reduce((a, b) => a + b, 0) <= 100 && many.slice(k - 1).reduce((a, b) => a + b, 0) > 100);
  assert.ok(calls.length <= 11, `${calls.length} calls for 1,000 turns`);
});

test('when nothing can be dropped, or dropping everything is not enough: null', async () => {
  assert.equal(await fewestTurnsToDrop(0, async () => true), null);
  assert.equal(await fewestTurnsToDrop(3, oracle([1, 1, 1], -1).fits), null);
  assert.equal(await fewestTurnsToDrop(NaN, async () => true), null);
  assert.equal(await fewestTurnsToDrop(2, async () => true, 0), 0);  // min 0: nothing needs to go
  await assert.rejects(fewestTurnsToDrop(2, async () => { throw new Error('offline'); }), /offline/);
});
