// RGBA8 images and the writers headless renders need: PNG (stb_image_write) and animated GIF89a
// (our own encoder: fixed 6x7x6 colour cube + ordered dithering, LZW, per-frame delay, looping).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/png.h"
#include "core/status.h"

namespace tessera::render {

// Row-major RGBA8, top row first (image-file order; GL's glReadPixels order is flipped on read).
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgba;  // 4 * width * height bytes

  bool valid() const {
    return width > 0 && height > 0 &&
           rgba.size() == static_cast<size_t>(width) * static_cast<size_t>(height) * 4;
  }
  const uint8_t* pixel(int x, int y) const {
    return &rgba[(static_cast<size_t>(y) * width + x) * 4];
  }
};

// Tiles `frames` (all the same size) into a grid of `columns` columns, row by row; unused cells
// are black. kInvalidArgument for no frames, mismatched sizes or columns < 1.
Expected<Image> contact_sheet(const std::vector<Image>& frames, int columns);

// Encodes/writes a PNG. The file is written atomically (temporary file, then rename). kIoError
// naming the path when it cannot be written; kInvalidArgument for an invalid image.
Expected<std::vector<uint8_t>> encode_png(const Image& image);
// `text`: PNG text entries (core/png.h), e.g. the settings of the mesh the image shows.
Status write_png(const std::string& path, const Image& image, const PngText& text = {});

// Encodes an animated GIF89a that loops forever: every frame shown for `delay_centiseconds`
// (1/100 s, 1..65535; GIF's unit), all frames the same size (<= 65535 per side). Colours are
// quantised to a fixed 252-colour cube (6 red x 7 green x 6 blue levels) with 4x4 ordered
// dithering; alpha is ignored. kInvalidArgument for no frames, mismatched sizes or a bad delay.
Expected<std::vector<uint8_t>> encode_gif(const std::vector<Image>& frames, int delay_centiseconds);
Status write_gif(const std::string& path, const std::vector<Image>& frames, int delay_centiseconds);

}  // namespace tessera::render
