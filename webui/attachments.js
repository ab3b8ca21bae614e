// Images in chat: what the page attaches to a user message and how it is sent. A user
// message keeps its text in `content` and its images in `images: [{url, name, type}]`
// (`url` a data: URL, read by FileReader); the request carries them as OpenAI Chat
// Completions content parts (text first, then one image_url part per image). The server
// takes them when it was started with --mmproj (docs/vision.md); otherwise it answers 400
// and the page shows that message. Pure functions, tested under node (attachments.test.mjs).

// The formats pagoda decodes (docs/vision.md), as the file picker's accept list.
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'];
// The server's --max-images default: more per message would be refused anyway.
export const MAX_IMAGES = 8;

export function isAcceptedImage(file) {
  return Boolean(file) && IMAGE_TYPES.includes(String(file.type).toLowerCase());
}

// The images of a message that still hold their data (a stored conversation may have lost
// it: see stripImageData).
export function imagesWithData(images) {
  return Array.isArray(images) ? images.filter((i) => typeof i?.url === 'string' && i.url.startsWith('data:')) : [];
}

// A user message's `content` for the request: the text alone when there are no images (as
// before), else an array of parts: the text (when there is any), then the images in order.
export function userContent(text, images) {
  const withData = imagesWithData(images);
  if (withData.length === 0) return text || '';
  const parts = [];
  if (text && text.trim()) parts.push({ type: 'text', text });
  for (const i of withData) parts.push({ type: 'image_url', image_url: { url: i.url } });
  return parts;
}

// Conversations as they can be stored when the full ones do not fit in localStorage: the
// images keep their name and type but lose their data (`url` gone, `dropped: true`). The
// list and its messages are copies; the page keeps the images in memory.
export function stripImageData(conversations) {
  return conversations.map((c) => (c.messages.some((m) => m.images?.length)
    ? { ...c, messages: c.messages.map((m) => (m.images?.length
      ? { ...m, images: m.images.map(({ name, type }) => ({ name, type, dropped: true })) }
      : m)) }
    : c));
}

// A short title for a conversation from its first message.
export function titleOf(text, images) {
  const t = (text || '').trim().replace(/\s+/g, ' ').slice(0, 48);
  if (t) return t;
  const n = Array.isArray(images) ? images.length : 0;
  return n ? (n === 1 ? 'Image' : `${n} images`) : 'New chat';
}
