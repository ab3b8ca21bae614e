// Images in the engine (Request::images): the spans' rules, and the M-RoPE positions of
// Qwen 3.5's image rows and of everything after them (ImageSpan::grid_x, engine.h).
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_seq.h"

namespace pagoda {

std::array<int64_t, 3> mrope_position(const std::vector<ImageSpan>& images, int64_t pos) {
  int64_t saved = 0;
  for (const ImageSpan& im : images) {
    if (pos < im.offset) break;
    if (im.grid_x == 0) continue;  // an image placed by plain positions
    if (pos < im.offset + im.n_tokens) {
      const int64_t t = im.offset - saved, i = pos - im.offset;
      return {t, t + i / im.grid_x, t + i % im.grid_x};
    }
    saved += im.n_tokens - std::max(im.grid_x, im.grid_y);
  }
  return {pos - saved, pos - saved, pos - saved};
}

// batch_.mrope for every row when a sequence in it has an image with M-RoPE positions.
void Engine::set_mrope_positions(const SchedulerOutput& plan) {
  bool any = false;
  for (const ScheduledChunk& c : plan.chunks)
    for (const ImageSpan& im : static_cast<const Seq*>(c.seq)->req.images) any |= im.grid_x != 0;
  if (!any) return;
  batch_.mrope.resize(batch_.size());
  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    const Seq* s = static_cast<const Seq*>(c.seq);
    const int64_t first = s->n_computed;  // a decode row's too: the sampled token's position
    const int64_t rows = c.decode ? 1 + static_cast<int64_t>(s->draft.size()) : c.n_tokens;
    for (int64_t i = 0; i < rows; ++i) batch_.mrope[row++] = mrope_position(s->req.images, first + i);
  }
}

std::optional<std::string> Engine::validate_images(const Request& r) const {
  int64_t prev_end = 0;
  const size_t row = static_cast<size_t>(model_.config().dim);
  for (const ImageSpan& im : r.images) {
    if (im.n_tokens <= 0 || im.offset < prev_end || im.offset + im.n_tokens > static_cast<int64_t>(r.prompt.size()))
      return "an image's tokens are out of order or outside the prompt";
    if (!im.embeddings || im.embeddings->size() != static_cast<size_t>(im.n_tokens) * row)
      return "an image's embeddings are not " + std::to_string(im.n_tokens) + " rows of the model's width " +
             std::to_string(row);
    if ((im.grid_x != 0 || im.grid_y != 0) &&
        (im.grid_x <= 0 || im.grid_y <= 0 || im.grid_x * im.grid_y != im.n_tokens))
      return "an image's grid " + std::to_string(im.grid_x) + " x " + std::to_string(im.grid_y) + " is not its " +
             std::to_string(im.n_tokens) + " tokens";
    if (im.grid_x != 0 && model_.config().rope_sections.empty())
      return "an image with M-RoPE positions for a model without RoPE sections";
    if (im.n_tokens > config_.max_batch_tokens && im.bidirectional)
      return "an image of " + std::to_string(im.n_tokens) + " tokens does not fit in one batch of --max-batch-tokens " +
             std::to_string(config_.max_batch_tokens);
    prev_end = im.offset + im.n_tokens;
  }
  if (!r.images.empty() && r.pooling) return std::string("images are not taken by embedding requests");
  return std::nullopt;
}

}  // namespace pagoda
