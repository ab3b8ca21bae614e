// The web UI's context logic (webui/context.js) under node's test runner: the default answer
// length. Run: node --test tests/webui/context.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MAX_DEFAULT_ANSWER_TOKENS, defaultAnswerTokens } from '../../webui/context.js';

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
