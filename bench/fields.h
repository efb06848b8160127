// Analytic occupancy fields the benchmarks extract meshes from, so they need no model.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace tessera::bench {

// A chair (seat, four legs, a back) with a torus armrest: logits = -40 x the signed distance
// (mesh::OccupancyFn's contract; cleanup.cpp).
Status object_field(const float* points, int64_t n, float* logits);

}  // namespace tessera::bench
