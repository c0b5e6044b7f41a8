//! The handlers of the math library calls read for their operands (their
//! kernels carry no parameter layout): each names the call's own operand
//! pointers and makes the call.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_int, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;
use crate::policy::tier::Reads;
use crate::policy::{blas_workspaces, library_streams, variant_packs};
use crate::state::state;

/// The stream set on a library call's handle, if it was.
fn handle_stream(handle: LibraryHandle) -> Option<usize> {
    library_streams::of(state(), handle)
}

/// A cuBLAS product of an `m` × k matrix by a k × `n` one on `handle`
/// (`operands`: its matrices and scalars), made by `real`: named with the
/// workspace set on the handle, which its kernels may use, and ordered on
/// the handle's stream.
fn cublas_product(
    api: Api,
    handle: LibraryHandle,
    (m, n): (c_int, c_int),
    operands: [*const c_void; 5],
    real: impl FnOnce() -> c_int,
) -> cudaError_t {
    let workspace = blas_workspaces::of(state(), handle);
    let [a, b, c, alpha, beta] = operands;
    let operands = [a, b, c, alpha, beta, workspace];
    let reads = Reads::of_product(m, n);
    super::super::library_call(api, &operands, handle_stream(handle), reads, real)
}

pub unsafe fn cublasLtMatmul(
    handle: LibraryHandle,
    desc: LibraryHandle,
    alpha: *const c_void,
    a: *const c_void,
    a_layout: LibraryHandle,
    b: *const c_void,
    b_layout: LibraryHandle,
    beta: *const c_void,
    c: *const c_void,
    c_layout: LibraryHandle,
    d: *mut c_void,
    d_layout: LibraryHandle,
    algo: *const c_void,
    workspace: *mut c_void,
    workspace_size: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let operands = [
        a,
        b,
        c,
        d as *const c_void,
        workspace as *const c_void,
        alpha,
        beta,
    ];
    super::super::library_call(
        Api::cublasLtMatmul,
        &operands,
        Some(stream as usize),
        Reads::Many,
        || {
            // SAFETY: the caller's arguments, as cuBLASLt would receive them.
            unsafe {
                real::cublasLtMatmul(
                    handle,
                    desc,
                    alpha,
                    a,
                    a_layout,
                    b,
                    b_layout,
                    beta,
                    c,
                    c_layout,
                    d,
                    d_layout,
                    algo,
                    workspace,
                    workspace_size,
                    stream,
                )
            }
        },
    )
}

pub unsafe fn cublasGemmEx(
    handle: LibraryHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    compute: c_int,
    algo: c_int,
) -> cudaError_t {
    let operands = [a, b, c as *const c_void, alpha, beta];
    cublas_product(Api::cublasGemmEx, handle, (m, n), operands, || {
        // SAFETY: the caller's arguments, as cuBLAS would receive them.
        unsafe {
            real::cublasGemmEx(
                handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c,
                c_type, ldc, compute, algo,
            )
        }
    })
}

pub unsafe fn cublasGemmStridedBatchedEx(
    handle: LibraryHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    stride_a: i64,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    stride_b: i64,
    beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    stride_c: i64,
    batch: c_int,
    compute: c_int,
    algo: c_int,
) -> cudaError_t {
    let operands = [a, b, c as *const c_void, alpha, beta];
    cublas_product(
        Api::cublasGemmStridedBatchedEx,
        handle,
        (m, n),
        operands,
        || {
            // SAFETY: the caller's arguments, as cuBLAS would receive them.
            unsafe {
                real::cublasGemmStridedBatchedEx(
                    handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type,
                    ldb, stride_b, beta, c, c_type, ldc, stride_c, batch, compute, algo,
                )
            }
        },
    )
}

pub unsafe fn cublasSgemm_v2(
    handle: LibraryHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> cudaError_t {
    let operands = [a, b, c as *const f32, alpha, beta].map(|p| p as *const c_void);
    cublas_product(Api::cublasSgemm_v2, handle, (m, n), operands, || {
        // SAFETY: the caller's arguments, as cuBLAS would receive them.
        unsafe {
            real::cublasSgemm_v2(
                handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
            )
        }
    })
}

pub unsafe fn cublasSgemmStridedBatched(
    handle: LibraryHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    stride_a: i64,
    b: *const f32,
    ldb: c_int,
    stride_b: i64,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
    stride_c: i64,
    batch: c_int,
) -> cudaError_t {
    let operands = [a, b, c as *const f32, alpha, beta].map(|p| p as *const c_void);
    cublas_product(
        Api::cublasSgemmStridedBatched,
        handle,
        (m, n),
        operands,
        || {
            // SAFETY: the caller's arguments, as cuBLAS would receive them.
            unsafe {
                real::cublasSgemmStridedBatched(
                    handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                    beta, c, ldc, stride_c, batch,
                )
            }
        },
    )
}

pub unsafe fn cublasSetWorkspace_v2(
    handle: LibraryHandle,
    workspace: *mut c_void,
    size: usize,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as cuBLAS would receive them.
    let rc = unsafe { real::cublasSetWorkspace_v2(handle, workspace, size) };
    if rc == 0 {
        blas_workspaces::set(state(), handle, workspace, size);
    }
    rc
}

pub unsafe fn cublasSetStream_v2(handle: LibraryHandle, stream: cudaStream_t) -> cudaError_t {
    library_streams::set(state(), handle, stream, || {
        // SAFETY: the caller's arguments, as cuBLAS would receive them.
        unsafe { real::cublasSetStream_v2(handle, stream) }
    })
}

pub unsafe fn cudnnSetStream(handle: LibraryHandle, stream: cudaStream_t) -> cudaError_t {
    library_streams::set(state(), handle, stream, || {
        // SAFETY: the caller's arguments, as cuDNN would receive them.
        unsafe { real::cudnnSetStream(handle, stream) }
    })
}

pub unsafe fn cublasDestroy_v2(handle: LibraryHandle) -> cudaError_t {
    library_streams::forget(state(), handle);
    blas_workspaces::forget(state(), handle);
    // SAFETY: the caller's argument, as cuBLAS would receive it.
    unsafe { real::cublasDestroy_v2(handle) }
}

pub unsafe fn cudnnDestroy(handle: LibraryHandle) -> cudaError_t {
    library_streams::forget(state(), handle);
    // SAFETY: the caller's argument, as cuDNN would receive it.
    unsafe { real::cudnnDestroy(handle) }
}

pub unsafe fn cudnnBackendExecute(
    handle: LibraryHandle,
    plan: LibraryHandle,
    pack: LibraryHandle,
) -> cudaError_t {
    let operands = variant_packs::pointers(state(), pack);
    super::super::library_call(
        Api::cudnnBackendExecute,
        &operands,
        handle_stream(handle),
        Reads::Many,
        || {
            // SAFETY: the caller's arguments, as cuDNN would receive them.
            unsafe { real::cudnnBackendExecute(handle, plan, pack) }
        },
    )
}

pub unsafe fn cudnnBackendSetAttribute(
    descriptor: LibraryHandle,
    name: c_int,
    kind: c_int,
    count: i64,
    elements: *const c_void,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as cuDNN requires them.
    unsafe { variant_packs::set(state(), descriptor, name, kind, count, elements) };
    // SAFETY: as above.
    unsafe { real::cudnnBackendSetAttribute(descriptor, name, kind, count, elements) }
}

pub unsafe fn cudnnBatchNormalizationForwardTrainingEx(
    handle: LibraryHandle,
    mode: c_int,
    ops: c_int,
    alpha: *const c_void,
    beta: *const c_void,
    x_desc: LibraryHandle,
    x: *const c_void,
    z_desc: LibraryHandle,
    z: *const c_void,
    y_desc: LibraryHandle,
    y: *mut c_void,
    bn_desc: LibraryHandle,
    scale: *const c_void,
    bias: *const c_void,
    factor: f64,
    running_mean: *mut c_void,
    running_var: *mut c_void,
    epsilon: f64,
    save_mean: *mut c_void,
    save_inv_var: *mut c_void,
    activation: LibraryHandle,
    workspace: *mut c_void,
    workspace_size: usize,
    reserve: *mut c_void,
    reserve_size: usize,
) -> cudaError_t {
    let operands = [
        x,
        z,
        y as _,
        scale,
        bias,
        running_mean as _,
        running_var as _,
        save_mean as _,
        save_inv_var as _,
        workspace as _,
        reserve as _,
    ];
    let api = Api::cudnnBatchNormalizationForwardTrainingEx;
    super::super::library_call(api, &operands, handle_stream(handle), Reads::Many, || {
        // SAFETY: the caller's arguments, as cuDNN would receive them.
        unsafe {
            real::cudnnBatchNormalizationForwardTrainingEx(
                handle,
                mode,
                ops,
                alpha,
                beta,
                x_desc,
                x,
                z_desc,
                z,
                y_desc,
                y,
                bn_desc,
                scale,
                bias,
                factor,
                running_mean,
                running_var,
                epsilon,
                save_mean,
                save_inv_var,
                activation,
                workspace,
                workspace_size,
                reserve,
                reserve_size,
            )
        }
    })
}

pub unsafe fn cudnnBatchNormalizationBackwardEx(
    handle: LibraryHandle,
    mode: c_int,
    ops: c_int,
    alpha_data: *const c_void,
    beta_data: *const c_void,
    alpha_param: *const c_void,
    beta_param: *const c_void,
    x_desc: LibraryHandle,
    x: *const c_void,
    y_desc: LibraryHandle,
    y: *const c_void,
    dy_desc: LibraryHandle,
    dy: *const c_void,
    dz_desc: LibraryHandle,
    dz: *mut c_void,
    dx_desc: LibraryHandle,
    dx: *mut c_void,
    bn_desc: LibraryHandle,
    scale: *const c_void,
    bias: *const c_void,
    d_scale: *mut c_void,
    d_bias: *mut c_void,
    epsilon: f64,
    save_mean: *const c_void,
    save_inv_var: *const c_void,
    activation: LibraryHandle,
    workspace: *mut c_void,
    workspace_size: usize,
    reserve: *mut c_void,
    reserve_size: usize,
) -> cudaError_t {
    let operands = [
        x,
        y,
        dy,
        dz as _,
        dx as _,
        scale,
        bias,
        d_scale as _,
        d_bias as _,
        save_mean,
        save_inv_var,
        workspace as _,
        reserve as _,
    ];
    let api = Api::cudnnBatchNormalizationBackwardEx;
    super::super::library_call(api, &operands, handle_stream(handle), Reads::Many, || {
        // SAFETY: the caller's arguments, as cuDNN would receive them.
        unsafe {
            real::cudnnBatchNormalizationBackwardEx(
                handle,
                mode,
                ops,
                alpha_data,
                beta_data,
                alpha_param,
                beta_param,
                x_desc,
                x,
                y_desc,
                y,
                dy_desc,
                dy,
                dz_desc,
                dz,
                dx_desc,
                dx,
                bn_desc,
                scale,
                bias,
                d_scale,
                d_bias,
                epsilon,
                save_mean,
                save_inv_var,
                activation,
                workspace,
                workspace_size,
                reserve,
                reserve_size,
            )
        }
    })
}

pub unsafe fn cudnnBatchNormalizationForwardInference(
    handle: LibraryHandle,
    mode: c_int,
    alpha: *const c_void,
    beta: *const c_void,
    x_desc: LibraryHandle,
    x: *const c_void,
    y_desc: LibraryHandle,
    y: *mut c_void,
    bn_desc: LibraryHandle,
    scale: *const c_void,
    bias: *const c_void,
    mean: *const c_void,
    var: *const c_void,
    epsilon: f64,
) -> cudaError_t {
    let operands = [x, y as _, scale, bias, mean, var];
    let api = Api::cudnnBatchNormalizationForwardInference;
    super::super::library_call(api, &operands, handle_stream(handle), Reads::Many, || {
        // SAFETY: the caller's arguments, as cuDNN would receive them.
        unsafe {
            real::cudnnBatchNormalizationForwardInference(
                handle, mode, alpha, beta, x_desc, x, y_desc, y, bn_desc, scale, bias, mean, var,
                epsilon,
            )
        }
    })
}
