//===- CachesTest.cpp - The runtime's caches of launch state, GPU-free ---===//
//
// KnownAllocations answers a launch's pointer checks for tensors inside an
// allocation already queried, and only inside it. RecentTensorMaps keeps a thread's encoded TMA maps by their exact
// arguments: any argument that differs (an address, a size, the tensor)
// must miss, and the oldest entry goes first. KeptPerKey holds the runtime's memory pool of each device: made once per
// device, never shared between devices, not kept when making it failed, and
// made once however many threads launch at the same time. Launch workspaces
// come from that pool only on an eagerly running stream; a captured stream
// gets graph-owned memory. Nothing here calls the driver.
//
//===----------------------------------------------------------------------===//

#include "TensorMaps.h"
#include "Workspace.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
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

TEST(KnownAllocations, AnswersOnlyForAddressesInsideAKnownAllocation) {
  KnownAllocations known;
  EXPECT_EQ(known.holding(0x10000), nullptr);
  known.add({0x10000, 0x200000, CU_MEMORYTYPE_DEVICE, 0});
  known.add({0x400000, 0x1000, CU_MEMORYTYPE_DEVICE, 1});
  ASSERT_NE(known.holding(0x10000), nullptr);
  EXPECT_EQ(known.holding(0x10000)->ordinal, 0);
  ASSERT_NE(known.holding(0x10000 + 0x1fffff), nullptr);
  EXPECT_EQ(known.holding(0x10000 + 0x200000), nullptr) << "one past the end";
  EXPECT_EQ(known.holding(0xffff), nullptr) << "just before the start";
  ASSERT_NE(known.holding(0x400800), nullptr);
  EXPECT_EQ(known.holding(0x400800)->ordinal, 1);
  EXPECT_EQ(known.holding(0x401000), nullptr);
}

TEST(KnownAllocations, AnAllocationOfUnknownSizeHoldsNothing) {
  KnownAllocations known;
  known.add({0x10000, 0, CU_MEMORYTYPE_DEVICE, 0});
  EXPECT_EQ(known.holding(0x10000), nullptr)
      << "without a size the next tensor must be queried itself";
}

TEST(KnownAllocations, KeepsTheFirstSixteen) {
  KnownAllocations known;
  for (CUdeviceptr i = 0; i < 20; ++i)
    known.add({0x100000 * (i + 1), 0x1000, CU_MEMORYTYPE_DEVICE, 0});
  EXPECT_NE(known.holding(0x100000 * 16), nullptr);
  EXPECT_EQ(known.holding(0x100000 * 17), nullptr);
}

/// The maps of q in a [1, 8, 128, 64] bf16 launch at `address`.
fa_tensor_map_args qMap(uint64_t address) {
  fa_tensor_map_args m{};
  m.tensor = "q";
  m.param = 11;
  m.data_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  m.rank = 3;
  m.global_address = address;
  m.global_dim[0] = 64;
  m.global_dim[1] = 128;
  m.global_dim[2] = 8;
  m.global_strides[0] = 128;
  m.global_strides[1] = 128 * 128;
  m.box_dim[0] = 64;
  m.box_dim[1] = 128;
  m.box_dim[2] = 1;
  m.element_strides[0] = m.element_strides[1] = m.element_strides[2] = 1;
  m.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return m;
}

/// A stand-in encoding that records which arguments it came from.
CUtensorMap fakeEncoding(uint64_t tag) {
  CUtensorMap map{};
  std::memcpy(&map, &tag, sizeof(tag));
  return map;
}

uint64_t tagOf(const CUtensorMap *map) {
  uint64_t tag = 0;
  std::memcpy(&tag, map, sizeof(tag));
  return tag;
}

TEST(RecentTensorMaps, HitsOnlyTheSameArguments) {
  RecentTensorMaps<4> recent;
  fa_tensor_map_args q = qMap(0x10000);
  EXPECT_EQ(recent.find(q), nullptr);
  recent.remember(q, fakeEncoding(1));
  ASSERT_NE(recent.find(q), nullptr);
  EXPECT_EQ(tagOf(recent.find(q)), 1u);

  // Every field that changes the map must miss.
  std::vector<fa_tensor_map_args> others(9, q);
  others[0].global_address += 0x200;
  others[1].global_dim[1] = 127;
  others[2].global_strides[1] += 128;
  others[3].box_dim[1] = 64;
  others[4].tensor = "k";
  others[5].param = 12;
  others[6].data_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  others[7].l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  others[8].global_dim[2] = 16;
  for (size_t i = 0; i < others.size(); ++i)
    EXPECT_EQ(recent.find(others[i]), nullptr) << "change " << i << " hit";
  // The same arguments from a different string literal of the same name.
  fa_tensor_map_args copy = q;
  static const char otherQ[] = "q";
  copy.tensor = otherQ;
  EXPECT_NE(recent.find(copy), nullptr);
}

TEST(RecentTensorMaps, ForgetsTheOldestFirst) {
  RecentTensorMaps<2> recent;
  recent.remember(qMap(0x1000), fakeEncoding(1));
  recent.remember(qMap(0x2000), fakeEncoding(2));
  recent.remember(qMap(0x3000), fakeEncoding(3));
  EXPECT_EQ(recent.find(qMap(0x1000)), nullptr);
  ASSERT_NE(recent.find(qMap(0x2000)), nullptr);
  EXPECT_EQ(tagOf(recent.find(qMap(0x2000))), 2u);
  EXPECT_EQ(tagOf(recent.find(qMap(0x3000))), 3u);
}

} // namespace
