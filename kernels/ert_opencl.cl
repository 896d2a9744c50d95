// ERT kernels for the OpenCL backend (ert/backends/opencl.py), specialised by -D defines.
//
// Per element per trial (the contract of ert.spec.KernelSpec):
//   ert_rw, ERT_FMA_OPS == 0:  b = b + c_t                        1 FLOP,  load + store (2 x sizeof(T) bytes)
//   ert_rw, ERT_FMA_OPS == K:  K x (b = b*a + c_t)                2K FLOPs, load + store (2 x sizeof(T) bytes)
//                              fused with fma() when ERT_FMA is 1, else a multiply and
//                              an add rounded separately (FP_CONTRACT OFF forbids fusing)
//   ert_ro:                    acc = acc + b                      1 FLOP,  load only (sizeof(T) bytes)
//
// c_t is +c on even trials and -c on odd ones, counted over every trial run on
// the buffer since it was initialised (trial_offset carries the count between
// launches), so the final values depend on the parity of the total and an
// off-by-one in the trial loop is caught by the host replay.  a < 1 keeps the
// values near +-1 for any trial count.
//
// Defines (all required):
//   ERT_BITS       64, 32 or 16: the element type T (double needs cl_khr_fp64, half cl_khr_fp16)
//   ERT_VW         1, 2, 4, 8 or 16: elements per vector (TV = T or T##ERT_VW)
//   ERT_CHAINS     vectors each work-item keeps in flight: independent multiply-add
//                  chains (one element's chain is serial, so one chain measures
//                  latency, not throughput) and independent partial sums
//   ERT_FMA_OPS    K, multiply-adds per element per trial (0: the single add)
//   ERT_FMA        1: fma(); 0: a separate multiply and add
//   ERT_CONTIGUOUS 1: each work-item owns one contiguous range of vectors (CPU
//                  devices: a core streams its own block, as the Numba backend's
//                  threads do); 0: work-items interleave vector by vector, so
//                  neighbouring work-items touch neighbouring vectors (GPUs:
//                  coalesced accesses)
//
// The trial loop is inside the kernel (one launch per timed region), as in
// ERT's GPU driver: a launch per trial would time the launch overhead at
// L1-sized working sets instead of the cache.

#pragma OPENCL FP_CONTRACT OFF

#ifndef ERT_INT
#define ERT_INT 0
#endif
#ifndef ERT_ADD_OPS
#define ERT_ADD_OPS 0
#endif
// Integer kernels (schema 1.3/1.4; -DERT_INT=1 with ERT_BITS 32 or 64): T is int or long, the
// multiply-add is x*a + c (OpenCL C integers wrap modulo 2^bits; PoCL/clang emit mul + add, a GPU's
// compiler mad / IMAD), and ERT_ADD_OPS == K (with ERT_FMA_OPS == 0) is the add-only roof:
// K x (b = b + c_t), each kept by an empty asm statement where the compiler is clang-based.
#if ERT_INT && ERT_BITS == 64
#define ERT_T long
#elif ERT_INT && ERT_BITS == 32
#define ERT_T int
#elif ERT_INT
#error "integer kernels are 32 or 64 bits"
#elif ERT_BITS == 64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define ERT_T double
#elif ERT_BITS == 32
#define ERT_T float
#elif ERT_BITS == 16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define ERT_T half
#else
#error "ERT_BITS must be 64, 32 or 16"
#endif

#define ERT_CAT_(a, b) a##b
#define ERT_CAT(a, b) ERT_CAT_(a, b)
// The type names are macros, not typedefs, so that ERT_CAT can build the vector names.
typedef ERT_T T;
#if ERT_VW == 1
typedef T TV;
#define HSUM(x) (x)
#else
typedef ERT_CAT(ERT_T, ERT_VW) TV;
#endif

// Horizontal sum of one vector in a fixed order (halves, then halves again).
#if ERT_VW == 2
#define HSUM(x) ((x).s0 + (x).s1)
#elif ERT_VW == 4
#define HSUM2(x) ((x).s0 + (x).s1)
#define HSUM(x) (HSUM2((x).lo) + HSUM2((x).hi))
#elif ERT_VW == 8
#define HSUM2(x) ((x).s0 + (x).s1)
#define HSUM4(x) (HSUM2((x).lo) + HSUM2((x).hi))
#define HSUM(x) (HSUM4((x).lo) + HSUM4((x).hi))
#elif ERT_VW == 16
#define HSUM2(x) ((x).s0 + (x).s1)
#define HSUM4(x) (HSUM2((x).lo) + HSUM2((x).hi))
#define HSUM8(x) (HSUM4((x).lo) + HSUM4((x).hi))
#define HSUM(x) (HSUM8((x).lo) + HSUM8((x).hi))
#endif

#if ERT_INT
#define MADD(x, a, c) ((x) * (a) + (c))
#elif ERT_FMA && ERT_FMA_BUILTIN
// Some drivers (PoCL 3.0 from PyPI) call fma() out of line, which spills every
// vector register around each call; clang's __builtin_fma is the LLVM fma
// intrinsic, one fused instruction, applied here lane by lane.  The backend
// sets ERT_FMA_BUILTIN only where the compiler is clang-based.
#if ERT_BITS == 64
#define FMA1(x, a, c) __builtin_fma((x), (a), (c))
#elif ERT_BITS == 32
#define FMA1(x, a, c) __builtin_fmaf((x), (a), (c))
#else
#define FMA1(x, a, c) ((half)__builtin_fmaf((float)(x), (float)(a), (float)(c)))
#endif
#if ERT_VW == 1
#define MADD(x, a, c) FMA1(x, a, c)
#elif ERT_VW == 2
#define MADD(x, a, c) ((TV)(FMA1((x).s0, a, c), FMA1((x).s1, a, c)))
#elif ERT_VW == 4
#define MADD(x, a, c) ((TV)(FMA1((x).s0, a, c), FMA1((x).s1, a, c), FMA1((x).s2, a, c), FMA1((x).s3, a, c)))
#elif ERT_VW == 8
#define MADD4_(x, a, c) FMA1((x).s0, a, c), FMA1((x).s1, a, c), FMA1((x).s2, a, c), FMA1((x).s3, a, c)
#define MADD(x, a, c) ((TV)(MADD4_((x).lo, a, c), MADD4_((x).hi, a, c)))
#elif ERT_VW == 16
#define MADD4_(x, a, c) FMA1((x).s0, a, c), FMA1((x).s1, a, c), FMA1((x).s2, a, c), FMA1((x).s3, a, c)
#define MADD(x, a, c) ((TV)(MADD4_((x).lo.lo, a, c), MADD4_((x).lo.hi, a, c), MADD4_((x).hi.lo, a, c), \
                            MADD4_((x).hi.hi, a, c)))
#endif
#elif ERT_FMA
#define MADD(x, a, c) fma((x), (a), (c))
#else
#define MADD(x, a, c) ((x) * (a) + (c))
#endif

// An empty asm statement the value passes through: the compiler can no longer fold a chain of adds
// of one value into a multiply (integer adds reassociate).  clang only (ERT_ASM_BARRIER).
#if ERT_ASM_BARRIER
#define OPAQUE(x) __asm__("" : "+v"(x))
#else
#define OPAQUE(x)
#endif

// One step of the read-modify-write kernel on ERT_CHAINS vectors held in v[].
#if ERT_ADD_OPS
#define RW_WORK(v, a, ct)                                  \
    for (int k = 0; k < ERT_ADD_OPS; ++k)                  \
        _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) { v[u] = v[u] + (ct); OPAQUE(v[u]); }
#elif ERT_FMA_OPS == 0
#define RW_WORK(v, a, ct)                                  \
    _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) v[u] = v[u] + (ct);
#else
#define RW_WORK(v, a, ct)                                  \
    for (int k = 0; k < ERT_FMA_OPS; ++k)                  \
        _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) v[u] = MADD(v[u], (a), (ct));
#endif

// The first vector of this work-item's ERT_CHAINS-vector group number g, and
// the distance between the vectors of one group.
//   contiguous:  groups [lo, hi) of consecutive vectors
//   interleaved: rounds of ERT_CHAINS * G vectors; in round r the work-item's
//                vectors are (r * ERT_CHAINS + u) * G + gid
#if ERT_CONTIGUOUS
#define GROUPS_BEGIN(n_vectors, gid, G) ((n_vectors) / ERT_CHAINS * (gid) / (G))
#define GROUPS_END(n_vectors, gid, G) ((n_vectors) / ERT_CHAINS * ((gid) + 1) / (G))
#define GROUP_FIRST(g, gid, G) ((g) * ERT_CHAINS)
#define GROUP_STRIDE(G) 1
#else
#define GROUPS_BEGIN(n_vectors, gid, G) 0
#define GROUPS_END(n_vectors, gid, G) ((n_vectors) / ((ulong)ERT_CHAINS * (G)))
#define GROUP_FIRST(g, gid, G) ((g) * ERT_CHAINS * (G) + (gid))
#define GROUP_STRIDE(G) (G)
#endif

// Fill the array with 0.5 + (i % 16) / 16 (16 distinct values, exact in every
// precision), one element per work-item step.
// Integers: 3 + 1000003 (i % 16) (ert.backends.check.initial_int_values).
__kernel void ert_init(__global T* restrict buf, const ulong n_elements)
{
    const ulong G = get_global_size(0);
    for (ulong i = get_global_id(0); i < n_elements; i += G)
#if ERT_INT
        buf[i] = (T)(3 + 1000003 * (long)(i % 16));
#else
        buf[i] = (T)(0.5f + (float)(i % 16) * 0.0625f);
#endif
}

#if ERT_INT
typedef long ERT_SCALAR_ARG;  // a and c arrive as 64-bit integers, converted (wrapping) to T
#else
typedef float ERT_SCALAR_ARG;
#endif

// n_vectors is a multiple of ERT_CHAINS (the backend's granule).  With the
// interleaved layout, vectors past the last whole round are a tail that each
// work-item walks with stride G, one vector at a time.
__kernel void ert_rw(__global TV* restrict buf, const ulong n_vectors, const ulong trials,
                     const ulong trial_offset, const ERT_SCALAR_ARG a_in, const ERT_SCALAR_ARG c_in)
{
    const ulong gid = get_global_id(0), G = get_global_size(0);
    const T a = (T)a_in, c = (T)c_in;
    const ulong g_lo = GROUPS_BEGIN(n_vectors, gid, G), g_hi = GROUPS_END(n_vectors, gid, G);
    const ulong stride = GROUP_STRIDE(G);
    for (ulong t = 0; t < trials; ++t) {
        const T ct = ((trial_offset + t) & 1) ? -c : c;
        for (ulong g = g_lo; g < g_hi; ++g) {
            __global TV* p = buf + GROUP_FIRST(g, gid, G);
            TV v[ERT_CHAINS];
            _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) v[u] = p[u * stride];
            RW_WORK(v, a, ct)
            _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) p[u * stride] = v[u];
        }
#if !ERT_CONTIGUOUS
        for (ulong j = g_hi * ERT_CHAINS * G + gid; j < n_vectors; j += G) {
            TV v[1];
            v[0] = buf[j];
#if ERT_ADD_OPS
            for (int k = 0; k < ERT_ADD_OPS; ++k) v[0] = v[0] + ct;
#elif ERT_FMA_OPS == 0
            v[0] = v[0] + ct;
#else
            for (int k = 0; k < ERT_FMA_OPS; ++k) v[0] = MADD(v[0], a, ct);
#endif
            buf[j] = v[0];
        }
#endif
    }
}

// Load-only: each trial sums the work-item's vectors into ERT_CHAINS partial
// vector sums.  Every ERT_RO_FOLD groups (and at the end of its range) they are
// reduced in a fixed order to one value and added to a Kahan-compensated
// running total, so a partial sum never grows past ~2^10 (exact for the
// 4-fractional-bit values of ert_init, even in FP32) and the total stays within
// a few ulp of the exact one whatever the trial count.  FP16 loads are summed
// in FP32 (a half accumulator would round at 2^11 and overflow at 65504).
// sums[2 * gid] holds the total and sums[2 * gid + 1] the compensation,
// carried from launch to launch; the host checks them, so no load can be
// dropped.  The folds add ~(ERT_CHAINS + ERT_VW + 4) FLOPs per ERT_RO_FOLD *
// ERT_CHAINS * ERT_VW elements: not counted, and negligible.
#define ERT_RO_FOLD 64
#if ERT_BITS == 16
typedef float TA;
#if ERT_VW == 1
typedef float TAV;
#define TO_TAV(x) convert_float(x)
#else
typedef ERT_CAT(float, ERT_VW) TAV;
#define TO_TAV(x) ERT_CAT(convert_float, ERT_VW)(x)
#endif
#else
typedef T TA;
typedef TV TAV;
#define TO_TAV(x) (x)
#endif

#define RO_FOLD(acc, total, comp)                                   \
    {                                                               \
        _Pragma("unroll") for (int u = 1; u < ERT_CHAINS; ++u) acc[0] = acc[0] + acc[u]; \
        const TA s_ = HSUM(acc[0]);                                 \
        const TA y_ = s_ - comp;                                    \
        const TA sum_ = total + y_;                                 \
        comp = (sum_ - total) - y_;                                 \
        total = sum_;                                               \
        _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) acc[u] = (TAV)(0);     \
    }

__kernel void ert_ro(__global const TV* restrict buf, __global TA* restrict sums, const ulong n_vectors,
                     const ulong trials)
{
    const ulong gid = get_global_id(0), G = get_global_size(0);
    const ulong g_lo = GROUPS_BEGIN(n_vectors, gid, G), g_hi = GROUPS_END(n_vectors, gid, G);
    const ulong stride = GROUP_STRIDE(G);
    TA total = sums[2 * gid], comp = sums[2 * gid + 1];
    TAV acc[ERT_CHAINS];
    _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) acc[u] = (TAV)(0);
    for (ulong t = 0; t < trials; ++t) {
        for (ulong g0 = g_lo; g0 < g_hi; g0 += ERT_RO_FOLD) {
            const ulong g1 = min(g0 + ERT_RO_FOLD, g_hi);
            for (ulong g = g0; g < g1; ++g) {
                __global const TV* p = buf + GROUP_FIRST(g, gid, G);
                _Pragma("unroll") for (int u = 0; u < ERT_CHAINS; ++u) acc[u] = acc[u] + TO_TAV(p[u * stride]);
            }
            RO_FOLD(acc, total, comp)
        }
#if !ERT_CONTIGUOUS
        for (ulong j = g_hi * ERT_CHAINS * G + gid; j < n_vectors; j += G) acc[0] = acc[0] + TO_TAV(buf[j]);
        RO_FOLD(acc, total, comp)
#endif
    }
    sums[2 * gid] = total;
    sums[2 * gid + 1] = comp;
}
