// JPEG through libjpeg(-turbo). Its default error handler calls exit(); ours records the
// message and longjmps into run_jpeg(), whose frame holds no object with a destructor (the
// output lives in the caller's JpegJob). A file that ends early is an error here, not the
// grey lower half libjpeg would otherwise fill in.
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <string>
#include <vector>

#include "common/error.h"
#include "image/decode_internal.h"

namespace pagoda::image_detail {

namespace {

// A progressive JPEG may carry any number of scans, each a pass over every coefficient: a
// small file of thousands of scans is a CPU bomb. Real encoders write about ten.
constexpr int kMaxScans = 256;

struct JpegJob {
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
  std::span<const uint8_t> bytes;
  const ImageLimits* limits = nullptr;
  RgbImage out;
};

// cinfo->err is the first member of JpegJob, so the job is reachable from any callback.
JpegJob* job_of(j_common_ptr cinfo) { return reinterpret_cast<JpegJob*>(cinfo->err); }

[[noreturn]] void fail(j_common_ptr cinfo, const char* message) {
  JpegJob* job = job_of(cinfo);
  std::snprintf(job->message, sizeof job->message, "%s", message);
  std::longjmp(job->jump, 1);
}

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  fail(cinfo, text);
}

// Warnings (level -1) are mostly recoverable oddities of real cameras and are ignored, but
// the end of the data arriving early means the client's upload was cut: refuse it.
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) fail(cinfo, "truncated (the data ends early)");
}

void on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) fail(cinfo, "too many progressive scans");
}

// False after an error (job->message says which); the caller destroys `cinfo` either way.
bool run_jpeg(jpeg_decompress_struct* cinfo, JpegJob* job) {
  if (setjmp(job->jump)) return false;
  jpeg_create_decompress(cinfo);
  cinfo->progress = &job->progress;
  jpeg_mem_src(cinfo, job->bytes.data(), static_cast<unsigned long>(job->bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    fail(reinterpret_cast<j_common_ptr>(cinfo), "CMYK JPEGs are not supported");
  }
  check_dimensions("JPEG", cinfo->image_width, cinfo->image_height, *job->limits);
  cinfo->out_color_space = JCS_RGB;  // grayscale comes out replicated into R, G and B
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != 3) fail(reinterpret_cast<j_common_ptr>(cinfo), "not RGB after conversion");
  const size_t stride = size_t{cinfo->output_width} * 3;
  job->out.width = cinfo->output_width;
  job->out.height = cinfo->output_height;
  job->out.pixels.resize(stride * cinfo->output_height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = job->out.pixels.data() + size_t{cinfo->output_scanline} * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  JpegJob job;
  job.bytes = bytes;
  job.limits = &limits;
  jpeg_decompress_struct cinfo{};
  cinfo.err = jpeg_std_error(&job.err);
  job.err.error_exit = on_error_exit;
  job.err.emit_message = on_emit_message;
  job.progress.progress_monitor = on_progress;
  bool ok = false;
  try {
    ok = run_jpeg(&cinfo, &job);
  } catch (...) {  // check_dimensions' Error or a bad_alloc: thrown by us, not inside libjpeg
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  jpeg_destroy_decompress(&cinfo);
  if (!ok) throw Error(std::string("JPEG image cannot be decoded: ") + job.message);
  return std::move(job.out);
}

}  // namespace pagoda::image_detail
