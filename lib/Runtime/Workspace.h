//===- Workspace.h - Zeroed workspaces of one launch ------------*- C++ -*-===//
//
// A persistent forward's tile counter and a deterministic backward's dQ
// semaphores are zeroed device memory that one launch uses. They are
// allocated, zeroed and freed in stream order, so launches on concurrent
// streams never share one and a stream capture records them as graph nodes.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_RUNTIME_WORKSPACE_H
#define FA_LIB_RUNTIME_WORKSPACE_H

#include "Driver.h"

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace fa::runtime {

/// Values made once per key on first use and kept for the process (the
/// runtime's memory pool of each device). Thread-safe; a failed make is not
/// kept, so a later call tries again.
template <typename Key, typename Value> class KeptPerKey {
public:
  /// The value of `key`: the kept one, else make(Value &) -> fa_status's.
  template <typename Make>
  fa_status get(const Key &key, Value &out, Make make) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto &[k, v] : values)
      if (k == key) {
        out = v;
        return FA_SUCCESS;
      }
    Value made{};
    if (fa_status s = make(made))
      return s;
    values.emplace_back(key, made);
    out = made;
    return FA_SUCCESS;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return values.size();
  }

private:
  std::mutex mutex;
  std::vector<std::pair<Key, Value>> values;
};

/// Bytes of freed workspace the runtime's pools keep across
/// synchronisations (beyond this they return memory to the driver).
constexpr uint64_t kPoolKeptBytes = uint64_t(64) << 20;

/// Where a launch's workspace comes from: the runtime's own pool of the
/// device when the stream runs eagerly; graph-owned memory (the default
/// pool's allocation nodes) when the stream is being captured.
enum class WorkspaceSource { RuntimePool, CaptureGraph };
inline WorkspaceSource workspaceSourceFor(CUstreamCaptureStatus capture) {
  return capture == CU_STREAM_CAPTURE_STATUS_NONE
             ? WorkspaceSource::RuntimePool
             : WorkspaceSource::CaptureGraph;
}

/// Most (context, stream) pairs that keep a tile counter; launches on
/// streams beyond them take a workspace per launch instead.
constexpr size_t kMaxStreamTileCounters = 4096;

/// Runs `launchMain` with a persistent forward's tile counter (a u32 that
/// is 0 at launch) put at `param`. On an eagerly running stream it is the
/// stream's own counter, zeroed once and reused: the kernel stores 0 back
/// at its end (docs/ABI.md) and launches on one stream run one after
/// another, so a launch costs no allocation or memset. A captured stream
/// takes withZeroedWorkspace's graph-owned counter, since replays of graphs
/// captured on one stream may run concurrently on others. Call with a
/// context current; `tag` names the kernel in an error.
fa_status withTileCounter(const char *api, const std::string &tag,
                          CUstream stream, void *&param,
                          const std::function<fa_status()> &launchMain);

/// Runs `launchMain` with a zeroed u32 workspace of `bytes` bytes put at
/// `param`: allocated from workspaceSourceFor(the stream's capture status),
/// zeroed by cuMemsetD32Async, used and freed, all in stream order on
/// `stream`. `api` and `what` name the call and the workspace in an error.
fa_status withZeroedWorkspace(const char *api, const std::string &what,
                              uint64_t bytes, CUstream stream, void *&param,
                              const std::function<fa_status()> &launchMain);

} // namespace fa::runtime

#endif // FA_LIB_RUNTIME_WORKSPACE_H
