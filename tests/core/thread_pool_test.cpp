#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace tessera {
namespace {

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, ManySmallCallsBackToBack) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int call = 0; call < 20000; ++call) pool.run(3, [&](int64_t i) { sum += i + 1; });
  EXPECT_EQ(sum.load(), 20000 * 6);
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  ThreadPool pool(4);
  std::vector<int> seen(1009, 0);
  pool.parallel_for(1009, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
  });
  for (int v : seen) ASSERT_EQ(v, 1);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run(4, [&](int64_t) { pool.run(5, [&](int64_t) { inner++; }); });
  EXPECT_EQ(inner.load(), 20);
}

}  // namespace
}  // namespace tessera
