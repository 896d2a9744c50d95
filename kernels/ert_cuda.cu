// The ERT kernels for the CUDA backend (compiled at run time by CuPy, at test time by nvcc).
//
// Specialised by compile-time defines; every one has a default, so the file
// also compiles with none given:
//
//   ERT_PRECISION  64 (double), 32 (float) or 16 (half, run as half2)   default 64
//   ERT_FLOPS      FLOPs per element: 1 (one add) or 2K (K multiply-adds),
//                  a power of two from 1 to 1024                          default 2
//   ERT_FMA        1: each multiply-add is one fused fma (__fma_rn, __fmaf_rn, __hfma2)
//                  0: a multiply and an add rounded separately (__dmul_rn + __dadd_rn,
//                     __fmul_rn + __fadd_rn, __hmul2_rn + __hadd2_rn), which the
//                     compiler never fuses                               default 1
//   ERT_RO         0: read+write (ERT's kernel ert_rw), 1: load-only sum (ert_ro)
//                  instead                                               default 0
//   ERT_INT        1: integer kernels (ERT_PRECISION 32: int32, 64: int64), read+write
//                  only, no fused form (ERT_FMA 0, its default here)     default 0
//   ERT_ADD_OPS    integer only: K > 0 makes ert_rw the add-only roof, K dependent
//                  adds b = b + c_t per element (ERT_FLOPS == K); 0: multiply-adds
//                                                                        default 0
//
// Integer kernels (schema 1.3/1.4 integer roofs, as on numba-cpu and OpenCL):
// the arithmetic is unsigned (wrapping modulo 2^bits, never undefined), and
// the bits are the int32/int64 the host replays (ert.backends.check.replay_rw_int):
//   ERT_FLOPS = 2K:              K x  b = b * a + c_t   (a madd: mad.lo / IMAD, 2 ops)
//   ERT_FLOPS = 1:               b = b + c_t            (1 op)
//   ERT_ADD_OPS = ERT_FLOPS = K: K x  b = b + c_t       (K ops, each an inline PTX add.s32 /
//                                                        add.s64 NVVM cannot fold into b + K c_t)
// with a = 1103515245 and c = 12345 passed at run time (the compiler cannot
// prove them constant) and c_t = +c on even trials, -c on odd ones.  Element e
// starts at 3 + 1000003 (e mod 16); ert_check compares every element exactly.
//
//
// The host also compiles with --maxrregcount = 64K registers / threads per SM
// (32 on 2048-thread SMs, 40 on 1536, 64 on 1024), so that a full SM of threads
// is resident at every block size: without it ptxas gives the FLOPs-1 and
// load-only kernels 40 registers on sm_90, 1600 threads per SM, not 2048, and
// every "one full wave" geometry ran as two waves with a low-occupancy tail.
// ERT_FMA is ignored when ERT_FLOPS is 1 (a single add), and both are when
// ERT_RO is 1 (one add per element).  Every module also holds ert_init.
//
// Per element per trial (the contract of ert.spec.KernelSpec; an element is
// one double, float or half; write-allocate traffic is not counted):
//
//   ert_rw, ERT_FLOPS = 1:   b = b + c_t                    1 FLOP,  sizeof(T) loaded + sizeof(T) stored
//   ert_rw, ERT_FLOPS = 2K:  K x  b = b * a + c_t            2K FLOPs, sizeof(T) loaded + sizeof(T) stored
//   ert_ro:                  acc = acc + b                  1 FLOP,  sizeof(T) loaded
//
// FP16 runs on half2 pairs, as ERT does: one __hfma2 is 2 fused multiply-adds
// on 2 elements (4 FLOPs), one __hadd2 is 2 adds (2 FLOPs).  Per element that
// is exactly the table above, so KernelSpec's per-element accounting (an
// element is one 2-byte half) holds unchanged; the host launches over half2
// units (n_units = elements / 2).
//
// c_t is +c on even trials and -c on odd ones, counted over every trial run
// since the buffer was initialised (trial_offset carries the count between
// launches), so the values depend on the parity of the total trial count and
// an off-by-one in the trial loop is caught by the host replay.  a < 1 keeps
// every value near +-1 for any trial count: no overflow, no denormals.
//
// The trial loop sits inside the kernel (as in ERT's GPU driver): one launch
// runs `ntrials` trials, so launch overhead is paid once per timed region, not
// once per trial, and an L1- or L2-sized working set stays resident between
// trials.  Each thread owns the units first, first + stride, ... (a grid-stride
// loop): the same units in every trial, so a block keeps its data in its SM's
// L1 for all its trials and no two threads ever touch one unit.
//
// Nothing is deleted by the compiler: ert_rw stores every unit every trial,
// and ert_ro ends by adding each thread's sum to its slot in memory.  Both
// results are read back and compared with a host replay
// (ert.backends.cuda_host), a stronger guard than a never-taken store.  The empty asm with a memory clobber at the
// end of each trial stops the compiler hoisting ert_ro's loads out of the
// trial loop or interchanging ert_rw's loops.

// FP16 uses cuda_fp16.h's half2 intrinsics where the header is found (nvcc;
// NVRTC's built-in headers) and the identical PTX instructions otherwise;
// -DERT_NO_FP16_HEADER forces the second path (the tests compile both).
#if !defined(ERT_NO_FP16_HEADER) && defined(__has_include)
#if __has_include(<cuda_fp16.h>)
#include <cuda_fp16.h>
#define ERT_HAVE_FP16_HEADER 1
#endif
#endif
#ifndef ERT_HAVE_FP16_HEADER
#define ERT_HAVE_FP16_HEADER 0
#endif

#ifndef ERT_PRECISION
#define ERT_PRECISION 64
#endif
#ifndef ERT_FLOPS
#define ERT_FLOPS 2
#endif
#ifndef ERT_INT
#define ERT_INT 0
#endif
#ifndef ERT_FMA
#define ERT_FMA (!ERT_INT)   // integers have no fused form
#endif
#ifndef ERT_RO
#define ERT_RO 0
#endif
#ifndef ERT_ADD_OPS
#define ERT_ADD_OPS 0
#endif

#if ERT_PRECISION == 32 && !ERT_INT
#define ERT_RW_UNROLL _Pragma("unroll 2")
#else
#define ERT_RW_UNROLL
#endif

// No __launch_bounds__: it would override --maxrregcount (see above), and
// its (threads, blocks) form cannot express 1536-thread SMs at 1024-thread blocks.
#define ERT_BOUNDS

#if ERT_FLOPS < 1 || ERT_FLOPS > 1024 || (ERT_FLOPS & (ERT_FLOPS - 1)) != 0
#error "ERT_FLOPS must be a power of two from 1 to 1024"
#endif

#if ERT_INT && (ERT_RO || ERT_FMA && ERT_FLOPS > 1)
#error "integer kernels are read+write and never fused (ERT_RO 0, ERT_FMA 0)"
#endif
#if ERT_ADD_OPS && (!ERT_INT || ERT_ADD_OPS != ERT_FLOPS || ERT_FLOPS < 2)
#error "ERT_ADD_OPS is the integer add-only kernel: ERT_INT 1 and ERT_ADD_OPS == ERT_FLOPS >= 2"
#endif

#if ERT_INT && ERT_PRECISION == 32
typedef unsigned int unit_t;         // int32 bits, wrapping arithmetic
typedef long long scalar_arg_t;      // a and c arrive as 64-bit integers, converted (wrapping)
__device__ __forceinline__ unit_t ert_init_unit(long long u) { return (unit_t)(3 + 1000003 * (u & 15)); }
__device__ __forceinline__ unit_t ert_add_asm(unit_t x, unit_t y) {
    unit_t r;
    asm("add.s32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
}
__device__ __forceinline__ unit_t ert_madd_int(unit_t x, unit_t a, unit_t c) { return x * a + c; }  // mad.lo.s32
#elif ERT_INT && ERT_PRECISION == 64
typedef unsigned long long unit_t;   // int64 bits, wrapping arithmetic
typedef long long scalar_arg_t;
__device__ __forceinline__ unit_t ert_init_unit(long long u) { return (unit_t)(3 + 1000003 * (u & 15)); }
__device__ __forceinline__ unit_t ert_add_asm(unit_t x, unit_t y) {
    unit_t r;
    asm("add.s64 %0, %1, %2;" : "=l"(r) : "l"(x), "l"(y));
    return r;
}
// NVVM writes a 64-bit x * a + c as mul.lo.s64 + add.s64, indistinguishable
// in the PTX from the index arithmetic; one mad.lo.s64 says what it is (ptxas
// expands it into the same 32-bit IMADs either way).
__device__ __forceinline__ unit_t ert_madd_int(unit_t x, unit_t a, unit_t c) {
    unit_t r;
    asm("mad.lo.s64 %0, %1, %2, %3;" : "=l"(r) : "l"(x), "l"(a), "l"(c));
    return r;
}
#elif ERT_INT
#error "integer kernels are 32 or 64 bits (ERT_PRECISION)"
#elif ERT_PRECISION == 64
typedef double unit_t;    // one element per unit
typedef double acc_t;     // the load-only sum's per-trial accumulator
__device__ __forceinline__ unit_t ert_from_double(double x) { return x; }
__device__ __forceinline__ unit_t ert_fma(unit_t x, unit_t y, unit_t z) { return __fma_rn(x, y, z); }
__device__ __forceinline__ unit_t ert_mul(unit_t x, unit_t y) { return __dmul_rn(x, y); }
__device__ __forceinline__ unit_t ert_add(unit_t x, unit_t y) { return __dadd_rn(x, y); }
__device__ __forceinline__ acc_t ert_sum_unit(acc_t acc, unit_t x) { return acc + x; }
__device__ __forceinline__ unit_t ert_init_unit(long long u) { return 0.5 + (double)(u & 15) * 0.0625; }
__device__ __forceinline__ double ert_lane(unit_t x, int lane) { return x; }
#elif ERT_PRECISION == 32
typedef float unit_t;
typedef float acc_t;
__device__ __forceinline__ unit_t ert_from_double(double x) { return (float)x; }
__device__ __forceinline__ unit_t ert_fma(unit_t x, unit_t y, unit_t z) { return __fmaf_rn(x, y, z); }
__device__ __forceinline__ unit_t ert_mul(unit_t x, unit_t y) { return __fmul_rn(x, y); }
__device__ __forceinline__ unit_t ert_add(unit_t x, unit_t y) { return __fadd_rn(x, y); }
__device__ __forceinline__ acc_t ert_sum_unit(acc_t acc, unit_t x) { return acc + x; }
__device__ __forceinline__ unit_t ert_init_unit(long long u) { return 0.5f + (float)(u & 15) * 0.0625f; }
__device__ __forceinline__ double ert_lane(unit_t x, int lane) { return (double)x; }
#elif ERT_PRECISION == 16 && ERT_HAVE_FP16_HEADER
typedef __half2 unit_t;   // two elements per unit
typedef float acc_t;      // halves are summed exactly in float: one add per element
__device__ __forceinline__ unit_t ert_from_double(double x) { return __float2half2_rn((float)x); }
__device__ __forceinline__ unit_t ert_fma(unit_t x, unit_t y, unit_t z) { return __hfma2(x, y, z); }
__device__ __forceinline__ unit_t ert_mul(unit_t x, unit_t y) { return __hmul2_rn(x, y); }
__device__ __forceinline__ unit_t ert_add(unit_t x, unit_t y) { return __hadd2_rn(x, y); }
__device__ __forceinline__ acc_t ert_sum_unit(acc_t acc, unit_t x) {
    const float2 f = __half22float2(x);
    return (acc + f.x) + f.y;
}
__device__ __forceinline__ unit_t ert_pack(float lo, float hi) { return __floats2half2_rn(lo, hi); }
__device__ __forceinline__ double ert_lane(unit_t x, int lane) {
    return (double)(lane ? __high2float(x) : __low2float(x));
}
#elif ERT_PRECISION == 16
// No cuda_fp16.h (an NVRTC without its built-in headers): the same half2
// instructions the intrinsics above emit, on the 32 bits of a half2.
typedef unsigned int unit_t;
typedef float acc_t;
__device__ __forceinline__ unit_t ert_pack(float lo, float hi) {
    unit_t r;
    asm("{ .reg .f16 l, h; cvt.rn.f16.f32 l, %1; cvt.rn.f16.f32 h, %2; mov.b32 %0, {l, h}; }"
        : "=r"(r) : "f"(lo), "f"(hi));
    return r;
}
__device__ __forceinline__ unit_t ert_from_double(double x) { return ert_pack((float)x, (float)x); }
__device__ __forceinline__ unit_t ert_fma(unit_t x, unit_t y, unit_t z) {
    unit_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(z));
    return r;
}
__device__ __forceinline__ unit_t ert_mul(unit_t x, unit_t y) {
    unit_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
}
__device__ __forceinline__ unit_t ert_add(unit_t x, unit_t y) {
    unit_t r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
}
__device__ __forceinline__ acc_t ert_sum_unit(acc_t acc, unit_t x) {
    float lo, hi;
    asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi) : "r"(x));
    return (acc + lo) + hi;
}
__device__ __forceinline__ double ert_lane(unit_t x, int lane) {
    float lo, hi;
    asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi) : "r"(x));
    return (double)(lane ? hi : lo);
}
#else
#error "ERT_PRECISION must be 64, 32 or 16"
#endif
#if !ERT_INT
typedef double scalar_arg_t;         // a and c of the floating-point kernels
#endif
#if ERT_PRECISION == 16 && !ERT_INT
#define ERT_LANES 2   // elements per unit
#else
#define ERT_LANES 1
#endif
#if ERT_PRECISION == 16 && !ERT_INT
__device__ __forceinline__ unit_t ert_init_unit(long long u) {
    // Unit u holds elements 2u (low half) and 2u + 1; element e starts at 0.5 + (e mod 16) / 16.
    const long long e = 2 * u;
    return ert_pack(0.5f + (float)(e & 15) * 0.0625f, 0.5f + (float)((e + 1) & 15) * 0.0625f);
}
#endif

// ERT_NAME_SUFFIX (default empty) renames the kernels, so one translation
// unit can hold several variants (the tests compile them in batches).
#ifndef ERT_NAME_SUFFIX
#define ERT_NAME_SUFFIX
#endif
#define ERT_CAT2(a, b) a##b
#define ERT_CAT(a, b) ERT_CAT2(a, b)
#define ERT_NAME(base) ERT_CAT(base, ERT_NAME_SUFFIX)

// The first unit of this thread and the distance between its units.
#define ERT_FIRST ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define ERT_STRIDE ((long long)gridDim.x * blockDim.x)

// Element e (unit e / 2 for half2) starts at 0.5 + (e mod 16) / 16, as the host replay assumes.
extern "C" __global__ void ERT_BOUNDS ERT_NAME(ert_init)(unit_t *data, long long n_units)
{
    for (long long u = ERT_FIRST; u < n_units; u += ERT_STRIDE) {
        data[u] = ert_init_unit(u);
    }
}

// The read+write check on the device: every element against the replay's 16
// values (exact in double for every precision), relative error above
// `tolerance` (or NaN) counted in bad[0], the lowest such element kept in
// bad[1] (the host starts it at ~0).  Only on a mismatch does the host copy
// the data back to say more; a passing point moves two words, not the set.
#if ERT_INT
// The integer form: every element equal to the replay's value, bit for bit
// (expected16 holds the 16 values as 64-bit words; int32 ones sign-extended,
// compared in their low 32 bits); ``tolerance`` is ignored.
extern "C" __global__ void ERT_BOUNDS ERT_NAME(ert_check)(const unit_t *data, long long n_units,
                                                          const unsigned long long *expected16,
                                                          double tolerance, unsigned long long *bad)
{
    (void)tolerance;
    for (long long u = ERT_FIRST; u < n_units; u += ERT_STRIDE) {
        if (data[u] != (unit_t)expected16[u & 15]) {
            atomicAdd(&bad[0], 1ULL);
            atomicMin(&bad[1], (unsigned long long)u);
        }
    }
}
#else
extern "C" __global__ void ERT_BOUNDS ERT_NAME(ert_check)(const unit_t *data, long long n_units, const double *expected16,
                                                          double tolerance, unsigned long long *bad)
{
    for (long long u = ERT_FIRST; u < n_units; u += ERT_STRIDE) {
        const unit_t x = data[u];
        for (int lane = 0; lane < ERT_LANES; ++lane) {
            const long long e = u * ERT_LANES + lane;
            const double want = expected16[e & 15];
            const double err = fabs(ert_lane(x, lane) - want) / fmax(fabs(want), 1.0);
            if (!(err <= tolerance)) {
                atomicAdd(&bad[0], 1ULL);
                atomicMin(&bad[1], (unsigned long long)e);
            }
        }
    }
}
#endif

// A busy launch of known length: every thread spins on the global nanosecond
// timer for `duration_ns`, so the SMs issue instructions the whole time and
// the clocks ramp up from idle before a point is timed (the host checks and
// compiles between points, and a GPU drops its clock when idle).
extern "C" __global__ void ERT_BOUNDS ERT_NAME(ert_spin)(long long duration_ns, unsigned long long *spins)
{
    unsigned long long start, now, count = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        ++count;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while ((long long)(now - start) < duration_ns);
    if (ERT_FIRST == 0) {
        spins[0] = count;  // one store keeps the loop: the host may read how often thread 0 spun
    }
}

#if !ERT_RO
// Read+write: every unit is loaded, run through ERT_FLOPS FLOPs per element and stored, every trial.
extern "C" __global__ void ERT_BOUNDS ERT_NAME(ert_rw)(unit_t *data, long long n_units, long long ntrials, long long trial_offset,
                                  scalar_arg_t a_value, scalar_arg_t c_value)
{
    const long long first = ERT_FIRST;
    const long long stride = ERT_STRIDE;
#if ERT_INT
    const unit_t a = (unit_t)a_value;
    const unit_t c_even = (unit_t)c_value;
    const unit_t c_odd = (unit_t)0 - (unit_t)c_value;  // -c, wrapping
#else
    const unit_t a = ert_from_double(a_value);
    const unit_t c_even = ert_from_double(c_value);
    const unit_t c_odd = ert_from_double(-c_value);
#endif
    (void)a;
    for (long long t = 0; t < ntrials; ++t) {
        const unit_t c = ((trial_offset + t) & 1) ? c_odd : c_even;
        // FP32 (float, not int32): the compiler's own unroll by 4 spills 8 bytes at the 32-register cap
        // under -ftz=true (which CuPy always adds) at 2 and 4 FLOPs; by 2 it does not.  Each unit's
        // load waits on the previous unit's store in either form, so the unroll adds no loads in flight.
        ERT_RW_UNROLL
        for (long long u = first; u < n_units; u += stride) {
            unit_t b = data[u];
#if ERT_INT && ERT_FLOPS == 1
            b = b + c;
#elif ERT_ADD_OPS
#pragma unroll
            for (int k = 0; k < ERT_ADD_OPS; ++k) {
                b = ert_add_asm(b, c);
            }
#elif ERT_INT
#pragma unroll
            for (int k = 0; k < ERT_FLOPS / 2; ++k) {
                b = ert_madd_int(b, a, c);
            }
#elif ERT_FLOPS == 1
            b = ert_add(b, c);
#else
#pragma unroll
            for (int k = 0; k < ERT_FLOPS / 2; ++k) {
#if ERT_FMA
                b = ert_fma(b, a, c);
#else
                b = ert_add(ert_mul(b, a), c);
#endif
            }
#endif
            data[u] = b;
        }
        asm volatile("" ::: "memory");
    }
}

#else
// Load-only: every unit is loaded and added to a per-thread sum, every trial.
// Each trial's sum is added to a double total (exact for the replay's values
// at any trial count), and the total is added to sums[first]: one slot per
// launched thread, accumulated over every launch since the host zeroed it,
// so a launch that skipped its work is caught too.
extern "C" __global__ void ERT_BOUNDS ERT_NAME(ert_ro)(const unit_t *data, long long n_units, long long ntrials, double *sums)
{
    const long long first = ERT_FIRST;
    const long long stride = ERT_STRIDE;
    double total = 0.0;
    for (long long t = 0; t < ntrials; ++t) {
        acc_t acc = 0;
        // Two loads in flight per thread; the compiler's own unroll by 4 spills
        // FP64 at the 32-register cap that keeps a full SM resident.
#pragma unroll 2
        for (long long u = first; u < n_units; u += stride) {
            acc = ert_sum_unit(acc, data[u]);
        }
        total += (double)acc;
        asm volatile("" ::: "memory");
    }
    sums[first] += total;
}
#endif
