//===- WorkspaceTest.cpp - The runtime's per-device pools, GPU-free ------===//
//
// KeptPerKey holds the runtime's memory pool of each device: made once per
// device, never shared between devices, not kept when making it failed, and
// made once however many threads launch at the same time. Launch workspaces
// come from that pool only on an eagerly running stream; a captured stream
// gets graph-owned memory. Nothing here calls the driver.
//
//===----------------------------------------------------------------------===//

#include "Workspace.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

using namespace fa::runtime;

namespace {

TEST(KeptPerKey, MakesOneValuePerKeyAndKeepsIt) {
  KeptPerKey<int, int> kept;
  int makes = 0;
  auto make = [&](int value) {
    return [&makes, value](int &out) {
      ++makes;
      out = value;
      return FA_SUCCESS;
    };
  };
  int a = 0, b = 0, again = 0;
  ASSERT_EQ(kept.get(0, a, make(100)), FA_SUCCESS);
  ASSERT_EQ(kept.get(1, b, make(200)), FA_SUCCESS);
  ASSERT_EQ(kept.get(0, again, make(300)), FA_SUCCESS);
  EXPECT_EQ(a, 100);
  EXPECT_EQ(b, 200) << "device 1 got device 0's value";
  EXPECT_EQ(again, 100) << "device 0's value was made again";
  EXPECT_EQ(makes, 2);
  EXPECT_EQ(kept.size(), 2u);
}

TEST(KeptPerKey, AFailedMakeIsNotKept) {
  KeptPerKey<int, int> kept;
  int out = -1;
  EXPECT_EQ(kept.get(3, out, [](int &) { return FA_ERROR_CUDA; }),
            FA_ERROR_CUDA);
  EXPECT_EQ(kept.size(), 0u);
  ASSERT_EQ(kept.get(3, out,
                     [](int &v) {
                       v = 7;
                       return FA_SUCCESS;
                     }),
            FA_SUCCESS);
  EXPECT_EQ(out, 7) << "the retry after a failure did not make the value";
}

TEST(KeptPerKey, ConcurrentFirstUsesMakeOneValue) {
  KeptPerKey<int, int> kept;
  std::atomic<int> makes{0};
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        int out = 0;
        int key = i % 2;
        kept.get(key, out, [&, t](int &v) {
          ++makes;
          v = 1000 * key + t;
          return FA_SUCCESS;
        });
        // Every thread must see the one value made for the key.
        int first = 0;
        kept.get(key, first, [](int &) { return FA_ERROR_INTERNAL; });
        mismatches += out != first;
      }
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(makes.load(), 2);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(WorkspaceSource, EagerStreamsUseThePoolCapturedOnesTheGraph) {
  EXPECT_EQ(workspaceSourceFor(CU_STREAM_CAPTURE_STATUS_NONE),
            WorkspaceSource::RuntimePool);
  // A capture owns its allocations (graph memory nodes); an invalidated
  // capture must not take pool memory that the graph would never free.
  EXPECT_EQ(workspaceSourceFor(CU_STREAM_CAPTURE_STATUS_ACTIVE),
            WorkspaceSource::CaptureGraph);
  EXPECT_EQ(workspaceSourceFor(CU_STREAM_CAPTURE_STATUS_INVALIDATED),
            WorkspaceSource::CaptureGraph);
}

} // namespace
