/* The driver's per-thread default stream forms of its copies and memsets
 * (`_ptsz`, `_ptds`): the same as the legacy ones here, some logged.
 * Included by cuda.c after those. */
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { trace("cuMemcpyAsync_ptsz dst=%#llx", dst); if (on_runtime_streams()) return runtime.copy((void *)dst, (const void *)src, n, s); memcpy((void *)dst, (void *)src, n); return OK; }
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s) { trace("cuMemcpyHtoDAsync_v2_ptsz dst=%#llx", dst); return cuMemcpyHtoDAsync_v2(dst, src, n, s); }
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s) { return cuMemcpyDtoHAsync_v2(dst, src, n, s); }
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return cuMemcpyDtoDAsync_v2(dst, src, n, s); }
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) { trace("cuMemsetD8Async_ptsz dst=%#llx", dst); return cuMemsetD8Async(dst, value, n, s); }
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned value, size_t n, CUstream s) { return cuMemsetD32Async(dst, value, n, s); }
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpy(dst, src, n); }
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { trace("cuMemcpyHtoD_v2_ptds dst=%#llx", dst); return cuMemcpyHtoD_v2(dst, src, n); }
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoH_v2(dst, src, n); }
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoD_v2(dst, src, n); }
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n) { return cuMemsetD8_v2(dst, value, n); }
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned value, size_t n) { return cuMemsetD32_v2(dst, value, n); }
CUresult cuMemcpy2D_v2_ptds(const struct fake_memcpy2d *c) { return cuMemcpy2D_v2(c); }
