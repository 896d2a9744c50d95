// The Hopper tensor-core kernel (issue 23): warpgroup-level wgmma.mma_async (sm_90a) in inline PTX.
// Host logic: ert/backends/cuda_tensor.py (WGMMA_SHAPES).  NEVER RUN ON A GPU: compiled with nvcc for
// sm_90a and its SASS read by the tests (tests/test_cuda_tensor.py), nothing more.
//
// Why a second kernel: on sm_90 warp-level mma.sync (kernels/ert_cuda_tensor.cu) cannot reach the rate
// H100 reaches with wgmma (cuBLAS's instruction), and FP8 mma.sync is emulated there (ptxas turns it into
// F2FP conversions and HMMA), so Hopper's FP8 roof comes from this kernel only.
//
// Specialised by compile-time defines, each with a default (the file compiles with none):
//
//   ERT_WGMMA_TYPE  1 FP16 -> FP32      wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16     default 1
//                   2 BF16 -> FP32      wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
//                   3 TF32 -> FP32      wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32
//                   4 FP8 e4m3 -> FP32  wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3
//                   5 INT8 -> INT32     wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8
//   ERT_WGMMA_ITERS  wgmmas per warpgroup per trial, fully unrolled, all on one accumulator  default 64
//   ERT_NAME_SUFFIX  renames the kernel (the tests batch many variants in one file)
//
// Needs the architecture-specific target sm_90a (nvcc -arch=sm_90a, NVRTC --gpu-architecture=sm_90a):
// plain sm_90 has no wgmma, and any other architecture is refused by an #error.
//
// FLOPs per wgmma, 2*M*N*K (a multiply-add counted as 2), per warpgroup (4 warps, 128 threads):
//   m64n256k16 (FP16, BF16):  2*64*256*16 =   524288
//   m64n256k8  (TF32):        2*64*256*8  =   262144
//   m64n256k32 (FP8 e4m3):    2*64*256*32 =  1048576
//   m64n256k32 (INT8):        2*64*256*32 =  1048576 integer operations
// One launch does warpgroups x ntrials x ERT_WGMMA_ITERS wgmmas (blocks of whole warpgroups).
//
// Operands: A (64 x K) and B (K x N = 256) come from shared memory through 64-bit matrix descriptors,
// K-major, no swizzle: core matrices of 8 rows x 16 bytes, 128 bytes apart along K (leading byte offset)
// and 256 bytes apart along M / N (stride byte offset); every row of either operand holds K elements =
// 32 bytes = 2 core matrices, so A takes 2 KB and B 8 KB.  Every element of A is the value whose bits
// are a_bits; B has two copies, every element +b in one and -b (the sign bits flipped) in the other, and
// trial t reads the +b copy when t is even and the -b copy when it is odd.  Because every element of A
// and of B is the same, every element of A*B is K*a*b whatever the layout, and the result depends on no
// layout detail: the accumulators (128 f32 registers per thread) start at (register + lane), each
// wgmma adds +-K*a*b to every one of them, and after T trials each holds its start value +
// (T odd ? ERT_WGMMA_ITERS * K * a * b : 0).  With a = 1, b = 1/2 (the host's choice) every value is
// exact in FP32: the host replays it (ert.backends.cuda_tensor.replay, one accumulator set of 128), and
// a skipped wgmma or an off-by-one trial count shows.
// INT8: the same in s32 accumulators, the -b copy negated byte by byte (__vneg4), a = 1 and b = 1: each
// wgmma adds +-K = +-32, a trial +-32 * ERT_WGMMA_ITERS (2048 at the default), the next takes it back, so
// every accumulator stays within [start, start + 2048] for any trial count (no s32 overflow).
//
// Nothing is dead: every accumulator of every thread is stored, the wgmmas of a warpgroup form one
// dependent chain on its accumulators, and the operands are in shared memory filled from kernel
// arguments at run time.  The SASS (tests/test_cuda_tensor.py, and ert's own check on the GPU where
// cuobjdump is found) holds exactly ERT_WGMMA_ITERS HGMMA (FP8: QGMMA, INT8: IGMMA) instructions.

#ifndef ERT_WGMMA_TYPE
#define ERT_WGMMA_TYPE 1
#endif
#ifndef ERT_WGMMA_ITERS
#define ERT_WGMMA_ITERS 64
#endif
#ifndef ERT_NAME_SUFFIX
#define ERT_NAME_SUFFIX
#endif
#define ERT_WG_CAT2(a, b) a##b
#define ERT_WG_CAT(a, b) ERT_WG_CAT2(a, b)
#define ERT_WG_NAME(base) ERT_WG_CAT(base, ERT_NAME_SUFFIX)

#if ERT_WGMMA_ITERS < 1
#error "ERT_WGMMA_ITERS must be positive"
#endif

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the wgmma kernel needs the architecture-specific target sm_90a (-arch=sm_90a)"
#endif

#if ERT_WGMMA_TYPE == 1
#define ERT_WGMMA_OP "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"
#define ERT_WGMMA_TAIL ", 1, 1, 0, 0;"  // imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b
#define ERT_WG_SIGN 0x80008000u
#elif ERT_WGMMA_TYPE == 2
#define ERT_WGMMA_OP "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"
#define ERT_WGMMA_TAIL ", 1, 1, 0, 0;"
#define ERT_WG_SIGN 0x80008000u
#elif ERT_WGMMA_TYPE == 3
#define ERT_WGMMA_OP "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32"
#define ERT_WGMMA_TAIL ", 1, 1;"        // imm-scale-a, imm-scale-b (K-major only: no transpose)
#define ERT_WG_SIGN 0x80000000u
#elif ERT_WGMMA_TYPE == 4
#define ERT_WGMMA_OP "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"
#define ERT_WGMMA_TAIL ", 1, 1;"
#define ERT_WG_SIGN 0x80808080u
#elif ERT_WGMMA_TYPE == 5
#define ERT_WGMMA_OP "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8"
#define ERT_WGMMA_TAIL ";"              // integer wgmma takes no scale or transpose immediates
#define ERT_WG_INT 1
#else
#error "ERT_WGMMA_TYPE must be 1 (FP16), 2 (BF16), 3 (TF32), 4 (FP8 e4m3) or 5 (INT8)"
#endif

#ifdef ERT_WG_INT
typedef int wg_acc_t;
#define ERT_WG_C "+r"
// Every s8 of the word negated (two's complement, byte by byte).
__device__ __forceinline__ unsigned int ert_wg_negate(unsigned int w) { return __vneg4(w); }
#else
typedef float wg_acc_t;
#define ERT_WG_C "+f"
__device__ __forceinline__ unsigned int ert_wg_negate(unsigned int w) { return w ^ ERT_WG_SIGN; }
#endif

#define ERT_WG_ACC 128           // f32 (INT8: s32) accumulators per thread: M*N / 128 threads
#define ERT_WG_A_BYTES 2048      // 64 rows x 32 bytes
#define ERT_WG_B_BYTES 8192      // 256 rows x 32 bytes

// One wgmma: d (128 f32 or s32 per thread) += A (descriptor) * B (descriptor).
__device__ __forceinline__ void ert_wgmma(wg_acc_t *d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        ERT_WGMMA_OP " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p" ERT_WGMMA_TAIL "\n}\n"
        : ERT_WG_C(d[0]), ERT_WG_C(d[1]), ERT_WG_C(d[2]), ERT_WG_C(d[3]), ERT_WG_C(d[4]), ERT_WG_C(d[5]), ERT_WG_C(d[6]), ERT_WG_C(d[7]),
          ERT_WG_C(d[8]), ERT_WG_C(d[9]), ERT_WG_C(d[10]), ERT_WG_C(d[11]), ERT_WG_C(d[12]), ERT_WG_C(d[13]), ERT_WG_C(d[14]), ERT_WG_C(d[15]),
          ERT_WG_C(d[16]), ERT_WG_C(d[17]), ERT_WG_C(d[18]), ERT_WG_C(d[19]), ERT_WG_C(d[20]), ERT_WG_C(d[21]), ERT_WG_C(d[22]), ERT_WG_C(d[23]),
          ERT_WG_C(d[24]), ERT_WG_C(d[25]), ERT_WG_C(d[26]), ERT_WG_C(d[27]), ERT_WG_C(d[28]), ERT_WG_C(d[29]), ERT_WG_C(d[30]), ERT_WG_C(d[31]),
          ERT_WG_C(d[32]), ERT_WG_C(d[33]), ERT_WG_C(d[34]), ERT_WG_C(d[35]), ERT_WG_C(d[36]), ERT_WG_C(d[37]), ERT_WG_C(d[38]), ERT_WG_C(d[39]),
          ERT_WG_C(d[40]), ERT_WG_C(d[41]), ERT_WG_C(d[42]), ERT_WG_C(d[43]), ERT_WG_C(d[44]), ERT_WG_C(d[45]), ERT_WG_C(d[46]), ERT_WG_C(d[47]),
          ERT_WG_C(d[48]), ERT_WG_C(d[49]), ERT_WG_C(d[50]), ERT_WG_C(d[51]), ERT_WG_C(d[52]), ERT_WG_C(d[53]), ERT_WG_C(d[54]), ERT_WG_C(d[55]),
          ERT_WG_C(d[56]), ERT_WG_C(d[57]), ERT_WG_C(d[58]), ERT_WG_C(d[59]), ERT_WG_C(d[60]), ERT_WG_C(d[61]), ERT_WG_C(d[62]), ERT_WG_C(d[63]),
          ERT_WG_C(d[64]), ERT_WG_C(d[65]), ERT_WG_C(d[66]), ERT_WG_C(d[67]), ERT_WG_C(d[68]), ERT_WG_C(d[69]), ERT_WG_C(d[70]), ERT_WG_C(d[71]),
          ERT_WG_C(d[72]), ERT_WG_C(d[73]), ERT_WG_C(d[74]), ERT_WG_C(d[75]), ERT_WG_C(d[76]), ERT_WG_C(d[77]), ERT_WG_C(d[78]), ERT_WG_C(d[79]),
          ERT_WG_C(d[80]), ERT_WG_C(d[81]), ERT_WG_C(d[82]), ERT_WG_C(d[83]), ERT_WG_C(d[84]), ERT_WG_C(d[85]), ERT_WG_C(d[86]), ERT_WG_C(d[87]),
          ERT_WG_C(d[88]), ERT_WG_C(d[89]), ERT_WG_C(d[90]), ERT_WG_C(d[91]), ERT_WG_C(d[92]), ERT_WG_C(d[93]), ERT_WG_C(d[94]), ERT_WG_C(d[95]),
          ERT_WG_C(d[96]), ERT_WG_C(d[97]), ERT_WG_C(d[98]), ERT_WG_C(d[99]), ERT_WG_C(d[100]), ERT_WG_C(d[101]), ERT_WG_C(d[102]), ERT_WG_C(d[103]),
          ERT_WG_C(d[104]), ERT_WG_C(d[105]), ERT_WG_C(d[106]), ERT_WG_C(d[107]), ERT_WG_C(d[108]), ERT_WG_C(d[109]), ERT_WG_C(d[110]), ERT_WG_C(d[111]),
          ERT_WG_C(d[112]), ERT_WG_C(d[113]), ERT_WG_C(d[114]), ERT_WG_C(d[115]), ERT_WG_C(d[116]), ERT_WG_C(d[117]), ERT_WG_C(d[118]), ERT_WG_C(d[119]),
          ERT_WG_C(d[120]), ERT_WG_C(d[121]), ERT_WG_C(d[122]), ERT_WG_C(d[123]), ERT_WG_C(d[124]), ERT_WG_C(d[125]), ERT_WG_C(d[126]), ERT_WG_C(d[127])
        : "l"(desc_a), "l"(desc_b));
}

// The descriptor of a K-major, unswizzled operand at shared-memory byte address addr.
__device__ __forceinline__ unsigned long long ert_desc(unsigned int addr) {
    const unsigned long long start = (addr & 0x3FFFF) >> 4;
    const unsigned long long leading = 128 >> 4, stride = 256 >> 4;
    return start | (leading << 16) | (stride << 32);  // bits 62-63 = 0: no swizzle
}

// out: ERT_WG_ACC accumulators per thread, thread-major (out[(global thread) * 128 + register]).
extern "C" __global__ void __launch_bounds__(384) ERT_WG_NAME(ert_wgmma)(wg_acc_t *out, long long ntrials,
                                                                        unsigned long long a_bits,
                                                                        unsigned long long b_bits)
{
    __shared__ __align__(256) unsigned int smem_a[ERT_WG_A_BYTES / 4];
    __shared__ __align__(256) unsigned int smem_b[2][ERT_WG_B_BYTES / 4];
    const unsigned int a_word = (unsigned int)a_bits, b_word = (unsigned int)b_bits;
    for (int i = threadIdx.x; i < ERT_WG_A_BYTES / 4; i += blockDim.x) smem_a[i] = a_word;
    for (int i = threadIdx.x; i < ERT_WG_B_BYTES / 4; i += blockDim.x) {
        smem_b[0][i] = b_word;
        smem_b[1][i] = ert_wg_negate(b_word);
    }
    // Generic-proxy stores made visible to the async proxy that wgmma reads shared memory through.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();

    const int lane = threadIdx.x & 31;
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long desc_a = ert_desc((unsigned int)__cvta_generic_to_shared(smem_a));
    const unsigned long long desc_bpos = ert_desc((unsigned int)__cvta_generic_to_shared(smem_b[0]));
    const unsigned long long desc_bneg = ert_desc((unsigned int)__cvta_generic_to_shared(smem_b[1]));
    wg_acc_t d[ERT_WG_ACC];
#pragma unroll
    for (int r = 0; r < ERT_WG_ACC; ++r) d[r] = (wg_acc_t)(r + lane);

    // The accumulators were written by ordinary instructions: fence before the first wgmma reads them.
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll 1
    for (long long t = 0; t < ntrials; ++t) {
        const unsigned long long b = (t & 1) ? desc_bneg : desc_bpos;
#pragma unroll
        for (int i = 0; i < ERT_WGMMA_ITERS; ++i) ert_wgmma(d, desc_a, b);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // Keep one trial's group in flight: the tensor cores never wait for the issue of the next trial.
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

    wg_acc_t *mine = out + thread * ERT_WG_ACC;
#pragma unroll
    for (int r = 0; r < ERT_WG_ACC; ++r) mine[r] = d[r];
}
