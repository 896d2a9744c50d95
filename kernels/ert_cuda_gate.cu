// The gate of ert's CUDA link copies (ert/backends/cuda_links.py), compiled by CuPy (NVRTC).
//
// One thread holds its stream until the host sets *flag, a word of mapped
// pinned host memory, after it has queued every copy of a batch behind the
// gate: the copies then run back to back at the link's pace, and the events
// recorded around them time the link, not the host's enqueue rate (as
// OpenCL's user event does in ert/backends/opencl_links.py).
//
// *status says how the gate opened: 1 = the host released it, 2 = it gave up
// after timeout_ns of the GPU's global timer (the host never released it,
// e.g. because it blocked while queueing; the host counts these).
// Never run on a GPU yet; tests/test_cuda_links.py compiles it with nvcc.

extern "C" __global__ void ert_gate(const volatile unsigned int *flag, volatile unsigned int *status,
                                    long long timeout_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    for (;;) {
        if (*flag != 0u) {
            *status = 1u;
            return;
        }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if ((long long)(now - start) > timeout_ns) {
            *status = 2u;
            return;
        }
#if __CUDA_ARCH__ >= 700
        __nanosleep(200);  // fewer reads of host memory over the link while it waits
#endif
    }
}
