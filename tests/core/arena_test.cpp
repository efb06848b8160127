#include "core/arena.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tessera {
namespace {

TEST(Arena, AlignedStableAllocations) {
  auto arena = Arena::create(1 << 16);
  ASSERT_TRUE(arena.ok());
  auto a = arena->allocate_tensor(DType::kF32, {3, 5});
  auto b = arena->allocate_tensor(DType::kBF16, {7});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % Arena::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % Arena::kAlignment, 0u);
  EXPECT_EQ(a->numel(), 15);
  EXPECT_EQ(a->strides[0], 5);
  EXPECT_NE(a->data, b->data);
}

TEST(Arena, ExhaustionIsAnErrorNamingTheRequest) {
  auto arena = Arena::create(256);
  ASSERT_TRUE(arena.ok());
  auto t = arena->allocate_tensor(DType::kF32, {1000});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(t.status().message().find("[1000]"), std::string::npos);
}

TEST(Arena, ResetToMarkReusesMemory) {
  auto arena = Arena::create(1024);
  ASSERT_TRUE(arena.ok());
  const size_t mark = arena->mark();
  void* p1 = arena->allocate(100);
  arena->reset(mark);
  void* p2 = arena->allocate(100);
  EXPECT_EQ(p1, p2);
}

TEST(TensorView, ReshapeChecksCounts) {
  float buf[12];
  TensorView v(buf, DType::kF32, {3, 4});
  EXPECT_TRUE(v.reshape({2, 6}).ok());
  auto bad = v.reshape({5, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[5, 2]"), std::string::npos);
  EXPECT_EQ(v.slice0(1, 3).dim(0), 2);
  EXPECT_EQ(v.slice0(1, 3).as<float>(), buf + 4);
}

}  // namespace
}  // namespace tessera
