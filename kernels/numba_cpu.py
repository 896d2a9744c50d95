"""The ERT kernels for the Numba CPU backend, written as exact LLVM vector IR.

Per element per trial (contract shared with ert.spec.KernelSpec):

* ``rw_add``    (flops_per_element = 1):  b = b + c_t            1 FLOP,  load + store
* ``rw_fma``    (flops_per_element = 2K): K x (b = fma(b, a, c_t)) 2K FLOPs, load + store
* ``rw_nofma``  (flops_per_element = 2K): K x (b = b*a; b = b + c_t) rounded separately,
                                          2K FLOPs, load + store
* ``ro_sum``    (flops_per_element = 1):  acc = acc + b           1 FLOP,  load only
* ``rw_iadd``   (integer, op "add", flops_per_element = K): K x (b = b + c_t) in registers, K ops
* ``rw_mix``    (schema 1.4 mixes, flops_per_element = F): each sub-block's first half does F/2
                FMAs per element, its second half F/2 adds (fma+add) or F/2 integer
                multiply-adds on the same bits (int+float), the two interleaved

The integer precisions (int32, int64) run ``rw_add`` and ``rw_madd`` unfused
on ``<W x i32>`` / ``<W x i64>`` vectors: LLVM ``add`` and ``mul`` with no
``nsw``/``nuw`` flags, so they wrap modulo 2**bits (vpaddd/vpmulld,
vpaddq/vpmullq on AVX-512), with the odd multiplier and the addend of
ert.backends.check (A_INT, C_INT); the host replays them exactly.

``c_t`` is ``+c`` on even trials and ``-c`` on odd ones, counted over every
trial run on the buffer since it was initialised (``trial_offset`` carries the
count between calls), so the final values depend on the parity of the total and
an off-by-one in the trial loop is caught.  ``a`` < 1 keeps the values bounded
(near +-1) for any trial count: no overflow, no denormals.

Why LLVM IR and not plain loops: how many independent chains a core needs
depends on the machine (FMA units x FMA latency: 8 on Skylake-SP to Granite
Rapids and Zen 4, more where the loop itself costs issue slots, 16 on Neoverse
V1), and plain loops leave that to the vectoriser, which picks 4 accumulators
for a sum and may spill or split a multiply-add chain.  Each kernel here works
on a *sub-block* of ``W`` elements as one LLVM vector ``<W x T>``; LLVM splits
it into ``W / lanes`` machine registers, so

* the multiply-add kernels run ``W / lanes`` independent register-resident
  chains (the FLOP loop is inside the sub-block: load once, K FMAs per
  register, store once), with no load or store between the FMAs;
* the load-only sum keeps ``W / lanes`` vector accumulators live across the
  whole block and every trial, and reduces them once per call;
* the add kernel is one unrolled run of loads, adds and stores per sub-block,
  with no per-element overhead.

``W`` is a compile-time constant (a factory argument), chosen by the backend
from the vector width the CPU offers; the number of chains is swept like a GPU
launch geometry and recorded with every point.  FMA versus no-FMA is explicit:
``llvm.fma`` against an ``fmul`` and an ``fadd`` with no fast-math flags, which
LLVM may not contract (tests read the assembly).
"""

from __future__ import annotations

import platform

import numpy as np
import llvmlite.binding as llvm
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils, errors
from numba.extending import intrinsic

# Numba initialises the native target and its assembly printer, not its assembly parser, which LLVM needs to
# emit the inline assembly below into object code on AArch64 ("mrs ..., cntvct_el0": without the parser,
# "LLVM ERROR: Inline asm not supported by this streamer", found under the arm64 rig, jobs/arm64-rig.sh).
llvm.initialize_native_asmparser()

# fp32 lane sums of the 1/16-multiples init_blocks writes stay exact below 2**20;
# flushing a lane into the float64 total every 2**19 adds keeps every sum exact.
FP32_EXACT_ADDS = 1 << 19


@njit(parallel=True, cache=True)
def init_blocks(buf, nthreads, n, values16):
    """Element i of each thread's block gets values16[i % 16], written by that thread (first touch places its pages).

    ``values16``: ert.backends.check.initial_values / initial_int_values, the
    starting values every replay assumes.
    """
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        for i in range(blk.size):
            blk[i] = values16[i % 16]


@njit(parallel=True, cache=True)
def int_mismatches(buf, nthreads, n, expected16, worst):
    """Integer check, in place: worst[t, 0] = elements of thread t unequal to the replay, worst[t, 1] the first (-1: none)."""
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        bad = 0
        first = -1
        for i in range(blk.size):
            if blk[i] != expected16[i % 16]:
                if first < 0:
                    first = i
                bad += 1
        worst[t, 0] = bad
        worst[t, 1] = first


# ----------------------------------------------------------------------------- IR helpers
def _vector_ptr(context, builder, arrty, arr, index, vecty):
    """Pointer to ``<W x T>`` at element ``index`` of a contiguous 1-D array."""
    ary = context.make_array(arrty)(context, builder, value=arr)
    return builder.bitcast(builder.gep(ary.data, [index]), vecty.as_pointer())


def _splat(builder, scalar, vecty):
    first = builder.insert_element(ir.Constant(vecty, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0))
    mask = ir.Constant(ir.VectorType(ir.IntType(32), vecty.count), [0] * vecty.count)
    return builder.shuffle_vector(first, first, mask)


def _fma_decl(module, vecty):
    """``llvm.fma.v<W>f<bits>``: one rounding per multiply-add, whatever the fast-math flags."""
    suffix = "f64" if vecty.element == ir.DoubleType() else "f32"
    name = f"llvm.fma.v{vecty.count}{suffix}"
    existing = module.globals.get(name)
    return existing or ir.Function(module, ir.FunctionType(vecty, [vecty] * 3), name=name)


def _pieces(width: int) -> list[tuple[int, int]]:
    """``(start, size)`` of the power-of-two pieces a ``width``-element register state is held in.

    LLVM splits a power-of-two vector type cleanly into registers, but a
    vector of 12 or 24 registers' worth (``<48 x double>`` on AVX2) is
    widened and shuffled through memory: measured on a Haswell-target build,
    12-chain multiply-adds ran at 1/8 of the 8-chain rate.  Every piece has
    the size of the lowest set bit of ``width``, so 16-chain and 8-chain
    states stay one vector and 12 chains become three 4-register pieces.
    """
    size = width & -width
    return [(start, size) for start in range(0, width, size)]


def _hsum(builder, vec):
    """Sum of a power-of-two vector's lanes by halving (log2 W vector adds); exact here (see FP32_EXACT_ADDS)."""
    width = vec.type.count
    while width > 1:
        half = width // 2
        lo = builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half))))
        hi = builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(ir.IntType(32), half),
                                                          list(range(half, width))))
        vec, width = builder.fadd(lo, hi), half
    return builder.extract_element(vec, ir.Constant(ir.IntType(32), 0))


def _literal(ty) -> int:
    """The value of a compile-time constant argument (its Literal type), else a typing error."""
    if not isinstance(ty, types.Literal):
        raise errors.TypingError(f"expected a compile-time constant, got {ty}")
    return int(ty.literal_value)


# The intrinsics take the sub-block width (and FMA or not) as compile-time
# constants, not as closure values of a factory: Numba's cache key hashes a
# kernel's closure, and an intrinsic object pickles differently in every
# process, so closing over one would recompile every kernel in every run.
@intrinsic
def sub_madd(typingctx, arr, i0, k_ops, a, c, width_lit, fused_lit):
    """``sub_madd(arr, i0, k_ops, a, c, W, fused)``: K multiply-adds on ``arr[i0:i0+W]`` held in registers."""
    width, fused = _literal(width_lit), bool(_literal(fused_lit))

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        scal = context.get_value_type(arrty.dtype)
        align = arrty.dtype.bitwidth // 8
        size = _pieces(width)[0][1]
        vecty = ir.VectorType(scal, size)
        # Numba widens an int32 -c to int64: the scalars are cast to the element type.
        va = _splat(builder, context.cast(builder, args[3], sig.args[3], arrty.dtype), vecty)
        vc = _splat(builder, context.cast(builder, args[4], sig.args[4], arrty.dtype), vecty)
        ptrs, states = [], []
        for start, _ in _pieces(width):
            index = builder.add(args[1], ir.Constant(args[1].type, start))
            ptrs.append(_vector_ptr(context, builder, arrty, args[0], index, vecty))
            states.append(cgutils.alloca_once(builder, vecty))  # promoted to registers by mem2reg
            builder.store(builder.load(ptrs[-1], align=align), states[-1])
        with cgutils.for_range(builder, args[2]):
            for state in states:
                x = builder.load(state)
                if isinstance(vecty.element, ir.IntType):
                    y = builder.add(builder.mul(x, va), vc)  # no nsw/nuw: wraps modulo 2**bits
                elif fused:
                    y = builder.call(_fma_decl(builder.module, vecty), [x, va, vc])
                else:
                    y = builder.fadd(builder.fmul(x, va), vc)  # no flags: never contracted
                builder.store(y, state)
        for ptr, state in zip(ptrs, states):
            builder.store(builder.load(state), ptr, align=align)
        return context.get_dummy_value()

    return types.void(arr, i0, k_ops, a, c, width_lit, fused_lit), codegen


@intrinsic
def sub_add(typingctx, arr, i0, c, width_lit):
    """``sub_add(arr, i0, c, W)``: load, add and store ``arr[i0:i0+W]``, one 64-byte piece after another.

    Each 64-byte piece is loaded, added and stored before the next, in
    ascending address order.  Written as one ``<W x T>`` vector instead, LLVM
    issued the loads in descending order within each sub-block, which the
    cores' prefetchers follow less well (L2 bandwidth fell to 0.6 of C's).
    """
    width = _literal(width_lit)

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        scal = context.get_value_type(arrty.dtype)
        piece = max(1, min(width, 64 // (arrty.dtype.bitwidth // 8)))
        vecty = ir.VectorType(scal, piece)
        align = arrty.dtype.bitwidth // 8
        addend = _splat(builder, context.cast(builder, args[2], sig.args[2], arrty.dtype), vecty)
        for start in range(0, width, piece):
            index = builder.add(args[1], ir.Constant(args[1].type, start))
            ptr = _vector_ptr(context, builder, arrty, args[0], index, vecty)
            add = builder.add if isinstance(scal, ir.IntType) else builder.fadd
            builder.store(add(builder.load(ptr, align=align), addend), ptr, align=align)
        return context.get_dummy_value()

    return types.void(arr, i0, c, width_lit), codegen


def _opaque(builder, vec):
    """``vec`` passed through an empty inline-assembly statement: no instruction, but LLVM no longer knows its value.

    An integer add chain ``x + c + c + ...`` is a reduction LLVM may rewrite
    as ``x + K*c`` (integer addition reassociates); passing the state through
    this barrier after every add keeps each add a real instruction.  One
    register-sized vector per statement ("v": any SSE/AVX/AVX-512 register;
    "w": an Arm SIMD register).
    """
    constraint = {"x86_64": "=v,0", "amd64": "=v,0", "aarch64": "=w,0", "arm64": "=w,0"}.get(_MACHINE)
    if constraint is None:
        return vec
    asm = ir.InlineAsm(ir.FunctionType(vec.type, [vec.type]), "", constraint, side_effect=False)
    return builder.call(asm, [vec])


@intrinsic
def sub_iadd(typingctx, arr, i0, k_ops, c, width_lit, lanes_lit):
    """``sub_iadd(arr, i0, k_ops, c, W, lanes)``: K dependent integer adds on ``arr[i0:i0+W]`` held in registers.

    W / lanes independent register chains (one ``<lanes x iN>`` each); every
    add is kept by ``_opaque`` (see there), so the loop is K x W / lanes
    vpaddd/vpaddq and nothing else.
    """
    width, lanes = _literal(width_lit), _literal(lanes_lit)

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        scal = context.get_value_type(arrty.dtype)
        vecty = ir.VectorType(scal, lanes)
        align = arrty.dtype.bitwidth // 8
        vc = _splat(builder, context.cast(builder, args[3], sig.args[3], arrty.dtype), vecty)
        ptrs, states = [], []
        for start in range(0, width, lanes):
            index = builder.add(args[1], ir.Constant(args[1].type, start))
            ptr = _vector_ptr(context, builder, arrty, args[0], index, vecty)
            state = cgutils.alloca_once(builder, vecty)
            builder.store(builder.load(ptr, align=align), state)
            ptrs.append(ptr)
            states.append(state)
        with cgutils.for_range(builder, args[2]):
            for state in states:
                builder.store(_opaque(builder, builder.add(builder.load(state), vc)), state)
        for ptr, state in zip(ptrs, states):
            builder.store(builder.load(state), ptr, align=align)
        return context.get_dummy_value()

    return types.void(arr, i0, k_ops, c, width_lit, lanes_lit), codegen


@intrinsic
def sub_mix(typingctx, arr, i0, k_ops, a, c, ai, ci, width_lit, kind_lit):
    """``sub_mix(arr, i0, K, a, c, ai, ci, W, kind)``: two halves of ``arr[i0:i0+W]``, K steps each, interleaved.

    First half: K FMAs ``x = fma(x, a, c)``.  Second half, kind 0 (fma+add):
    K adds ``y = y + c`` (no flags: never reassociated); kind 1 (int+float):
    the same bits read as integers, K multiply-adds ``y = y*ai + ci`` wrapping
    modulo 2**bits.  Both halves live in registers through the K steps.
    """
    width, kind = _literal(width_lit), _literal(kind_lit)
    half = width // 2

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        fty = context.get_value_type(arrty.dtype)
        size = _pieces(half)[0][1]
        vecty = ir.VectorType(fty, size)
        ity = ir.VectorType(ir.IntType(arrty.dtype.bitwidth), size)
        align = arrty.dtype.bitwidth // 8
        va = _splat(builder, context.cast(builder, args[3], sig.args[3], arrty.dtype), vecty)
        vc = _splat(builder, context.cast(builder, args[4], sig.args[4], arrty.dtype), vecty)
        int_nb = types.int64 if arrty.dtype.bitwidth == 64 else types.int32
        vai = _splat(builder, context.cast(builder, args[5], sig.args[5], int_nb), ity)
        vci = _splat(builder, context.cast(builder, args[6], sig.args[6], int_nb), ity)
        fma = _fma_decl(builder.module, vecty)
        # Power-of-two pieces of each half (see _pieces); the halves' pieces alternate in the loop body.
        xs, ys = [], []
        for start, _ in _pieces(half):
            i_x = builder.add(args[1], ir.Constant(args[1].type, start))
            i_y = builder.add(args[1], ir.Constant(args[1].type, half + start))
            p_x = _vector_ptr(context, builder, arrty, args[0], i_x, vecty)
            p_y = _vector_ptr(context, builder, arrty, args[0], i_y, vecty)
            x = cgutils.alloca_once(builder, vecty)
            y = cgutils.alloca_once(builder, vecty if kind == 0 else ity)
            builder.store(builder.load(p_x, align=align), x)
            second = builder.load(p_y, align=align)
            builder.store(second if kind == 0 else builder.bitcast(second, ity), y)
            xs.append((p_x, x))
            ys.append((p_y, y))
        with cgutils.for_range(builder, args[2]):
            for (_, x), (_, y) in zip(xs, ys):
                builder.store(builder.call(fma, [builder.load(x), va, vc]), x)
                if kind == 0:
                    builder.store(builder.fadd(builder.load(y), vc), y)
                else:
                    builder.store(builder.add(builder.mul(builder.load(y), vai), vci), y)
        for (p_x, x), (p_y, y) in zip(xs, ys):
            builder.store(builder.load(x), p_x, align=align)
            out = builder.load(y)
            builder.store(out if kind == 0 else builder.bitcast(out, vecty), p_y, align=align)
        return context.get_dummy_value()

    return types.void(arr, i0, k_ops, a, c, ai, ci, width_lit, kind_lit), codegen


@intrinsic
def block_sum(typingctx, arr, trials, flush, width_lit):
    """``block_sum(arr, trials, flush, W) -> float64``: ``trials`` sums of ``arr``.

    ``W / lanes`` vector accumulators stay live across the block and across
    trials; they are reduced into the float64 total after every ``flush``
    sub-blocks (each lane then holds at most ``flush`` values) and at the end,
    so the steady-state cost is only the loads, the adds and a counter.
    """
    width = _literal(width_lit)
    if width & (width - 1):  # the halving sum and the register split both need a power of two (_pieces)
        raise errors.TypingError(f"block_sum: width {width} is not a power of two")

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        arr_v, trials_v, flush_v = args[:3]
        scal = context.get_value_type(arrty.dtype)
        vecty = ir.VectorType(scal, width)
        align = arrty.dtype.bitwidth // 8
        ary = context.make_array(arrty)(context, builder, value=arr_v)
        n = builder.extract_value(ary.shape, 0)
        intp = n.type
        zero_vec = ir.Constant(vecty, [ir.Constant(scal, 0.0)] * width)
        acc = cgutils.alloca_once(builder, vecty)
        total = cgutils.alloca_once(builder, ir.DoubleType())
        since_flush = cgutils.alloca_once(builder, intp)
        builder.store(zero_vec, acc)
        builder.store(ir.Constant(ir.DoubleType(), 0.0), total)
        builder.store(ir.Constant(intp, 0), since_flush)
        subs = builder.sdiv(n, ir.Constant(intp, width))

        def flush_acc():
            part = _hsum(builder, builder.load(acc))
            if scal != ir.DoubleType():
                part = builder.fpext(part, ir.DoubleType())
            builder.store(builder.fadd(builder.load(total), part), total)
            builder.store(zero_vec, acc)
            builder.store(ir.Constant(intp, 0), since_flush)

        with cgutils.for_range(builder, trials_v):
            with cgutils.for_range(builder, subs) as sub_loop:
                index = builder.mul(sub_loop.index, ir.Constant(intp, width))
                ptr = _vector_ptr(context, builder, arrty, arr_v, index, vecty)
                builder.store(builder.fadd(builder.load(acc), builder.load(ptr, align=align)), acc)
                count = builder.add(builder.load(since_flush), ir.Constant(intp, 1))
                builder.store(count, since_flush)
                with builder.if_then(builder.icmp_signed("==", count, flush_v), likely=False):
                    flush_acc()
        flush_acc()
        return builder.load(total)

    return types.float64(arr, trials, flush, width_lit), codegen


# ----------------------------------------------------------------------------- kernels
def make_rw_madd(width: int, fused: bool):
    """The multiply-add kernel over sub-blocks of ``width`` elements (``width / lanes`` chains).

    ``fused`` is returned by the kernel as well as used: Numba's cache key
    covers the code and the values closed over, so the FMA and no-FMA
    variants of one width get separate cache entries, and the backend can see
    which one it loaded.
    """
    fused_flag = 1 if fused else 0

    @njit(parallel=True, cache=True)
    def rw_madd(buf, nthreads, n, trials, trial_offset, k_ops, a, c):
        for t in prange(nthreads):
            blk = buf[t * n:(t + 1) * n]
            for tr in range(trials):
                ct = c if (tr + trial_offset) % 2 == 0 else -c
                for i0 in range(0, n, width):
                    sub_madd(blk, i0, k_ops, a, ct, width, fused_flag)
        return fused_flag

    return rw_madd


def make_rw_add(width: int):
    """The one-add bandwidth kernel over unrolled sub-blocks of ``width`` elements."""
    @njit(parallel=True, cache=True)
    def rw_add(buf, nthreads, n, trials, trial_offset, c):
        for t in prange(nthreads):
            blk = buf[t * n:(t + 1) * n]
            for tr in range(trials):
                ct = c if (tr + trial_offset) % 2 == 0 else -c
                for i0 in range(0, n, width):
                    sub_add(blk, i0, ct, width)
        return 0

    return rw_add


def make_rw_iadd(width: int, lanes: int):
    """The integer add-only compute kernel: K dependent adds per element per trial, ``width / lanes`` chains."""
    @njit(parallel=True, cache=True)
    def rw_iadd(buf, nthreads, n, trials, trial_offset, k_ops, c):
        for t in prange(nthreads):
            blk = buf[t * n:(t + 1) * n]
            for tr in range(trials):
                ct = c if (tr + trial_offset) % 2 == 0 else -c
                for i0 in range(0, n, width):
                    sub_iadd(blk, i0, k_ops, ct, width, lanes)
        return 0

    return rw_iadd


def make_rw_mix(width: int, kind: int):
    """A measured mix (kind 0: fma+add, 1: int+float) over sub-blocks of ``width`` elements, halves interleaved."""
    @njit(parallel=True, cache=True)
    def rw_mix(buf, nthreads, n, trials, trial_offset, k_ops, a, c, ai, ci):
        for t in prange(nthreads):
            blk = buf[t * n:(t + 1) * n]
            for tr in range(trials):
                even = (tr + trial_offset) % 2 == 0
                ct = c if even else -c
                cti = ci if even else -ci
                for i0 in range(0, n, width):
                    sub_mix(blk, i0, k_ops, a, ct, ai, cti, width, kind)
        return kind

    return rw_mix


def make_ro_sum(width: int):
    """The load-only kernel: each thread sums its block ``trials`` times into out[t] (float64).

    ``flush`` is how many sub-blocks the vector accumulators take in before
    they are added to the float64 total (every sum stays exact; see FP32_EXACT_ADDS).
    """
    @njit(parallel=True, cache=True)
    def ro_sum(buf, nthreads, n, trials, flush, out):
        for t in prange(nthreads):
            blk = buf[t * n:(t + 1) * n]
            out[t] += block_sum(blk, trials, flush, width)
        return 0

    return ro_sum


@njit(parallel=True, cache=True)
def max_rel_error(buf, nthreads, n, expected16, worst):
    """Largest |b - expected| / max(|expected|, 1) per thread into worst[t, 0], its index into worst[t, 1] (-1: none off).

    The metric of ert.backends.check.relative_errors, in parallel and in place.

    The comparison walks every element, so a thread that skipped part of its
    block, or wrote a neighbour's, is caught; NaN counts as the worst error.
    """
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        w_err = 0.0
        w_idx = -1.0
        for i in range(blk.size):
            e = expected16[i % 16]
            err = abs(float(blk[i]) - e) / max(abs(e), 1.0)
            if not (err <= w_err):  # also true for NaN
                if err != err:
                    err = np.inf
                w_err = err
                w_idx = float(i)
        worst[t, 0] = w_err
        worst[t, 1] = w_idx


# ----------------------------------------------------------------------------- clock probes
@intrinsic
def dependent_fmas(typingctx, n, x, width_lit):
    """``dependent_fmas(n, x, W) -> float64``: ``n`` dependent ``<W x f64>`` FMAs (n x FMA latency cycles)."""
    width = _literal(width_lit)

    def codegen(context, builder, sig, args):
        vecty = ir.VectorType(ir.DoubleType(), width)
        state = cgutils.alloca_once(builder, vecty)
        builder.store(_splat(builder, args[1], vecty), state)
        va = _splat(builder, ir.Constant(ir.DoubleType(), 0.999999), vecty)
        vc = _splat(builder, ir.Constant(ir.DoubleType(), 1e-6), vecty)
        with cgutils.for_range(builder, args[0]):
            builder.store(builder.call(_fma_decl(builder.module, vecty), [builder.load(state), va, vc]), state)
        return builder.extract_element(builder.load(state), ir.Constant(ir.IntType(32), 0))

    return types.float64(n, x, width_lit), codegen


_MACHINE = platform.machine().lower()


@intrinsic
def cycle_counter(typingctx):
    """``cycle_counter() -> int64``: a constant-rate counter readable from user space.

    x86: the time-stamp counter (``llvm.readcyclecounter``, RDTSC), which ticks
    at a constant rate whatever the core clock (the ``constant_tsc`` flag).
    AArch64: the virtual counter ``CNTVCT_EL0`` (``llvm.readcyclecounter``
    would read PMCCNTR_EL0, which traps in user space).  Elsewhere there is
    none, and typing fails (the backend then reports no clock).  The backend
    converts ticks to seconds with a rate it measures against the OS clock.
    """
    if _MACHINE not in ("x86_64", "amd64", "aarch64", "arm64"):
        raise errors.TypingError(f"no user-space cycle counter on {_MACHINE}")

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        if _MACHINE in ("aarch64", "arm64"):
            asm = ir.InlineAsm(ir.FunctionType(i64, []), "mrs $0, cntvct_el0", "=r", side_effect=True)
            return builder.call(asm, [])
        fn = builder.module.globals.get("llvm.readcyclecounter") or ir.Function(
            builder.module, ir.FunctionType(i64, []), name="llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


@njit(cache=True)
def read_cycle_counter():
    return cycle_counter()


def make_fma_latency_chain(width: int):
    """``chain(nthreads, n, samples, x, ticks)``: each thread times ``samples`` runs of ``n`` dependent FMAs.

    Every thread runs its chains at the same time (the clock under vector load
    on every core) and keeps, in ``ticks[t]``, its own fastest run in
    time-stamp-counter ticks.  Timed inside each thread, a sample is spoilt
    only when *that* thread is preempted, so the fastest of many is the clock
    even on a machine shared with other work.
    """

    @njit(parallel=True, cache=True)
    def chain(nthreads, n, samples, x, ticks):
        for t in prange(nthreads):
            best = np.int64(1) << 62
            acc = x + t
            for _ in range(samples):
                start = cycle_counter()
                acc = dependent_fmas(n, acc, width)
                best = min(best, cycle_counter() - start)
            ticks[t] = best
            if acc == 12345.678:  # never true: the chains cannot be dropped as unused
                ticks[t] = -1
        return 0

    return chain


@njit(parallel=True, cache=True)
def imul_latency_chain(nthreads, n, samples, x, ticks):
    """Each thread's fastest of ``samples`` runs of ``n`` dependent 64-bit multiplies, in TSC ticks.

    3 cycles each on every x86 core in the table.  Squaring, not multiplying by
    a constant: a product by one factor is a reduction LLVM may split across
    vector lanes, a chain of squares is not.
    """
    for t in prange(nthreads):
        best = np.int64(1) << 62
        v = (x + 2 * t) | 1  # odd, so the squares never collapse to 0
        for _ in range(samples):
            start = cycle_counter()
            for _ in range(n):
                v = v * v
            best = min(best, cycle_counter() - start)
        ticks[t] = best
        if v == 0:  # never true (odd squares stay odd): keeps the chain
            ticks[t] = -1
    return 0
