// ExtractionOps: the facet of a backend that runs the shape decoder's query embedding and the
// polygonizer of surface extraction on its device (docs/adding-an-op.md). Backend::extraction() is
// null where a backend has none (the CPU backend: the host embeds the queries and
// engine/mesh/extraction.h keeps its host polygonizer, whose memory is the CPU backend's anyway).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/marching_tets.h"

namespace tessera::kernels {

class ExtractionOps {
 public:
  virtual ~ExtractionOps() = default;

  // Fourier features of n points for the shape decoder's queries (engine/shape/shape_decoder.h's
  // FourierEmbedder): out[i] (3 + 6 F floats) = p, then cos(p_d f_dj) + cos(p_d pi/2 + c_j) for
  // d < 3, j < F, then the same with sin; freqs [3][F], carrier_cs the carrier's cos [F] then sin
  // [F]; all in the backend's memory.
  virtual Status fourier_embed(const float* points, int64_t n, const float* freqs,
                               const float* carrier_cs, int64_t num_freqs, float* out) = 0;
  // kernels::cpu::polygonize_cells' contract (kernels/marching_tets.h), host memory in and out.
  virtual Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners,
                                  int64_t n, std::vector<float>* positions,
                                  std::vector<uint32_t>* triangles) = 0;
};

}  // namespace tessera::kernels
