// Planted bugs that compute-sanitizer must report, so that a clean run over
// fa's kernels means the tool was checking (scripts/device-run.sh):
//   oob   one thread writes one int past a 64-int cudaMalloc buffer (memcheck)
//   race  warp 1 writes the shared words warp 0 then reads, with no barrier
//         between them (racecheck)
// Without the sanitizer both run and exit 0.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void writePastEnd(int *p, int n) { p[n] = 1; }

__global__ void sharedRace(int *out) {
  __shared__ int s[64];
  s[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = s[(threadIdx.x + 32) % 64];
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int *p = nullptr;
  if (cudaMalloc(&p, 64 * sizeof(int)) != cudaSuccess)
    return 3;
  if (!strcmp(mode, "oob")) {
    writePastEnd<<<1, 1>>>(p, 64);
  } else if (!strcmp(mode, "race")) {
    sharedRace<<<1, 64>>>(p);
  } else {
    fprintf(stderr, "usage: sanitizer_control oob|race\n");
    return 2;
  }
  printf("%s: %s\n", mode, cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
