/*===- forward.c - Run an fa bundle's forward kernel on random data -------===*
 *
 * Usage: fa-example-forward <bundle dir>
 * Picks the bundle's bf16 forward kernel without a mask, runs it on a small
 * GQA problem with ragged lengths, and compares O and LSE with a float64 host
 * reference. Exits 1 when the error exceeds bf16 rounding of O.
 *
 *===----------------------------------------------------------------------===*/

#include "fa/Runtime/fa_runtime.h"

#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_CU(call)                                                         \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *s_ = "?";                                                    \
      cuGetErrorName(r_, &s_);                                                 \
      fprintf(stderr, "%s failed: %s\n", #call, s_);                           \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_FA(call)                                                         \
  do {                                                                         \
    if ((call) != FA_SUCCESS) {                                                \
      fprintf(stderr, "%s failed: %s\n", #call, fa_last_error());              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static uint16_t toBf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static float fromBf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static fa_tensor tensor(CUdeviceptr data, fa_dtype dtype, int rank,
                        const int64_t *shape) {
  fa_tensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <bundle dir>\n", argv[0]);
    return 2;
  }
  CHECK_CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));

  fa_bundle *bundle;
  CHECK_FA(fa_bundle_load(argv[1], &bundle));
  int d = 0;
  for (int i = 0; i < fa_bundle_kernel_count(bundle) && !d; ++i) {
    fa_kernel_info info;
    CHECK_FA(fa_kernel_get_info(fa_bundle_kernel_at(bundle, i), &info));
    if (info.direction == FA_DIRECTION_FWD && info.dtype == FA_DTYPE_BF16 &&
        info.mask == FA_MASK_NONE && info.head_dim == info.head_dim_v)
      d = info.head_dim;
  }
  if (!d) {
    fprintf(stderr, "no bf16 forward kernel without a mask in %s\n", argv[1]);
    return 1;
  }
  fa_kernel_query query = {
      FA_DIRECTION_FWD, FA_DTYPE_BF16, d, d, FA_MASK_NONE, -1, -1, 0};
  const fa_kernel *kernel;
  CHECK_FA(fa_kernel_find(bundle, &query, &kernel));
  fa_kernel_info info;
  CHECK_FA(fa_kernel_get_info(kernel, &info));

  const int B = 2, H = 4, Hkv = 2, Nq = 77, Nk = 201;
  const float scale = 1.0f / sqrtf((float)d);
  size_t nQ = (size_t)B * H * Nq * d, nK = (size_t)B * Hkv * Nk * d;
  size_t nL = (size_t)B * H * Nq;
  uint16_t *q = malloc(nQ * 2), *k = malloc(nK * 2), *v = malloc(nK * 2),
           *o = malloc(nQ * 2);
  float *lse = malloc(nL * 4);
  srand(42);
  for (size_t i = 0; i < nQ; ++i)
    q[i] = toBf16((float)rand() / RAND_MAX * 2 - 1);
  for (size_t i = 0; i < nK; ++i) {
    k[i] = toBf16((float)rand() / RAND_MAX * 2 - 1);
    v[i] = toBf16((float)rand() / RAND_MAX * 2 - 1);
  }

  CUdeviceptr dq, dk, dv, dO, dL;
  CHECK_CU(cuMemAlloc(&dq, nQ * 2));
  CHECK_CU(cuMemAlloc(&dk, nK * 2));
  CHECK_CU(cuMemAlloc(&dv, nK * 2));
  CHECK_CU(cuMemAlloc(&dO, nQ * 2));
  CHECK_CU(cuMemAlloc(&dL, nL * 4));
  CHECK_CU(cuMemcpyHtoD(dq, q, nQ * 2));
  CHECK_CU(cuMemcpyHtoD(dk, k, nK * 2));
  CHECK_CU(cuMemcpyHtoD(dv, v, nK * 2));
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  int64_t qs[4] = {B, H, Nq, d}, ks[4] = {B, Hkv, Nk, d}, ls[3] = {B, H, Nq};
  fa_attention_args args;
  args.q = tensor(dq, FA_DTYPE_BF16, 4, qs);
  args.k = tensor(dk, FA_DTYPE_BF16, 4, ks);
  args.v = tensor(dv, FA_DTYPE_BF16, 4, ks);
  args.o = tensor(dO, FA_DTYPE_BF16, 4, qs);
  args.lse = tensor(dL, FA_DTYPE_F32, 3, ls);
  args.scale = scale;
  CHECK_FA(fa_attention_forward(kernel, &args, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemcpyDtoH(o, dO, nQ * 2));
  CHECK_CU(cuMemcpyDtoH(lse, dL, nL * 4));

  double checksum = 0, maxErr = 0, maxLseErr = 0;
  double *s = malloc(sizeof(double) * Nk), *ref = malloc(sizeof(double) * d);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int hk = h / (H / Hkv);
      for (int i = 0; i < Nq; ++i) {
        const uint16_t *qi = q + (((size_t)b * H + h) * Nq + i) * d;
        double m = -INFINITY, l = 0;
        for (int j = 0; j < Nk; ++j) {
          const uint16_t *kj = k + (((size_t)b * Hkv + hk) * Nk + j) * d;
          double acc = 0;
          for (int x = 0; x < d; ++x)
            acc += (double)fromBf16(qi[x]) * fromBf16(kj[x]);
          s[j] = acc * scale;
          m = s[j] > m ? s[j] : m;
        }
        memset(ref, 0, sizeof(double) * d);
        for (int j = 0; j < Nk; ++j) {
          double p = exp(s[j] - m);
          const uint16_t *vj = v + (((size_t)b * Hkv + hk) * Nk + j) * d;
          l += p;
          for (int x = 0; x < d; ++x)
            ref[x] += p * fromBf16(vj[x]);
        }
        size_t row = ((size_t)b * H + h) * Nq + i;
        for (int x = 0; x < d; ++x) {
          double got = fromBf16(o[row * d + x]);
          checksum += got;
          maxErr = fmax(maxErr, fabs(got - ref[x] / l));
        }
        maxLseErr = fmax(maxLseErr, fabs(lse[row] - (m + log(l))));
      }
    }
  printf("kernel %s (target %s), B=%d H=%d Hkv=%d Nq=%d Nk=%d D=%d\n", info.tag,
         info.target, B, H, Hkv, Nq, Nk, d);
  printf("checksum(O) = %.6f  max|O - ref| = %.3e  max|LSE - ref| = %.3e\n",
         checksum, maxErr, maxLseErr);
  /* |O| < 1 here: one bf16 rounding of O is at most 2^-9. */
  int ok = maxErr <= 4.0 / 512 && maxLseErr <= 1e-3;
  printf("%s\n", ok ? "PASS" : "FAIL");
  fa_bundle_free(bundle);
  cuMemFree(dq);
  cuMemFree(dk);
  cuMemFree(dv);
  cuMemFree(dO);
  cuMemFree(dL);
  cuStreamDestroy(stream);
  cuDevicePrimaryCtxRelease(dev);
  return ok ? 0 : 1;
}
