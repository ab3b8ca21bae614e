// The composer's image attachments: the picker button and its file input, images pasted
// into the prompt, the row of thumbnails waiting to be sent (each with its remove button)
// and the note that says which files were refused. Which files are taken and how a
// message carries them is attachments.js; app.js takes the images when the message is sent.
import { MAX_IMAGES, isAcceptedImage } from './attachments.js';

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error || new Error('could not read the file'));
    reader.readAsDataURL(file);
  });
}

export class AttachmentPicker {
  // `composer`: the form (the refusal note goes in it), `box`: the thumbnails' row,
  // `button` / `input`: the picker, `prompt`: the textarea images are pasted into.
  constructor({ composer, box, button, input, prompt }) {
    this.composer = composer;
    this.box = box;
    this.images = [];  // images for the next message: [{url, name, type}] (see attachments.js)
    button.addEventListener('click', () => input.click());
    input.addEventListener('change', (e) => {
      const files = [...e.target.files];
      e.target.value = '';  // the same file can be picked again
      this.add(files);
    });
    prompt.addEventListener('paste', (e) => {
      const files = [...(e.clipboardData?.items || [])].filter((i) => i.kind === 'file' && i.type.startsWith('image/'))
        .map((i) => i.getAsFile()).filter(Boolean);
      if (files.length === 0) return;  // text: pasted as usual
      e.preventDefault();
      this.add(files);
    });
  }

  get count() {
    return this.images.length;
  }

  // The images waiting, for the message being sent: the row empties.
  take() {
    const images = this.images;
    this.images = [];
    this.error('');
    this.render();
    return images;
  }

  error(text) {
    let e = this.composer.querySelector('.attach-error');
    if (!text) return e?.remove();
    if (!e) {
      e = document.createElement('div');
      e.className = 'attach-error';
      e.dataset.testid = 'attach-error';
      e.setAttribute('role', 'alert');
      this.box.after(e);
    }
    e.textContent = text;
  }

  // Reads image files (from the picker or a paste) into the pending attachments; other files
  // are refused with a note (the server decodes PNG, JPEG and WebP).
  async add(files) {
    const refused = [];
    for (const file of files) {
      if (!isAcceptedImage(file)) { refused.push(`${file.name || 'file'}: not a PNG, JPEG or WebP image`); continue; }
      if (this.images.length >= MAX_IMAGES) { refused.push(`at most ${MAX_IMAGES} images per message`); break; }
      try {
        const url = await readAsDataUrl(file);
        this.images.push({ url, name: file.name || 'pasted image', type: file.type });
      } catch (e) {
        refused.push(`${file.name || 'file'}: ${e.message}`);
      }
    }
    this.error(refused.join('; '));
    this.render();
  }

  render() {
    const box = this.box;
    box.hidden = this.images.length === 0;
    box.replaceChildren(...this.images.map((a, i) => {
      const item = document.createElement('div');
      item.className = 'attachment';
      item.dataset.testid = 'attachment';
      const img = document.createElement('img');
      img.src = a.url;
      img.alt = a.name;
      img.title = a.name;
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = '×';
      remove.title = `Remove ${a.name}`;
      remove.setAttribute('aria-label', `Remove ${a.name}`);
      remove.dataset.testid = 'attachment-remove';
      remove.addEventListener('click', () => {
        this.images.splice(i, 1);
        this.error('');
        this.render();
      });
      item.append(img, remove);
      return item;
    }));
  }
}
