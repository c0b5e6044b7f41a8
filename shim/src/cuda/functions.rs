//! The one list of CUDA functions the shim knows: those it hooks, the
//! lookups it answers (the driver's entry points), and those it only
//! calls. The list is expanded twice, by [`crate::cuda::real`] into the
//! table of real functions and by [`crate::exports`] into the exported
//! hooks, each of which calls the handler of its name in
//! [`crate::policy::handlers`] (or [`crate::exports`]' lookups). Adding a
//! hook is one line here, its handler, and the [`vramshare_common::event::Api`]
//! variant of its name.

/// Calls `$then!` with the whole list.
macro_rules! cuda_functions {
    ($then:ident) => {
        $then! {
            hooked {
                fn cudaMalloc(ptr: *mut *mut c_void, size: usize);
                fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint);
                fn cudaMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize);
                fn cudaMalloc3D(pitched: *mut cudaPitchedPtr, extent: cudaExtent);
                fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: cudaStream_t);
                fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: cudaStream_t);
                fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t);
                fn cudaMallocFromPoolAsync_ptsz(ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t);
                fn cudaFree(ptr: *mut c_void);
                fn cudaFreeAsync(ptr: *mut c_void, stream: cudaStream_t);
                fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: cudaStream_t);
                fn cudaMemGetInfo(free: *mut usize, total: *mut usize);
                // What the device's default pool holds, with the spill tier's
                // blocks that serve its allocations (PyTorch's memory
                // statistics under its cudaMallocAsync backend).
                fn cudaMemPoolGetAttribute(pool: cudaMemPool_t, attribute: c_int, value: *mut c_void);
                fn cudaMemPoolSetAttribute(pool: cudaMemPool_t, attribute: c_int, value: *mut c_void);
                // The driver API, for programs that allocate through libcuda.so.1
                // directly. A device address (CUdeviceptr) is a 64-bit integer,
                // the size of a pointer, so it goes through the same policy.
                fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, size: usize);
                fn cuMemAllocManaged(ptr: *mut CUdeviceptr, size: usize, flags: c_uint);
                fn cuMemAllocPitch_v2(ptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element: c_uint);
                fn cuMemAllocAsync(ptr: *mut CUdeviceptr, size: usize, stream: CUstream);
                fn cuMemAllocAsync_ptsz(ptr: *mut CUdeviceptr, size: usize, stream: CUstream);
                fn cuMemAllocFromPoolAsync(ptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream);
                fn cuMemAllocFromPoolAsync_ptsz(ptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream);
                fn cuMemFree_v2(ptr: CUdeviceptr);
                fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream);
                fn cuMemFreeAsync_ptsz(ptr: CUdeviceptr, stream: CUstream);
                fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize);
                fn cuMemPoolGetAttribute(pool: CUmemoryPool, attribute: c_int, value: *mut c_void);
                fn cuMemPoolSetAttribute(pool: CUmemoryPool, attribute: c_int, value: *mut c_void);
                // Physical memory of the virtual memory API (PyTorch's expandable
                // segments): counted from creation until it is both released and
                // unmapped, as the driver frees it. Reserving address space and
                // granting access change no count: those calls are not hooked.
                fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64);
                fn cuMemRelease(handle: CUmemGenericAllocationHandle);
                fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64);
                fn cuMemUnmap(ptr: CUdeviceptr, size: usize);
                // Kernel launches, by every path a job takes: counted (the
                // launch itself goes to CUDA unchanged).
                fn cudaLaunchKernel(func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shared: usize, stream: cudaStream_t);
                fn cudaLaunchKernel_ptsz(func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shared: usize, stream: cudaStream_t);
                fn __cudaLaunchKernel(kernel: cudaKernel_t, grid: dim3, block: dim3, args: *mut *mut c_void, shared: usize, stream: cudaStream_t);
                fn __cudaLaunchKernel_ptsz(kernel: cudaKernel_t, grid: dim3, block: dim3, args: *mut *mut c_void, shared: usize, stream: cudaStream_t);
                fn cudaLaunchKernelExC(config: *const c_void, func: *const c_void, args: *mut *mut c_void);
                fn cudaLaunchKernelExC_ptsz(config: *const c_void, func: *const c_void, args: *mut *mut c_void);
                fn cudaLaunchCooperativeKernel(func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shared: usize, stream: cudaStream_t);
                fn cudaLaunchCooperativeKernel_ptsz(func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shared: usize, stream: cudaStream_t);
                fn cudaGraphLaunch(graph: cudaGraphExec_t, stream: cudaStream_t);
                fn cudaGraphLaunch_ptsz(graph: cudaGraphExec_t, stream: cudaStream_t);
                fn cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
                fn cuLaunchKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
                fn cuLaunchKernelEx(config: *const c_void, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
                fn cuLaunchKernelEx_ptsz(config: *const c_void, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
                fn cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void);
                fn cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void);
                fn cuGraphLaunch(graph: CUgraphExec, stream: CUstream);
                fn cuGraphLaunch_ptsz(graph: CUgraphExec, stream: CUstream);
                // Unloading modules: a function's address may then be reused by
                // another function, of other parameters.
                fn cuModuleUnload(module: *mut c_void);
                fn cuLibraryUnload(library: *mut c_void);
                // Stream capture and executable graphs: a graph's launch names
                // the blocks its kernels named when it was captured.
                fn cudaStreamBeginCapture(stream: cudaStream_t, mode: c_int);
                fn cudaStreamBeginCapture_ptsz(stream: cudaStream_t, mode: c_int);
                fn cudaStreamEndCapture(stream: cudaStream_t, graph: *mut cudaGraph_t);
                fn cudaStreamEndCapture_ptsz(stream: cudaStream_t, graph: *mut cudaGraph_t);
                fn cudaGraphInstantiate(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, flags: u64);
                fn cudaGraphInstantiateWithFlags(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, flags: u64);
                fn cudaGraphInstantiateWithParams(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, params: *mut c_void);
                fn cudaGraphInstantiateWithParams_ptsz(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, params: *mut c_void);
                fn cudaGraphExecDestroy(exec: cudaGraphExec_t);
                fn cuStreamBeginCapture_v2(stream: CUstream, mode: c_int);
                fn cuStreamBeginCapture_v2_ptsz(stream: CUstream, mode: c_int);
                fn cuStreamEndCapture(stream: CUstream, graph: *mut cudaGraph_t);
                fn cuStreamEndCapture_ptsz(stream: CUstream, graph: *mut cudaGraph_t);
                fn cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: cudaGraph_t, flags: u64);
                fn cuGraphInstantiateWithParams(exec: *mut CUgraphExec, graph: cudaGraph_t, params: *mut c_void);
                fn cuGraphInstantiateWithParams_ptsz(exec: *mut CUgraphExec, graph: cudaGraph_t, params: *mut c_void);
                fn cuGraphExecDestroy(exec: CUgraphExec);
                fn cudaGraphDestroy(graph: cudaGraph_t);
                fn cuGraphDestroy(graph: cudaGraph_t);
                // Copies and memsets: uses of the blocks they name, as a
                // kernel's are (the copy itself goes to CUDA unchanged).
                fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int);
                fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int, stream: cudaStream_t);
                fn cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int, stream: cudaStream_t);
                fn cudaMemset(ptr: *mut c_void, value: c_int, count: usize);
                fn cudaMemsetAsync(ptr: *mut c_void, value: c_int, count: usize, stream: cudaStream_t);
                fn cudaMemsetAsync_ptsz(ptr: *mut c_void, value: c_int, count: usize, stream: cudaStream_t);
                fn cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int);
                fn cudaMemset_ptds(ptr: *mut c_void, value: c_int, count: usize);
                fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, count: usize, stream: CUstream);
                fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, count: usize, stream: CUstream);
                fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, count: usize, stream: CUstream);
                fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, count: usize, stream: CUstream);
                fn cuMemsetD8Async(dst: CUdeviceptr, value: u8, count: usize, stream: CUstream);
                fn cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, count: usize, stream: CUstream);
                fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, count: usize, stream: CUstream);
                fn cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, count: usize, stream: CUstream);
                fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, count: usize, stream: CUstream);
                fn cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, count: usize, stream: CUstream);
                fn cuMemsetD8Async_ptsz(dst: CUdeviceptr, value: u8, count: usize, stream: CUstream);
                fn cuMemsetD32Async_ptsz(dst: CUdeviceptr, value: c_uint, count: usize, stream: CUstream);
                // Copies and memsets of other shapes: they hand work to CUDA
                // too, so they enter the spill tier's gate, and name the
                // blocks their device operands start in.
                fn cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int);
                fn cudaMemcpy2DAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: cudaStream_t);
                fn cudaMemcpy2DAsync_ptsz(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: cudaStream_t);
                fn cudaMemset2D(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize);
                fn cudaMemset2DAsync(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: cudaStream_t);
                fn cudaMemset2DAsync_ptsz(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: cudaStream_t);
                fn cudaMemcpy2D_ptds(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int);
                fn cudaMemset2D_ptds(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize);
                fn cudaMemcpyPeer(dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, count: usize);
                fn cudaMemcpyPeerAsync(dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, count: usize, stream: cudaStream_t);
                fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, count: usize);
                fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, count: usize);
                fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, count: usize);
                fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, count: usize);
                fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, count: usize);
                fn cuMemsetD32_v2(dst: CUdeviceptr, value: c_uint, count: usize);
                fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, count: usize);
                fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, count: usize);
                fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, count: usize);
                fn cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, count: usize);
                fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, value: u8, count: usize);
                fn cuMemsetD32_v2_ptds(dst: CUdeviceptr, value: c_uint, count: usize);
                // Copies described by a struct (`cudaMemcpy3DParms`,
                // `CUDA_MEMCPY2D`, `CUDA_MEMCPY3D`): its device pointers name
                // the blocks.
                fn cudaMemcpy3D(params: *const c_void);
                fn cudaMemcpy3DAsync(params: *const c_void, stream: cudaStream_t);
                fn cudaMemcpy3DAsync_ptsz(params: *const c_void, stream: cudaStream_t);
                fn cudaMemcpy3D_ptds(params: *const c_void);
                fn cuMemcpy2D_v2(copy: *const c_void);
                fn cuMemcpy2DUnaligned_v2(copy: *const c_void);
                fn cuMemcpy2DAsync_v2(copy: *const c_void, stream: CUstream);
                fn cuMemcpy3D_v2(copy: *const c_void);
                fn cuMemcpy3DAsync_v2(copy: *const c_void, stream: CUstream);
                fn cuMemcpy2D_v2_ptds(copy: *const c_void);
                fn cuMemcpy2DUnaligned_v2_ptds(copy: *const c_void);
                fn cuMemcpy2DAsync_v2_ptsz(copy: *const c_void, stream: CUstream);
                fn cuMemcpy3D_v2_ptds(copy: *const c_void);
                fn cuMemcpy3DAsync_v2_ptsz(copy: *const c_void, stream: CUstream);
                // Exporting memory to other processes: the spill tier's blocks
                // cannot be, and a refusal says so.
                fn cudaIpcGetMemHandle(handle: *mut c_void, ptr: *mut c_void);
                fn cuIpcGetMemHandle(handle: *mut c_void, ptr: CUdeviceptr);
                // Math library calls whose kernels hide their operands: the
                // call's own operand pointers are read instead.
                fn cublasLtMatmul(handle: LibraryHandle, desc: LibraryHandle, alpha: *const c_void, a: *const c_void, a_layout: LibraryHandle, b: *const c_void, b_layout: LibraryHandle, beta: *const c_void, c: *const c_void, c_layout: LibraryHandle, d: *mut c_void, d_layout: LibraryHandle, algo: *const c_void, workspace: *mut c_void, workspace_size: usize, stream: cudaStream_t);
                fn cublasGemmEx(handle: LibraryHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, b: *const c_void, b_type: c_int, ldb: c_int, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, compute: c_int, algo: c_int);
                fn cublasGemmStridedBatchedEx(handle: LibraryHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, stride_a: i64, b: *const c_void, b_type: c_int, ldb: c_int, stride_b: i64, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, stride_c: i64, batch: c_int, compute: c_int, algo: c_int);
                fn cublasSgemm_v2(handle: LibraryHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const f32, a: *const f32, lda: c_int, b: *const f32, ldb: c_int, beta: *const f32, c: *mut f32, ldc: c_int);
                fn cublasSgemmStridedBatched(handle: LibraryHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const f32, a: *const f32, lda: c_int, stride_a: i64, b: *const f32, ldb: c_int, stride_b: i64, beta: *const f32, c: *mut f32, ldc: c_int, stride_c: i64, batch: c_int);
                fn cudnnBackendExecute(handle: LibraryHandle, plan: LibraryHandle, pack: LibraryHandle);
                fn cudnnBackendSetAttribute(descriptor: LibraryHandle, name: c_int, kind: c_int, count: i64, elements: *const c_void);
                fn cublasSetWorkspace_v2(handle: LibraryHandle, workspace: *mut c_void, size: usize);
                // The stream a handle's calls run on, for ordering them after
                // the work that used their operands.
                fn cublasSetStream_v2(handle: LibraryHandle, stream: cudaStream_t);
                fn cudnnSetStream(handle: LibraryHandle, stream: cudaStream_t);
                fn cublasDestroy_v2(handle: LibraryHandle);
                fn cudnnDestroy(handle: LibraryHandle);
                fn cudnnBatchNormalizationForwardTrainingEx(handle: LibraryHandle, mode: c_int, ops: c_int, alpha: *const c_void, beta: *const c_void, x_desc: LibraryHandle, x: *const c_void, z_desc: LibraryHandle, z: *const c_void, y_desc: LibraryHandle, y: *mut c_void, bn_desc: LibraryHandle, scale: *const c_void, bias: *const c_void, factor: f64, running_mean: *mut c_void, running_var: *mut c_void, epsilon: f64, save_mean: *mut c_void, save_inv_var: *mut c_void, activation: LibraryHandle, workspace: *mut c_void, workspace_size: usize, reserve: *mut c_void, reserve_size: usize);
                fn cudnnBatchNormalizationBackwardEx(handle: LibraryHandle, mode: c_int, ops: c_int, alpha_data: *const c_void, beta_data: *const c_void, alpha_param: *const c_void, beta_param: *const c_void, x_desc: LibraryHandle, x: *const c_void, y_desc: LibraryHandle, y: *const c_void, dy_desc: LibraryHandle, dy: *const c_void, dz_desc: LibraryHandle, dz: *mut c_void, dx_desc: LibraryHandle, dx: *mut c_void, bn_desc: LibraryHandle, scale: *const c_void, bias: *const c_void, d_scale: *mut c_void, d_bias: *mut c_void, epsilon: f64, save_mean: *const c_void, save_inv_var: *const c_void, activation: LibraryHandle, workspace: *mut c_void, workspace_size: usize, reserve: *mut c_void, reserve_size: usize);
                fn cudnnBatchNormalizationForwardInference(handle: LibraryHandle, mode: c_int, alpha: *const c_void, beta: *const c_void, x_desc: LibraryHandle, x: *const c_void, y_desc: LibraryHandle, y: *mut c_void, bn_desc: LibraryHandle, scale: *const c_void, bias: *const c_void, mean: *const c_void, var: *const c_void, epsilon: f64);
            }
            lookups {
                // Every way a program fetches driver functions by name: the pointer
                // handed back is swapped for the hook when it is a hooked function.
                fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64);
                fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int);
                fn cudaGetDriverEntryPoint(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int);
                fn cudaGetDriverEntryPoint_ptsz(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int);
                fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: u64, status: *mut c_int);
                fn cudaGetDriverEntryPointByVersion_ptsz(symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: u64, status: *mut c_int);
            }
            real_only {
                fn cudaGetDevice(device: *mut c_int);
                fn cudaGetDeviceCount(count: *mut c_int);
                fn cuDeviceGetCount(count: *mut c_int);
                fn cudaSetDevice(device: c_int);
                fn cudaRuntimeGetVersion(version: *mut c_int);
                fn cudaStreamCreateWithFlags(stream: *mut cudaStream_t, flags: c_uint);
                fn cuCtxGetDevice(device: *mut CUdevice);
                fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: CUdevice);
                fn cuStreamCreate(stream: *mut CUstream, flags: c_uint);
                fn cudaDeviceGetMemPool(pool: *mut cudaMemPool_t, device: c_int);
                fn cudaDeviceGetDefaultMemPool(pool: *mut cudaMemPool_t, device: c_int);
                fn cudaMemPoolTrimTo(pool: cudaMemPool_t, keep: usize);
                fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, device: CUdevice);
                fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, device: CUdevice);
                fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize);
                // Where a kernel's parameters lie, for reading its operands.
                fn cudaFuncGetParamInfo(func: *const c_void, index: usize, offset: *mut usize, size: *mut usize);
                fn cudaGetFuncBySymbol(function: *mut CUfunction, symbol: *const c_void);
                fn cudaPeekAtLastError();
                fn cudaGetLastError();
                fn cuFuncGetParamInfo(f: CUfunction, index: usize, offset: *mut usize, size: *mut usize);
                fn cuKernelGetParamInfo(kernel: CUkernel, index: usize, offset: *mut usize, size: *mut usize);
                // A graph built node by node, read at its instantiation.
                fn cuGraphGetNodes(graph: cudaGraph_t, nodes: *mut *mut c_void, count: *mut usize);
                fn cuGraphNodeGetType(node: *mut c_void, kind: *mut c_int);
                fn cuGraphKernelNodeGetParams_v2(node: *mut c_void, params: *mut c_void);
                fn cuGraphChildGraphNodeGetGraph(node: *mut c_void, graph: *mut cudaGraph_t);
                // The spill tier's own virtual memory: address ranges, access,
                // and the waits that order its moves after the job's work.
                fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: u64);
                fn cuMemAddressFree(ptr: CUdeviceptr, size: usize);
                fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize);
                fn cuStreamSynchronize(stream: CUstream);
                fn cuCtxSynchronize();
                fn cudaDeviceSynchronize();
                // Events that say when a stream-ordered free of a tier block
                // has been reached, so that its memory serves another stream.
                fn cudaEventCreateWithFlags(event: *mut *mut c_void, flags: c_uint);
                fn cudaEventRecord(event: *mut c_void, stream: cudaStream_t);
                fn cudaEventRecord_ptsz(event: *mut c_void, stream: cudaStream_t);
                fn cudaEventQuery(event: *mut c_void);
                fn cudaEventSynchronize(event: *mut c_void);
                fn cudaStreamWaitEvent(stream: cudaStream_t, event: *mut c_void, flags: c_uint);
                fn cudaStreamWaitEvent_ptsz(stream: cudaStream_t, event: *mut c_void, flags: c_uint);
                fn cudaEventDestroy(event: *mut c_void);
                fn cuEventCreate(event: *mut *mut c_void, flags: c_uint);
                fn cuEventRecord(event: *mut c_void, stream: CUstream);
                fn cuEventRecord_ptsz(event: *mut c_void, stream: CUstream);
                fn cuEventQuery(event: *mut c_void);
                fn cuEventSynchronize(event: *mut c_void);
                fn cuStreamWaitEvent(stream: CUstream, event: *mut c_void, flags: c_uint);
                fn cuStreamWaitEvent_ptsz(stream: CUstream, event: *mut c_void, flags: c_uint);
                fn cuEventDestroy_v2(event: *mut c_void);
                fn cudnnBackendGetAttribute(descriptor: LibraryHandle, name: c_int, kind: c_int, requested: i64, count: *mut i64, elements: *mut c_void);
                // The mover thread works in the job's context, and may call
                // CUDA while another thread captures a graph.
                fn cuCtxGetCurrent(context: *mut *mut c_void);
                fn cuCtxSetCurrent(context: *mut c_void);
                fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int);
            }
        }
    };
}
pub(crate) use cuda_functions;
