// The tensor-core compute kernel (issue 16): warp-level mma.sync in inline PTX.
// Host logic: ert/backends/cuda_tensor.py; ert-run measures it (config key tensor).
// Never run on a GPU: compiled to PTX and cubin by the tests, its SASS read with cuobjdump.
// On sm_90 (H100) mma.sync is below the rate wgmma reaches: kernels/ert_cuda_wgmma.cu is Hopper's roof.
//
// Specialised by compile-time defines, each with a default (the file compiles with none):
//
//   ERT_MMA_TYPE   1 FP16 -> FP32   mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32     sm_80+   default 1
//                  2 BF16 -> FP32   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   sm_80+
//                  3 TF32 -> FP32   mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32    sm_80+
//                  4 FP64 -> FP64   mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64       sm_80+ (DMMA)
//                  5 FP8 e4m3 -> FP32  mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32  sm_89, sm_12x
//                    (native QMMA there; on sm_90, sm_100, sm_103 and sm_110 ptxas emulates it with
//                    F2FP conversions and HMMA, and folds the identical products of a trial into
//                    2 HMMA + 256 FADD: refused below)
//                  6 INT8 -> INT32  mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32      sm_80+ (IMMA)
//                  7 FP64 -> FP64   mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64     sm_90 only
//                    (native DMMA.16x8x16 there; ptxas for sm_100 and sm_12x splits it into 8
//                    DMMA.8x8x4, and sm_80 refuses it: refused below off sm_90)
//   ERT_MMA_ITERS  MMAs per warp per trial, fully unrolled (a multiple of ERT_MMA_SETS)  default 64
//   ERT_MMA_SETS   independent accumulator sets, used round-robin: consecutive MMAs
//                  never depend on each other, so the tensor pipe stays busy     default 8
//   ERT_NAME_SUFFIX  renames the kernel (the tests batch many variants in one file)
//
// FLOPs per MMA, 2*M*N*K (a multiply-add counted as 2), per warp:
//   m16n8k16 (FP16, BF16):  2*16*8*16 = 4096
//   m16n8k8  (TF32):        2*16*8*8  = 2048
//   m8n8k4   (FP64):        2*8*8*4   =  512
//   m16n8k32 (FP8 e4m3):    2*16*8*32 = 8192
//   m16n8k32 (INT8):        2*16*8*32 = 8192 integer operations (the same count, in IOPs)
//   m16n8k16 (FP64, sm_90): 2*16*8*16 = 4096
// One launch does warps x ntrials x ERT_MMA_ITERS MMAs.
//
// Data: every A element is the value whose bits are a_bits, every B element
// +b on even trials and -b on odd ones (the sign bit of each packed element
// flipped); the accumulators start at small integers (set, register, lane).
// With a = 1 and b = 1/2 (the host's choice) each MMA adds +-K/2 to every
// accumulator element, exactly in FP32 or FP64, so after T trials each holds
// its start value + (T odd ? ERT_MMA_ITERS / ERT_MMA_SETS * K / 2 : 0): the
// host replays it (ert.backends.cuda_tensor.replay) and an off-by-one in the
// trial count, or MMAs not done, shows.
// INT8: the same scheme in integers.  B's negation is per byte (two's
// complement, __vneg4), not a sign bit; with a = 1 and b = 1 (the host's choice)
// each MMA adds +-K = +-32 to every s32 accumulator, a trial +-32 * ITERS / SETS
// (256 at the defaults), and the next trial takes it back: every accumulator
// stays within [start, start + 256], far from the s32 range for any trial
// count, and a skipped MMA leaves 32 less after an odd count.
//
// Nothing is dead: every accumulator of every lane is stored at the end (a
// stronger guard than a never-taken store), each set's MMAs form a dependent
// chain (D = A*B + D), and the operands come from kernel arguments, so the
// compiler can neither fold nor drop an MMA.  The trial loop is not unrolled
// (#pragma unroll 1); the MMA loop is, so the PTX holds ERT_MMA_ITERS mma.sync
// per trial.  The PTX is not what runs: ptxas may still emulate or fold, so the
// tests (and ert on the GPU, where cuobjdump is found) count the SASS: exactly
// ERT_MMA_ITERS HMMA / DMMA / QMMA / IMMA, and no other tensor instruction.

#ifndef ERT_MMA_TYPE
#define ERT_MMA_TYPE 1
#endif
#ifndef ERT_MMA_ITERS
#define ERT_MMA_ITERS 64
#endif
#ifndef ERT_MMA_SETS
#define ERT_MMA_SETS 8
#endif
#ifndef ERT_NAME_SUFFIX
#define ERT_NAME_SUFFIX
#endif
#define ERT_MMA_CAT2(a, b) a##b
#define ERT_MMA_CAT(a, b) ERT_MMA_CAT2(a, b)
#define ERT_MMA_NAME(base) ERT_MMA_CAT(base, ERT_NAME_SUFFIX)

#if ERT_MMA_SETS < 1 || ERT_MMA_ITERS < ERT_MMA_SETS || ERT_MMA_ITERS % ERT_MMA_SETS != 0
#error "ERT_MMA_ITERS must be a positive multiple of ERT_MMA_SETS"
#endif

// The architecture guard: mma.sync of these shapes needs sm_80; FP8 runs natively on sm_89 and sm_12x only.
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ < 800
#error "the tensor-core kernel needs sm_80 or newer"
#endif
#if ERT_MMA_TYPE == 7 && (__CUDA_ARCH__ < 900 || __CUDA_ARCH__ >= 1000)
#error "FP64 m16n8k16 mma.sync is native (DMMA.16x8x16) on sm_90 only"
#endif
#if ERT_MMA_TYPE == 5 && __CUDA_ARCH__ < 890
#error "FP8 (e4m3) mma.sync needs sm_89 or newer"
#endif
// (ERT_TEST_EMULATED_FP8 lets tests/test_cuda_tensor.py compile it anyway, to show the SASS check refuse it.)
#if ERT_MMA_TYPE == 5 && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200 && !defined(ERT_TEST_EMULATED_FP8)
#error "FP8 (e4m3) mma.sync is emulated by ptxas on sm_90 to sm_11x (F2FP + HMMA): no FP8 roof from it there"
#endif
#endif

#if ERT_MMA_TYPE >= 1 && ERT_MMA_TYPE <= 3 || ERT_MMA_TYPE == 5 || ERT_MMA_TYPE == 6
// A: 4 x .b32, B: 2 x .b32, C/D: 4 x .f32 (INT8: .s32) per thread for every 32-bit-accumulating shape here.
#define ERT_ACC 4
#if ERT_MMA_TYPE == 6
typedef int acc_t;
#define ERT_ACC_CONSTRAINT "+r"
#else
typedef float acc_t;
#define ERT_ACC_CONSTRAINT "+f"
#endif
#if ERT_MMA_TYPE == 1
#define ERT_MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define ERT_SIGN 0x80008000u
#elif ERT_MMA_TYPE == 2
#define ERT_MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define ERT_SIGN 0x80008000u
#elif ERT_MMA_TYPE == 3
#define ERT_MMA_OP "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
#define ERT_SIGN 0x80000000u
#elif ERT_MMA_TYPE == 5
#define ERT_MMA_OP "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
#define ERT_SIGN 0x80808080u
#else
#define ERT_MMA_OP "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
#endif
typedef unsigned int word_t;
__device__ __forceinline__ void ert_mma(acc_t *d, const word_t *a, const word_t *b) {
    asm(ERT_MMA_OP " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : ERT_ACC_CONSTRAINT(d[0]), ERT_ACC_CONSTRAINT(d[1]), ERT_ACC_CONSTRAINT(d[2]), ERT_ACC_CONSTRAINT(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#define ERT_A_REGS 4
#define ERT_B_REGS 2
__device__ __forceinline__ word_t ert_word(unsigned long long bits) { return (word_t)bits; }
#if ERT_MMA_TYPE == 6
// Every s8 of the word negated (two's complement, byte by byte).
__device__ __forceinline__ word_t ert_negate(word_t w) { return __vneg4(w); }
#else
__device__ __forceinline__ word_t ert_negate(word_t w) { return w ^ ERT_SIGN; }
#endif
#elif ERT_MMA_TYPE == 4
// A: 1 x .f64, B: 1 x .f64, C/D: 2 x .f64 per thread.
typedef double acc_t;
#define ERT_ACC 2
#define ERT_A_REGS 1
#define ERT_B_REGS 1
typedef double word_t;
__device__ __forceinline__ void ert_mma(double *d, const word_t *a, const word_t *b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d[0]), "+d"(d[1]) : "d"(a[0]), "d"(b[0]));
}
__device__ __forceinline__ word_t ert_word(unsigned long long bits) { return __longlong_as_double((long long)bits); }
__device__ __forceinline__ word_t ert_negate(word_t w) { return -w; }
#elif ERT_MMA_TYPE == 7
// A: 8 x .f64, B: 4 x .f64, C/D: 4 x .f64 per thread.
typedef double acc_t;
#define ERT_ACC 4
#define ERT_A_REGS 8
#define ERT_B_REGS 4
typedef double word_t;
__device__ __forceinline__ void ert_mma(double *d, const word_t *a, const word_t *b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, %11}, "
        "{%12, %13, %14, %15}, {%0, %1, %2, %3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
          "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
}
__device__ __forceinline__ word_t ert_word(unsigned long long bits) { return __longlong_as_double((long long)bits); }
__device__ __forceinline__ word_t ert_negate(word_t w) { return -w; }
#else
#error "ERT_MMA_TYPE must be 1 (FP16), 2 (BF16), 3 (TF32), 4 (FP64), 5 (FP8 e4m3), 6 (INT8) or 7 (FP64 m16n8k16)"
#endif

// out: ERT_MMA_SETS * ERT_ACC accumulators per thread, thread-major
// (out[(global thread) * SETS * ACC + set * ACC + register]).
extern "C" __global__ void ERT_MMA_NAME(ert_mma)(acc_t *out, long long ntrials,
                                                  unsigned long long a_bits, unsigned long long b_bits)
{
    const int lane = threadIdx.x & 31;
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    word_t a[ERT_A_REGS], bpos[ERT_B_REGS], bneg[ERT_B_REGS];
#pragma unroll
    for (int i = 0; i < ERT_A_REGS; ++i) a[i] = ert_word(a_bits);
#pragma unroll
    for (int i = 0; i < ERT_B_REGS; ++i) {
        bpos[i] = ert_word(b_bits);
        bneg[i] = ert_negate(bpos[i]);
    }
    acc_t acc[ERT_MMA_SETS][ERT_ACC];
#pragma unroll
    for (int s = 0; s < ERT_MMA_SETS; ++s)
#pragma unroll
        for (int r = 0; r < ERT_ACC; ++r) acc[s][r] = (acc_t)(s * ERT_ACC + r + lane);

#pragma unroll 1
    for (long long t = 0; t < ntrials; ++t) {
        word_t b[ERT_B_REGS];
#pragma unroll
        for (int i = 0; i < ERT_B_REGS; ++i) b[i] = (t & 1) ? bneg[i] : bpos[i];
#pragma unroll
        for (int i = 0; i < ERT_MMA_ITERS; ++i) ert_mma(acc[i % ERT_MMA_SETS], a, b);
    }

    acc_t *mine = out + thread * (ERT_MMA_SETS * ERT_ACC);
#pragma unroll
    for (int s = 0; s < ERT_MMA_SETS; ++s)
#pragma unroll
        for (int r = 0; r < ERT_ACC; ++r) mine[s * ERT_ACC + r] = acc[s][r];
}
