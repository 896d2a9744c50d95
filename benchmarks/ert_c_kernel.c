/*
 * ert_c_kernel.c: the ERT read-modify-write kernel in C with OpenMP, as a
 * yardstick for the Numba backend (benchmarks/numba_vs_c.py builds and runs it).
 *
 * Same recurrence and data layout as kernels/numba_cpu.py:
 *
 *   - one array; each of T threads owns a contiguous, 64-byte-aligned block of
 *     n elements, n a multiple of GRANULE_BYTES / sizeof(real) (512 bytes);
 *   - each thread first-touches its own block: b[i] = 0.5 + (i % 16) * 0.0625;
 *   - trial tr uses ct = +c when (tr + offset) is even, -c when odd, where
 *     offset counts every trial run on the buffer since initialisation;
 *   - flops = 1:  b[i] = b[i] + ct
 *     flops = 2K: for each 512-byte sub-block, K times: sub[j] = sub[j]*a + ct
 *     (fused in the default build, which needs -ffp-contract=fast; -DERT_NO_FMA
 *      with -ffp-contract=off rounds the multiply and the add separately).
 *
 * Timing as in the original ERT: the trial loop runs inside the parallel
 * region; barrier, clock, every thread runs all its trials, barrier, clock.
 * The trial count is doubled until one region lasts >= min_seconds, then
 * `repeats` regions are timed.  Afterwards every element is compared with a
 * host replay of the recurrence, so the compiler cannot drop any of the work.
 * The replay does the same roundings (fma() in the FMA build), so a correct
 * run matches it bit for bit.  (That does not prove the vector code fused:
 * after many trials fused and unfused runs settle on the same values; the
 * assembly shows it, see benchmarks/numba_vs_c.py.)
 *
 * Usage: ert_c_kernel PRECISION FLOPS THREADS WSS_BYTES MIN_SECONDS REPEATS
 *   PRECISION fp64 | fp32; WSS_BYTES is the total over all threads; FLOPS 0 is
 *   the read-only kernel (a sum per trial, fp64 only; 8 bytes per element).
 * Prints one JSON line on stdout; exit status 0 only if the check passed.
 */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GRANULE_BYTES 512
#define ALIGN_BYTES 64
#define REC_A 0.9375
#define REC_C 0.0625

#ifdef ERT_NO_FMA
/* Built with -ffp-contract=off: the multiply and the add round separately. */
#define MADD(x, a, c) ((x) * (a) + (c))
#define MADDF(x, a, c) ((x) * (a) + (c))
#define FMA_NAME "false"
#else
/* fma() in the scalar code; the vector code relies on -ffp-contract=fast. */
#define MADD(x, a, c) fma((x), (a), (c))
#define MADDF(x, a, c) fmaf((x), (a), (c))
#define FMA_NAME "true"
#endif

#ifdef ERT_PLAIN_C
#define VARIANT_NAME "plain"
#else
#define VARIANT_NAME "vector"
#endif

/* 64-byte vectors (one zmm register); a 512-byte sub-block is 8 of them. */
typedef double vf64 __attribute__((vector_size(64), aligned(64), may_alias));
typedef float vf32 __attribute__((vector_size(64), aligned(64), may_alias));

/*
 * One kernel per precision.
 *
 * rw_add is the plain loop: GCC vectorises it by itself.
 *
 * rw_madd keeps the 512-byte sub-block in registers for its K multiply-adds
 * (the same computation as the Numba kernel, where LLVM does this on its own).
 * The default build writes the sub-block as 8 GCC vectors r0..r7, which GCC
 * keeps in 8 zmm registers; with -DERT_PLAIN_C it is a local array of W
 * scalars, which GCC also vectorises but copies through the stack once per
 * sub-block (measured ~10-20% slower at the compute peak).
 */
#ifdef ERT_PLAIN_C
#define MADD_SUBBLOCK(real, VEC, MADD_OP)                                                  \
    {                                                                                      \
        enum { W = GRANULE_BYTES / sizeof(real) };                                         \
        real *restrict sub = blk + i0;                                                     \
        real v[W];                                                                         \
        for (int j = 0; j < W; j++) v[j] = sub[j];                                         \
        for (int k = 0; k < k_ops; k++)                                                    \
            for (int j = 0; j < W; j++) v[j] = MADD_OP(v[j], a, ct);                       \
        for (int j = 0; j < W; j++) sub[j] = v[j];                                         \
    }
#else
#define MADD_SUBBLOCK(real, VEC, MADD_OP)                                                  \
    {                                                                                      \
        VEC *sub = (VEC *)(blk + i0);                                                      \
        VEC r0 = sub[0], r1 = sub[1], r2 = sub[2], r3 = sub[3];                            \
        VEC r4 = sub[4], r5 = sub[5], r6 = sub[6], r7 = sub[7];                            \
        for (int k = 0; k < k_ops; k++) {                                                  \
            r0 = r0 * a + ct; r1 = r1 * a + ct; r2 = r2 * a + ct; r3 = r3 * a + ct;        \
            r4 = r4 * a + ct; r5 = r5 * a + ct; r6 = r6 * a + ct; r7 = r7 * a + ct;        \
        }                                                                                  \
        sub[0] = r0; sub[1] = r1; sub[2] = r2; sub[3] = r3;                                \
        sub[4] = r4; sub[5] = r5; sub[6] = r6; sub[7] = r7;                                \
    }
#endif

#define DEFINE_KERNELS(real, SUFFIX, VEC, MADD_OP)                                         \
    _Static_assert(8 * sizeof(VEC) == GRANULE_BYTES, "a sub-block is 8 vectors");          \
    static void rw_add_##SUFFIX(real *restrict blk, size_t n, long trials, long offset,    \
                                real c) {                                                  \
        blk = __builtin_assume_aligned(blk, ALIGN_BYTES);                                  \
        for (long tr = 0; tr < trials; tr++) {                                             \
            const real ct = ((tr + offset) % 2 == 0) ? c : -c;                             \
            for (size_t i = 0; i < n; i++) blk[i] = blk[i] + ct;                           \
        }                                                                                  \
    }                                                                                      \
    static void rw_madd_##SUFFIX(real *restrict blk, size_t n, long trials, long offset,   \
                                 int k_ops, real a, real c) {                              \
        enum { W = GRANULE_BYTES / sizeof(real) };                                         \
        blk = __builtin_assume_aligned(blk, ALIGN_BYTES);                                  \
        for (long tr = 0; tr < trials; tr++) {                                             \
            const real ct = ((tr + offset) % 2 == 0) ? c : -c;                             \
            for (size_t i0 = 0; i0 < n; i0 += W) MADD_SUBBLOCK(real, VEC, MADD_OP)         \
        }                                                                                  \
    }                                                                                      \
    /* Host replay of the 16 starting values, same operations in the same order. */        \
    static void replay_##SUFFIX(real x[16], int k_ops, long trials, real a, real c) {      \
        real hist[3][16];                                                                  \
        int have = 0;                                                                      \
        for (int i = 0; i < 16; i++) x[i] = (real)(0.5 + (i % 16) * 0.0625);               \
        for (long tr = 0; tr < trials; tr++) {                                             \
            const real ct = (tr % 2 == 0) ? c : -c;                                        \
            for (int i = 0; i < 16; i++) {                                                 \
                if (k_ops == 0)                                                            \
                    x[i] = x[i] + ct;                                                      \
                else                                                                       \
                    for (int k = 0; k < k_ops; k++) x[i] = MADD_OP(x[i], a, ct);           \
            }                                                                              \
            memmove(hist[0], hist[1], sizeof hist[0] * 2);                                 \
            memcpy(hist[2], x, sizeof hist[2]);                                            \
            if (++have >= 3 && memcmp(hist[2], hist[0], sizeof hist[0]) == 0) {           \
                /* period 2: the state after `trials` has the parity of what is left */    \
                if ((trials - 1 - tr) % 2 != 0) memcpy(x, hist[1], sizeof hist[1]);        \
                return;                                                                    \
            }                                                                              \
        }                                                                                  \
    }

/*
 * Read-only (FLOPS 0, fp64 only): each trial sums the thread's block with 8
 * vector accumulators, as ert's load-only kernel does.  The block never
 * changes, so an empty asm with a memory clobber at every trial stops GCC
 * from summing once and reusing the result; the sums are checked (exact:
 * the values are multiples of 1/16 and n < 2^40).
 */
static double ro_sum_f64(const double *restrict blk, size_t n, long trials) {
    blk = __builtin_assume_aligned(blk, ALIGN_BYTES);
    double total = 0.0;
    for (long tr = 0; tr < trials; tr++) {
        __asm__ volatile("" : : "r"(blk) : "memory");
        vf64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
        for (size_t i0 = 0; i0 < n; i0 += 64) {
            const vf64 *sub = (const vf64 *)(blk + i0);
            a0 += sub[0]; a1 += sub[1]; a2 += sub[2]; a3 += sub[3];
            a4 += sub[4]; a5 += sub[5]; a6 += sub[6]; a7 += sub[7];
        }
        vf64 acc = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
        double s = 0.0;
        for (int j = 0; j < 8; j++) s += acc[j];
        total += s;
    }
    return total;
}

DEFINE_KERNELS(double, f64, vf64, MADD)
DEFINE_KERNELS(float, f32, vf32, MADDF)

typedef struct {
    int fp64;
    int flops;
    int threads;
    size_t n; /* elements per thread */
    void *buf;
    long trials_done;
    double ro_sums[256]; /* read-only: each thread's sum over every trial so far */
} bench_t;

static void init_blocks(bench_t *b) {
#pragma omp parallel num_threads(b->threads)
    {
        int t = omp_get_thread_num();
        if (b->fp64) {
            double *blk = (double *)b->buf + (size_t)t * b->n;
            for (size_t i = 0; i < b->n; i++) blk[i] = 0.5 + (i % 16) * 0.0625;
        } else {
            float *blk = (float *)b->buf + (size_t)t * b->n;
            for (size_t i = 0; i < b->n; i++) blk[i] = (float)(0.5 + (i % 16) * 0.0625);
        }
    }
}

/* One timed region: barrier, clock, all threads run `trials` trials, barrier, clock. */
static double timed_region(bench_t *b, long trials) {
    double t0 = 0.0, t1 = 0.0;
    const long offset = b->trials_done;
    const int k_ops = b->flops == 1 ? 0 : b->flops / 2;
#pragma omp parallel num_threads(b->threads)
    {
        const int t = omp_get_thread_num();
#pragma omp barrier
#pragma omp master
        t0 = omp_get_wtime();
        if (b->flops == 0) {
            b->ro_sums[t] += ro_sum_f64((const double *)b->buf + (size_t)t * b->n, b->n, trials);
        } else if (b->fp64) {
            double *blk = (double *)b->buf + (size_t)t * b->n;
            if (k_ops == 0)
                rw_add_f64(blk, b->n, trials, offset, REC_C);
            else
                rw_madd_f64(blk, b->n, trials, offset, k_ops, REC_A, REC_C);
        } else {
            float *blk = (float *)b->buf + (size_t)t * b->n;
            if (k_ops == 0)
                rw_add_f32(blk, b->n, trials, offset, (float)REC_C);
            else
                rw_madd_f32(blk, b->n, trials, offset, k_ops, (float)REC_A, (float)REC_C);
        }
#pragma omp barrier
#pragma omp master
        t1 = omp_get_wtime();
    }
    b->trials_done += trials;
    return t1 - t0;
}

/* Largest |b - expected| / max(|expected|, 1) over every element; NaN counts as infinite. */
static double check(bench_t *b) {
    if (b->flops == 0) { /* every trial sums the unchanged block: n / 16 copies of the 16 starting values */
        double pattern = 0.0, worst = 0.0;
        for (int i = 0; i < 16; i++) pattern += 0.5 + i * 0.0625;
        const double expected = pattern * (double)(b->n / 16) * (double)b->trials_done;
        for (int t = 0; t < b->threads; t++) {
            double err = fabs(b->ro_sums[t] - expected) / expected;
            if (err != err) err = INFINITY;
            if (err > worst) worst = err;
        }
        return worst;
    }
    double expected[16];
    const int k_ops = b->flops == 1 ? 0 : b->flops / 2;
    if (b->fp64) {
        replay_f64(expected, k_ops, b->trials_done, REC_A, REC_C);
    } else {
        float x[16];
        replay_f32(x, k_ops, b->trials_done, (float)REC_A, (float)REC_C);
        for (int i = 0; i < 16; i++) expected[i] = x[i];
    }
    const size_t total = b->n * (size_t)b->threads;
    double worst = 0.0;
    for (size_t i = 0; i < total; i++) {
        const double got = b->fp64 ? ((double *)b->buf)[i] : ((float *)b->buf)[i];
        const double e = expected[i % 16]; /* n is a multiple of 16, so i % 16 is per block too */
        double err = fabs(got - e) / fmax(fabs(e), 1.0);
        if (err != err) err = INFINITY;
        if (err > worst) worst = err;
    }
    return worst;
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s fp64|fp32 FLOPS THREADS WSS_BYTES MIN_SECONDS REPEATS\n", argv[0]);
        return 2;
    }
    bench_t b = {0};
    if (strcmp(argv[1], "fp64") == 0)
        b.fp64 = 1;
    else if (strcmp(argv[1], "fp32") != 0) {
        fprintf(stderr, "precision must be fp64 or fp32\n");
        return 2;
    }
    b.flops = atoi(argv[2]);
    b.threads = atoi(argv[3]);
    const size_t wss = strtoull(argv[4], NULL, 10);
    const double min_seconds = atof(argv[5]);
    const int repeats = atoi(argv[6]);
    if (b.flops < 0 || (b.flops & (b.flops - 1)) || b.threads < 1 || b.threads > 256 || repeats < 1 ||
        min_seconds <= 0 || (b.flops == 0 && !b.fp64)) {
        fprintf(stderr, "bad arguments: FLOPS a power of two (0: read-only, fp64 only), THREADS 1-256, "
                        "REPEATS >= 1, MIN_SECONDS > 0\n");
        return 2;
    }
    const size_t itemsize = b.fp64 ? sizeof(double) : sizeof(float);
    const size_t granule = GRANULE_BYTES / itemsize;
    b.n = wss / ((size_t)b.threads * itemsize) / granule * granule;
    if (b.n == 0) {
        fprintf(stderr, "working set too small: each thread needs at least %d bytes\n", GRANULE_BYTES);
        return 2;
    }
    const size_t bytes = b.n * b.threads * itemsize;
    if (posix_memalign(&b.buf, ALIGN_BYTES, bytes) != 0) {
        fprintf(stderr, "cannot allocate %zu bytes\n", bytes);
        return 1;
    }
#ifdef MADV_HUGEPAGE
    /* NumPy asks for transparent huge pages on large arrays; do the same. */
    if (bytes >= (4u << 20)) {
        uintptr_t lo = ((uintptr_t)b.buf + 4095) & ~(uintptr_t)4095;
        uintptr_t hi = ((uintptr_t)b.buf + bytes) & ~(uintptr_t)4095;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    init_blocks(&b);

    /* Calibrate: double the trials until one region lasts >= min_seconds (also the warm-up). */
    long trials = 1;
    for (;;) {
        const double s = timed_region(&b, trials);
        if (s >= min_seconds || trials >= (1L << 40)) break;
        trials *= 2;
    }
    double *samples = malloc(sizeof(double) * repeats);
    double *sorted = malloc(sizeof(double) * repeats);
    for (int r = 0; r < repeats; r++) samples[r] = timed_region(&b, trials);
    memcpy(sorted, samples, sizeof(double) * repeats);
    qsort(sorted, repeats, sizeof(double), cmp_double);
    const double median = repeats % 2 ? sorted[repeats / 2]
                                      : 0.5 * (sorted[repeats / 2 - 1] + sorted[repeats / 2]);
    const double err = check(&b);
    const double tol = b.fp64 ? 1e-12 : 2e-5;
    const int ok = err <= tol;

    const double elements = (double)b.n * b.threads;
    const double gbs = elements * (b.flops == 0 ? 1 : 2) * itemsize * trials / median / 1e9;
    const double gflops = elements * b.flops * trials / median / 1e9;
    printf("{\"impl\": \"c\", \"variant\": \"" VARIANT_NAME "\", \"precision\": \"%s\", \"flops_per_element\": %d, \"fma\": %s, "
           "\"threads\": %d, \"omp_max_threads\": %d, \"wss_bytes\": %zu, \"elements_per_thread\": %zu, "
           "\"trials\": %ld, \"trials_total\": %ld, \"samples\": [",
           argv[1], b.flops, b.flops <= 1 ? "false" : FMA_NAME, b.threads, omp_get_max_threads(),
           bytes, b.n, trials, b.trials_done);
    for (int r = 0; r < repeats; r++) printf("%s%.9g", r ? ", " : "", samples[r]);
    printf("], \"median_s\": %.9g, \"gbytes_per_s\": %.6g, \"gflops_per_s\": %.6g, "
           "\"check_ok\": %s, \"max_rel_err\": %.3g}\n",
           median, gbs, gflops, ok ? "true" : "false", err);
    free(samples);
    free(sorted);
    free(b.buf);
    return ok ? 0 : 1;
}
