// The runtime's option types as the engines spell them (engine/runtime internal). The front ends'
// types (session.h, capabilities.h) are the runtime's own, so no model or kernel header reaches a
// front end; these are the one place that maps them, field by field.
#pragma once

#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/scheduler.h"
#include "engine/runtime/capabilities.h"
#include "engine/runtime/session.h"
#include "engine/shape/pipeline.h"
#include "kernels/backend.h"

namespace tessera::runtime {

inline kernels::DeviceChoice to_kernels(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kAuto:
      return kernels::DeviceChoice::kAuto;
    case DeviceChoice::kCpu:
      return kernels::DeviceChoice::kCpu;
    case DeviceChoice::kCuda:
      return kernels::DeviceChoice::kCuda;
  }
  return kernels::DeviceChoice::kCpu;
}

inline DeviceChoice from_kernels(kernels::DeviceChoice choice) {
  switch (choice) {
    case kernels::DeviceChoice::kAuto:
      return DeviceChoice::kAuto;
    case kernels::DeviceChoice::kCpu:
      return DeviceChoice::kCpu;
    case kernels::DeviceChoice::kCuda:
      return DeviceChoice::kCuda;
  }
  return DeviceChoice::kCpu;
}

inline shape::GenerationOptions to_shape(const GenerationOptions& o) {
  shape::GenerationOptions g;
  g.sampling = o.sampling;
  g.bbox = o.bbox;
  g.use_kv_cache = o.use_kv_cache;
  g.use_graphs = o.use_graphs;
  g.num_tokens = o.num_tokens;
  return g;
}

inline shape::MeshOptions to_shape(const MeshOptions& o) {
  shape::MeshOptions m;
  m.resolution = o.resolution;
  m.coarse_base = o.coarse_base;
  m.near_surface_logit = o.near_surface_logit;
  m.cleanup = o.cleanup;
  return m;
}

inline diffusion::SamplerKind to_diffusion(SamplerKind kind) {
  switch (kind) {
    case SamplerKind::kEuler:
      return diffusion::SamplerKind::kEuler;
    case SamplerKind::kEulerAncestral:
      return diffusion::SamplerKind::kEulerAncestral;
    case SamplerKind::kDpmpp2m:
      return diffusion::SamplerKind::kDpmpp2m;
    case SamplerKind::kLcm:
      return diffusion::SamplerKind::kLcm;
  }
  return diffusion::SamplerKind::kEuler;
}

inline diffusion::ComputePrecision to_diffusion(ImagePrecision precision) {
  switch (precision) {
    case ImagePrecision::kAuto:
      return diffusion::ComputePrecision::kAuto;
    case ImagePrecision::kF32:
      return diffusion::ComputePrecision::kF32;
    case ImagePrecision::kBf16:
      return diffusion::ComputePrecision::kBf16;
  }
  return diffusion::ComputePrecision::kAuto;
}

}  // namespace tessera::runtime
