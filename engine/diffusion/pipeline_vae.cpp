// The VAE stage (pipeline.h): the final latents decoded to the image, and the latent and image
// conversions to RGB8 (the step previews' cheap linear map, the decoded image).
#include <cmath>
#include <string>

#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {

using pipeline_detail::Clock;
using pipeline_detail::ms_since;

namespace {
uint8_t to_u8(float v01) {
  if (!(v01 > 0.0f)) return 0;  // also NaN
  if (v01 >= 1.0f) return 255;
  return static_cast<uint8_t>(std::lround(v01 * 255.0f));
}
}  // namespace

void latents_to_rgb_preview(const float* latents, int64_t height, int64_t width, uint8_t* rgb) {
  for (int64_t p = 0; p < height * width; ++p) {
    const float* z = latents + 4 * p;
    for (int c = 0; c < 3; ++c) {
      float v = 0;
      for (int k = 0; k < 4; ++k) v += z[k] * kLatentRgb[k][c];
      rgb[3 * p + c] = to_u8((v + 1.0f) * 0.5f);
    }
  }
}

void image_to_rgb8(const float* image, int64_t pixels, uint8_t* rgb) {
  for (int64_t k = 0; k < pixels * 3; ++k) rgb[k] = to_u8((image[k] + 1.0f) * 0.5f);
}

Status DiffusionModel::Impl::decode_latents(Impl& m, const GenerateRequest& request,
                                            const LatentGrid& grid, GeneratedImage* out) {
  const int64_t lh = grid.height, lw = grid.width;
  const int64_t n = lh * lw * grid.channels;
  const auto t0 = Clock::now();
  out->width = request.width;
  out->height = request.height;
  const int64_t pixels = request.width * request.height;
  out->decoded.resize(static_cast<size_t>(pixels * m.vae->config().out_channels));
  {
    TESSERA_ASSIGN_OR_RETURN(float* z_dev, m.dev.get(Impl::kDevX, n));
    TESSERA_ASSIGN_OR_RETURN(float* image_dev,
                             m.dev.get(Impl::kDevImage, static_cast<int64_t>(out->decoded.size())));
    TESSERA_RETURN_IF_ERROR(m.backend->upload(z_dev, m.x.data(), m.x.size() * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(m.vae->decode(z_dev, 1, lh, lw, image_dev));
    TESSERA_RETURN_IF_ERROR(
        m.backend->download(out->decoded.data(), image_dev, out->decoded.size() * sizeof(float)));
  }
  out->vae_ms = ms_since(t0);
  for (size_t k = 0; k < out->decoded.size(); ++k) {
    if (!std::isfinite(out->decoded[k])) {
      return corrupt_data("VAE decode: the image has " +
                          std::string(std::isnan(out->decoded[k]) ? "NaN" : "an infinity") +
                          " at pixel " + std::to_string(k / 3) + " (latents were finite)");
    }
  }
  out->rgb.resize(static_cast<size_t>(pixels * 3));
  image_to_rgb8(out->decoded.data(), pixels, out->rgb.data());
  out->latents = m.x;
  return Status();
}

}  // namespace tessera::diffusion
