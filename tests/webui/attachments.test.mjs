// Images in chat (webui/attachments.js) under node's test runner: which files are taken, the
// content parts a user message is sent as, and what is stored when the images do not fit.
// Run: node --test tests/webui/attachments.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  IMAGE_TYPES, MAX_IMAGES, imagesWithData, isAcceptedImage, stripImageData, titleOf, userContent,
} from '../../webui/attachments.js';

const PNG = 'data:image/png;base64,iVBORw0KGgo=';
const JPEG = 'data:image/jpeg;base64,/9j/4AAQ';

test('PNG, JPEG and WebP are taken; other files are not', () => {
  assert.deepEqual(IMAGE_TYPES, ['image/png', 'image/jpeg', 'image/webp']);
  assert.equal(MAX_IMAGES, 8);
  for (const type of ['image/png', 'image/jpeg', 'image/webp', 'IMAGE/PNG']) assert.equal(isAcceptedImage({ type }), true, type);
  for (const type of ['image/gif', 'image/svg+xml', 'text/plain', '', undefined]) assert.equal(isAcceptedImage({ type }), false, String(type));
  assert.equal(isAcceptedImage(null), false);
});

test('a message without images is sent as its text, as before', () => {
  assert.equal(userContent('hello', undefined), 'hello');
  assert.equal(userContent('hello', []), 'hello');
  assert.equal(userContent('', []), '');
  assert.equal(userContent(undefined, undefined), '');
});

test('a message with images is sent as a text part, then one image_url part per image', () => {
  assert.deepEqual(userContent('What is this?', [{ url: PNG, name: 'a.png', type: 'image/png' }, { url: JPEG }]), [
    { type: 'text', text: 'What is this?' },
    { type: 'image_url', image_url: { url: PNG } },
    { type: 'image_url', image_url: { url: JPEG } },
  ]);
});

test('an image alone is sent without an empty text part', () => {
  assert.deepEqual(userContent('', [{ url: PNG }]), [{ type: 'image_url', image_url: { url: PNG } }]);
  assert.deepEqual(userContent('  \n', [{ url: PNG }]), [{ type: 'image_url', image_url: { url: PNG } }]);
});

test('images that lost their data (or never were data: URLs) are not sent', () => {
  const images = [{ name: 'a.png', dropped: true }, { url: 'https://example.com/x.png' }, { url: PNG }, null];
  assert.deepEqual(imagesWithData(images), [{ url: PNG }]);
  assert.deepEqual(userContent('hi', images), [{ type: 'text', text: 'hi' }, { type: 'image_url', image_url: { url: PNG } }]);
  assert.equal(userContent('hi', [{ name: 'a.png', dropped: true }]), 'hi');
  assert.deepEqual(imagesWithData('nope'), []);
});

test('stripping image data for storage copies: the conversations in memory keep their images', () => {
  const image = { url: PNG, name: 'a.png', type: 'image/png' };
  const user = { role: 'user', content: 'look', images: [image] };
  const answer = { role: 'assistant', content: 'a cat' };
  const withImage = { id: 'c1', messages: [user, answer] };
  const plain = { id: 'c2', messages: [{ role: 'user', content: 'hi' }] };
  const stored = stripImageData([withImage, plain]);
  assert.deepEqual(stored[0].messages[0], { role: 'user', content: 'look', images: [{ name: 'a.png', type: 'image/png', dropped: true }] });
  assert.equal(stored[0].messages[1], answer);
  assert.equal(stored[1], plain);
  assert.equal(user.images[0], image);
  assert.equal(image.url, PNG);
  assert.ok(!JSON.stringify(stored).includes('base64'));
});

test('a conversation opened with an image alone is titled after it', () => {
  assert.equal(titleOf('  What   is this?  ', [{ url: PNG }]), 'What is this?');
  assert.equal(titleOf('', [{ url: PNG }]), 'Image');
  assert.equal(titleOf('', [{ url: PNG }, { url: JPEG }]), '2 images');
  assert.equal(titleOf('x'.repeat(60), []), 'x'.repeat(48));
});

test('a localStorage too small for the images stores the conversations without their data', async () => {
  const items = new Map();
  const limit = 300;  // characters: the conversations fit, their image does not
  globalThis.localStorage = {
    getItem: (k) => (items.has(k) ? items.get(k) : null),
    setItem: (k, v) => {
      if (String(v).length > limit) throw new DOMException('quota', 'QuotaExceededError');
      items.set(k, String(v));
    },
    removeItem: (k) => items.delete(k),
  };
  try {
    const store = await import('../../webui/store.js');
    const big = { url: `data:image/png;base64,${'A'.repeat(1000)}`, name: 'big.png', type: 'image/png' };
    const c1 = { id: 'c1', messages: [{ role: 'user', content: 'look', images: [big] }] };
    const c2 = { id: 'c2', messages: [{ role: 'user', content: 'hi' }] };
    store.saveConversations([c1, c2]);
    const loaded = store.loadConversations();
    assert.deepEqual(loaded.map((c) => c.id), ['c1', 'c2'], 'no conversation was dropped for the image');
    assert.deepEqual(loaded[0].messages[0].images, [{ name: 'big.png', type: 'image/png', dropped: true }]);
    assert.equal(c1.messages[0].images[0], big, 'the image in memory kept its data');
    // Small enough: stored whole.
    const small = { url: PNG, name: 'a.png', type: 'image/png' };
    store.saveConversations([{ id: 'c3', messages: [{ role: 'user', content: '', images: [small] }] }]);
    assert.deepEqual(store.loadConversations()[0].messages[0].images, [small]);
  } finally {
    delete globalThis.localStorage;
  }
});
