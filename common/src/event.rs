//! The trace's vocabulary: what happened ([`Op`]), through which CUDA call
//! ([`Api`]), where the bytes went ([`Placement`]), and the fixed-size
//! [`Event`] that carries them, in the shim's memory and in the shared ring.

/// Declares a `#[repr(u8)]` enum with a name for each variant and a checked
/// conversion from the byte stored in shared memory.
macro_rules! named_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $text:literal, )* }) => {
        $(#[$meta])*
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name { $( $(#[$vmeta])* $variant = $value, )* }

        impl $name {
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )* ];

            pub const fn name(self) -> &'static str {
                match self { $( $name::$variant => $text, )* }
            }

            /// `None` for a byte no version of vramshare wrote.
            pub const fn from_u8(value: u8) -> Option<$name> {
                match value { $( $value => Some($name::$variant), )* _ => None }
            }

            pub fn from_name(text: &str) -> Option<$name> {
                match text { $( $text => Some($name::$variant), )* _ => None }
            }
        }
    };
}

named_enum! {
    /// What the shim did.
    pub enum Op {
        Alloc = 0 => "alloc",
        Free = 1 => "free",
        Promote = 2 => "promote",
        Demote = 3 => "demote",
        /// Over quota with spill off, or the runtime's own failure.
        Reject = 4 => "reject",
        /// The process's quota on a device changed while it ran: `size`
        /// is the new one, `ptr` the one before (`u64::MAX`: none).
        Quota = 5 => "quota",
        /// Its pool's budget on a device changed, as it saw: the same.
        Budget = 6 => "budget",
    }
}

named_enum! {
    /// Where a block's bytes live.
    pub enum Placement {
        Device = 0 => "device",
        /// Managed memory placed on the host and mapped for the device.
        Host = 1 => "host",
        /// A pointer the shim never handed out.
        Unknown = 2 => "unknown",
    }
}

impl Placement {
    /// The JSON form: `null` for a pointer the shim never handed out.
    pub fn json_name(self) -> Option<&'static str> {
        (self != Placement::Unknown).then(|| self.name())
    }
}

named_enum! {
    /// The CUDA call behind an event. The shim's hook list
    /// (`shim/src/cuda/functions.rs`) names each hook's variant, so a hook
    /// missing here does not compile.
    #[allow(non_camel_case_types)]
    pub enum Api {
        cudaMalloc = 0 => "cudaMalloc",
        cudaMallocManaged = 1 => "cudaMallocManaged",
        cudaMallocPitch = 2 => "cudaMallocPitch",
        cudaMalloc3D = 3 => "cudaMalloc3D",
        cudaMallocAsync = 4 => "cudaMallocAsync",
        cudaMallocAsync_ptsz = 5 => "cudaMallocAsync_ptsz",
        cudaMallocFromPoolAsync = 6 => "cudaMallocFromPoolAsync",
        cudaMallocFromPoolAsync_ptsz = 7 => "cudaMallocFromPoolAsync_ptsz",
        cudaFree = 8 => "cudaFree",
        cudaFreeAsync = 9 => "cudaFreeAsync",
        cudaFreeAsync_ptsz = 10 => "cudaFreeAsync_ptsz",
        cudaMemGetInfo = 11 => "cudaMemGetInfo",
        /// The shim's own prefetches (promotions and demotions).
        cudaMemPrefetchAsync = 12 => "cudaMemPrefetchAsync",
        cuMemAlloc_v2 = 13 => "cuMemAlloc_v2",
        cuMemAllocManaged = 14 => "cuMemAllocManaged",
        cuMemAllocPitch_v2 = 15 => "cuMemAllocPitch_v2",
        cuMemAllocAsync = 16 => "cuMemAllocAsync",
        cuMemAllocAsync_ptsz = 17 => "cuMemAllocAsync_ptsz",
        cuMemAllocFromPoolAsync = 18 => "cuMemAllocFromPoolAsync",
        cuMemAllocFromPoolAsync_ptsz = 19 => "cuMemAllocFromPoolAsync_ptsz",
        cuMemFree_v2 = 20 => "cuMemFree_v2",
        cuMemFreeAsync = 21 => "cuMemFreeAsync",
        cuMemFreeAsync_ptsz = 22 => "cuMemFreeAsync_ptsz",
        cuMemGetInfo_v2 = 23 => "cuMemGetInfo_v2",
        /// The shim's own prefetches of driver-API blocks.
        cuMemPrefetchAsync = 24 => "cuMemPrefetchAsync",
        cuGetProcAddress = 25 => "cuGetProcAddress",
        cuGetProcAddress_v2 = 26 => "cuGetProcAddress_v2",
        cudaGetDriverEntryPoint = 27 => "cudaGetDriverEntryPoint",
        cudaGetDriverEntryPoint_ptsz = 28 => "cudaGetDriverEntryPoint_ptsz",
        cudaGetDriverEntryPointByVersion = 29 => "cudaGetDriverEntryPointByVersion",
        cudaGetDriverEntryPointByVersion_ptsz = 30 => "cudaGetDriverEntryPointByVersion_ptsz",
        /// Physical memory of the virtual memory API; the event's `ptr` is the handle.
        cuMemCreate = 31 => "cuMemCreate",
        cuMemRelease = 32 => "cuMemRelease",
        /// Unmapping the last mapping of released physical memory frees it.
        cuMemUnmap = 33 => "cuMemUnmap",
        cuMemMap = 34 => "cuMemMap",
        // Kernel launches: counted, never recorded as events.
        cudaLaunchKernel = 35 => "cudaLaunchKernel",
        cudaLaunchKernel_ptsz = 36 => "cudaLaunchKernel_ptsz",
        __cudaLaunchKernel = 37 => "__cudaLaunchKernel",
        __cudaLaunchKernel_ptsz = 38 => "__cudaLaunchKernel_ptsz",
        cudaLaunchKernelExC = 39 => "cudaLaunchKernelExC",
        cudaLaunchKernelExC_ptsz = 40 => "cudaLaunchKernelExC_ptsz",
        cudaLaunchCooperativeKernel = 41 => "cudaLaunchCooperativeKernel",
        cudaLaunchCooperativeKernel_ptsz = 42 => "cudaLaunchCooperativeKernel_ptsz",
        cudaGraphLaunch = 43 => "cudaGraphLaunch",
        cudaGraphLaunch_ptsz = 44 => "cudaGraphLaunch_ptsz",
        cuLaunchKernel = 45 => "cuLaunchKernel",
        cuLaunchKernel_ptsz = 46 => "cuLaunchKernel_ptsz",
        cuLaunchKernelEx = 47 => "cuLaunchKernelEx",
        cuLaunchKernelEx_ptsz = 48 => "cuLaunchKernelEx_ptsz",
        cuLaunchCooperativeKernel = 49 => "cuLaunchCooperativeKernel",
        cuLaunchCooperativeKernel_ptsz = 50 => "cuLaunchCooperativeKernel_ptsz",
        cuGraphLaunch = 51 => "cuGraphLaunch",
        cuGraphLaunch_ptsz = 52 => "cuGraphLaunch_ptsz",
        // Library calls whose kernels hide their operands: counted, and
        // their operands read, never recorded as events.
        cublasLtMatmul = 53 => "cublasLtMatmul",
        cublasGemmEx = 54 => "cublasGemmEx",
        cublasGemmStridedBatchedEx = 55 => "cublasGemmStridedBatchedEx",
        cublasSgemm_v2 = 56 => "cublasSgemm_v2",
        cublasSgemmStridedBatched = 57 => "cublasSgemmStridedBatched",
        cudnnBackendExecute = 58 => "cudnnBackendExecute",
        cudnnBatchNormalizationForwardTrainingEx = 59 => "cudnnBatchNormalizationForwardTrainingEx",
        cudnnBatchNormalizationBackwardEx = 60 => "cudnnBatchNormalizationBackwardEx",
        cudnnBatchNormalizationForwardInference = 61 => "cudnnBatchNormalizationForwardInference",
        // Stream capture and executable graphs: never recorded as events.
        cudaStreamBeginCapture = 62 => "cudaStreamBeginCapture",
        cudaStreamBeginCapture_ptsz = 63 => "cudaStreamBeginCapture_ptsz",
        cudaStreamEndCapture = 64 => "cudaStreamEndCapture",
        cudaStreamEndCapture_ptsz = 65 => "cudaStreamEndCapture_ptsz",
        cudaGraphInstantiate = 66 => "cudaGraphInstantiate",
        cudaGraphInstantiateWithFlags = 67 => "cudaGraphInstantiateWithFlags",
        cudaGraphExecDestroy = 68 => "cudaGraphExecDestroy",
        // Unloading modules: never recorded as events.
        cuModuleUnload = 69 => "cuModuleUnload",
        cuLibraryUnload = 70 => "cuLibraryUnload",
        // The driver's stream capture and executable graphs.
        cuStreamBeginCapture_v2 = 71 => "cuStreamBeginCapture_v2",
        cuStreamBeginCapture_v2_ptsz = 72 => "cuStreamBeginCapture_v2_ptsz",
        cuStreamEndCapture = 73 => "cuStreamEndCapture",
        cuStreamEndCapture_ptsz = 74 => "cuStreamEndCapture_ptsz",
        cuGraphInstantiateWithFlags = 75 => "cuGraphInstantiateWithFlags",
        cuGraphExecDestroy = 76 => "cuGraphExecDestroy",
        // Graphs destroyed: their addresses may be reused at once.
        cudaGraphDestroy = 77 => "cudaGraphDestroy",
        cuGraphDestroy = 78 => "cuGraphDestroy",
        // Copies and memsets, read for the blocks they name.
        cudaMemcpy = 79 => "cudaMemcpy",
        cudaMemcpyAsync = 80 => "cudaMemcpyAsync",
        cudaMemcpyAsync_ptsz = 81 => "cudaMemcpyAsync_ptsz",
        cudaMemset = 82 => "cudaMemset",
        cudaMemsetAsync = 83 => "cudaMemsetAsync",
        cudaMemsetAsync_ptsz = 84 => "cudaMemsetAsync_ptsz",
        cuMemcpyAsync = 85 => "cuMemcpyAsync",
        cuMemcpyHtoDAsync_v2 = 86 => "cuMemcpyHtoDAsync_v2",
        cuMemcpyDtoHAsync_v2 = 87 => "cuMemcpyDtoHAsync_v2",
        cuMemcpyDtoDAsync_v2 = 88 => "cuMemcpyDtoDAsync_v2",
        cuMemsetD8Async = 89 => "cuMemsetD8Async",
        cuMemsetD32Async = 90 => "cuMemsetD32Async",
        cudaIpcGetMemHandle = 91 => "cudaIpcGetMemHandle",
        cuIpcGetMemHandle = 92 => "cuIpcGetMemHandle",
        /// No CUDA call: the shim's own doing (a quota it applied).
        vramshare = 93 => "vramshare",
        // A stream-ordered pool's statistics: never recorded as events.
        cudaMemPoolGetAttribute = 94 => "cudaMemPoolGetAttribute",
        cudaMemPoolSetAttribute = 95 => "cudaMemPoolSetAttribute",
        cuMemPoolGetAttribute = 96 => "cuMemPoolGetAttribute",
        cuMemPoolSetAttribute = 97 => "cuMemPoolSetAttribute",
        // Copies and memsets of other shapes, read for the blocks they name.
        cudaMemcpy2D = 98 => "cudaMemcpy2D",
        cudaMemcpy2DAsync = 99 => "cudaMemcpy2DAsync",
        cudaMemcpy2DAsync_ptsz = 100 => "cudaMemcpy2DAsync_ptsz",
        cudaMemset2D = 101 => "cudaMemset2D",
        cudaMemset2DAsync = 102 => "cudaMemset2DAsync",
        cudaMemset2DAsync_ptsz = 103 => "cudaMemset2DAsync_ptsz",
        cudaMemcpyPeer = 104 => "cudaMemcpyPeer",
        cudaMemcpyPeerAsync = 105 => "cudaMemcpyPeerAsync",
        cuMemcpy = 106 => "cuMemcpy",
        cuMemcpyHtoD_v2 = 107 => "cuMemcpyHtoD_v2",
        cuMemcpyDtoH_v2 = 108 => "cuMemcpyDtoH_v2",
        cuMemcpyDtoD_v2 = 109 => "cuMemcpyDtoD_v2",
        cuMemsetD8_v2 = 110 => "cuMemsetD8_v2",
        cuMemsetD32_v2 = 111 => "cuMemsetD32_v2",
        cudaMemcpy3D = 112 => "cudaMemcpy3D",
        cudaMemcpy3DAsync = 113 => "cudaMemcpy3DAsync",
        cudaMemcpy3DAsync_ptsz = 114 => "cudaMemcpy3DAsync_ptsz",
        cuMemcpy2D_v2 = 115 => "cuMemcpy2D_v2",
        cuMemcpy2DUnaligned_v2 = 116 => "cuMemcpy2DUnaligned_v2",
        cuMemcpy2DAsync_v2 = 117 => "cuMemcpy2DAsync_v2",
        cuMemcpy3D_v2 = 118 => "cuMemcpy3D_v2",
        cuMemcpy3DAsync_v2 = 119 => "cuMemcpy3DAsync_v2",
        cuMemcpyAsync_ptsz = 120 => "cuMemcpyAsync_ptsz",
        cuMemcpyHtoDAsync_v2_ptsz = 121 => "cuMemcpyHtoDAsync_v2_ptsz",
        cuMemcpyDtoHAsync_v2_ptsz = 122 => "cuMemcpyDtoHAsync_v2_ptsz",
        cuMemcpyDtoDAsync_v2_ptsz = 123 => "cuMemcpyDtoDAsync_v2_ptsz",
        cuMemsetD8Async_ptsz = 124 => "cuMemsetD8Async_ptsz",
        cuMemsetD32Async_ptsz = 125 => "cuMemsetD32Async_ptsz",
        cuMemcpy_ptds = 126 => "cuMemcpy_ptds",
        cuMemcpyHtoD_v2_ptds = 127 => "cuMemcpyHtoD_v2_ptds",
        cuMemcpyDtoH_v2_ptds = 128 => "cuMemcpyDtoH_v2_ptds",
        cuMemcpyDtoD_v2_ptds = 129 => "cuMemcpyDtoD_v2_ptds",
        cuMemsetD8_v2_ptds = 130 => "cuMemsetD8_v2_ptds",
        cuMemsetD32_v2_ptds = 131 => "cuMemsetD32_v2_ptds",
        cudaMemcpy_ptds = 132 => "cudaMemcpy_ptds",
        cudaMemset_ptds = 133 => "cudaMemset_ptds",
        cudaMemcpy2D_ptds = 134 => "cudaMemcpy2D_ptds",
        cudaMemset2D_ptds = 135 => "cudaMemset2D_ptds",
        cudaMemcpy3D_ptds = 136 => "cudaMemcpy3D_ptds",
        cuMemcpy2D_v2_ptds = 137 => "cuMemcpy2D_v2_ptds",
        cuMemcpy2DUnaligned_v2_ptds = 138 => "cuMemcpy2DUnaligned_v2_ptds",
        cuMemcpy2DAsync_v2_ptsz = 139 => "cuMemcpy2DAsync_v2_ptsz",
        cuMemcpy3D_v2_ptds = 140 => "cuMemcpy3D_v2_ptds",
        cuMemcpy3DAsync_v2_ptsz = 141 => "cuMemcpy3DAsync_v2_ptsz",
        // Where cuDNN is told a variant pack's pointers (it does not tell
        // them back): recorded for the pack's execution.
        cudnnBackendSetAttribute = 142 => "cudnnBackendSetAttribute",
        // The workspace set on a cuBLAS handle, which its products' kernels
        // may use: recorded, and named beside each product's operands.
        cublasSetWorkspace_v2 = 143 => "cublasSetWorkspace_v2",
        // The stream set on a cuBLAS or cuDNN handle, by which its calls
        // are ordered after the work that used their operands.
        cublasSetStream_v2 = 144 => "cublasSetStream_v2",
        cudnnSetStream = 145 => "cudnnSetStream",
        cublasDestroy_v2 = 146 => "cublasDestroy_v2",
        cudnnDestroy = 147 => "cudnnDestroy",
        // Executable graphs made with instantiation parameters (an upload
        // stream among them): as `cudaGraphInstantiateWithFlags`.
        cudaGraphInstantiateWithParams = 148 => "cudaGraphInstantiateWithParams",
        cudaGraphInstantiateWithParams_ptsz = 149 => "cudaGraphInstantiateWithParams_ptsz",
        cuGraphInstantiateWithParams = 150 => "cuGraphInstantiateWithParams",
        cuGraphInstantiateWithParams_ptsz = 151 => "cuGraphInstantiateWithParams_ptsz",
    }
}

/// What each API's name says of it, by its byte: worked out from the names
/// when compiled, since the hooks ask at every call.
const API_TRAITS: [u8; 256] = api_traits();
const DRIVER: u8 = 1;
const LIBRARY: u8 = 2;
const COPY: u8 = 4;
const PER_THREAD: u8 = 8;

/// Whether `name` holds `part` from byte `at` on.
const fn holds_at(name: &[u8], at: usize, part: &str) -> bool {
    let part = part.as_bytes();
    if at + part.len() > name.len() {
        return false;
    }
    let mut i = 0;
    while i < part.len() {
        if name[at + i] != part[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn starts_with(name: &[u8], prefix: &str) -> bool {
    holds_at(name, 0, prefix)
}

const fn ends_with(name: &[u8], suffix: &str) -> bool {
    name.len() >= suffix.len() && holds_at(name, name.len() - suffix.len(), suffix)
}

const fn api_traits() -> [u8; 256] {
    let mut traits = [0u8; 256];
    let mut byte = 0;
    while byte < 256 {
        if let Some(api) = Api::from_u8(byte as u8) {
            let name = api.name().as_bytes();
            let library = starts_with(name, "cublas") || starts_with(name, "cudnn");
            // `__cudaLaunchKernel`: the runtime's, for its host stubs.
            let runtime = starts_with(name, "cuda") || starts_with(name, "__cuda");
            let copy = starts_with(name, "cudaMemcpy")
                || starts_with(name, "cudaMemset")
                || starts_with(name, "cuMemcpy")
                || starts_with(name, "cuMemset");
            let per_thread = ends_with(name, "_ptsz") || ends_with(name, "_ptds");
            traits[byte] = if library { LIBRARY } else { 0 }
                | if !runtime && !library { DRIVER } else { 0 }
                | if copy { COPY } else { 0 }
                | if per_thread { PER_THREAD } else { 0 };
        }
        byte += 1;
    }
    traits
}

impl Api {
    fn has(self, trait_bit: u8) -> bool {
        API_TRAITS[self as u8 as usize] & trait_bit != 0
    }

    /// Whether the call belongs to the driver API (`cu…`) rather than the
    /// runtime (`cuda…`).
    pub fn is_driver(self) -> bool {
        self.has(DRIVER)
    }

    /// Whether the call is a kernel launch (a kernel's, or an executable
    /// graph's) rather than a library call or a copy.
    pub fn is_launch(self) -> bool {
        !self.is_library_call() && !self.is_copy()
    }

    /// Whether the call is a math library's (cuBLAS, cuBLASLt, cuDNN)
    /// rather than a kernel launch of CUDA's.
    pub fn is_library_call(self) -> bool {
        self.has(LIBRARY)
    }

    /// Whether the call is a copy or a memset (`cudaMemcpy…`, `cudaMemset…`,
    /// `cuMemcpy…`, `cuMemset…`) rather than a kernel launch.
    pub fn is_copy(self) -> bool {
        self.has(COPY)
    }

    /// Whether the call is a per-thread default stream form (`_ptsz`,
    /// `_ptds`), whose stream 0 is the calling thread's own.
    pub fn is_per_thread(self) -> bool {
        self.has(PER_THREAD)
    }
}

/// One event: plain integers only, 56 bytes, no padding, so that any bit
/// pattern read back from shared memory is a valid value (the enums are
/// stored as bytes and decoded with a check).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub seq: u64,
    /// `CLOCK_MONOTONIC`, comparable between processes of one machine.
    pub t_ns: u64,
    pub ptr: u64,
    pub size: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    /// The `cudaError_t` the caller got.
    pub rc: i32,
    pub op: u8,
    pub api: u8,
    pub placement: u8,
    /// For a spilled block allocated with room left under the quota: how
    /// much of its head lives on the device, in units of 2 MiB (40 bits,
    /// little-endian). See [`Event::device_part`].
    pub device_part_2mib: [u8; 5],
}

/// The unit of [`Event::device_part_2mib`].
pub const DEVICE_PART_UNIT: u64 = 2 << 20;

/// An event's size in 64-bit words, as the ring stores it.
pub const EVENT_WORDS: usize = 7;
const _: () = assert!(std::mem::size_of::<Event>() == EVENT_WORDS * 8);

impl Event {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seq: u64,
        t_ns: u64,
        pid: u32,
        tid: u32,
        op: Op,
        api: Api,
        device: i32,
        ptr: u64,
        size: u64,
        placement: Placement,
        rc: i32,
    ) -> Event {
        Event {
            seq,
            t_ns,
            ptr,
            size,
            pid,
            tid,
            device,
            rc,
            op: op as u8,
            api: api as u8,
            placement: placement as u8,
            device_part_2mib: [0; 5],
        }
    }

    pub fn to_words(self) -> [u64; EVENT_WORDS] {
        // SAFETY: Event is 56 bytes of plain integers with no padding.
        unsafe { std::mem::transmute(self) }
    }

    pub fn from_words(words: [u64; EVENT_WORDS]) -> Event {
        // SAFETY: every bit pattern is a valid Event (integers only).
        unsafe { std::mem::transmute(words) }
    }

    /// Bytes of the block's head on the device (a multiple of 2 MiB).
    pub fn device_part(&self) -> u64 {
        let mut bytes = [0u8; 8];
        bytes[..5].copy_from_slice(&self.device_part_2mib);
        u64::from_le_bytes(bytes) * DEVICE_PART_UNIT
    }

    /// Records `bytes` (rounded down to 2 MiB) as the block's device part.
    pub fn with_device_part(mut self, bytes: u64) -> Event {
        let units = (bytes / DEVICE_PART_UNIT).min((1 << 40) - 1);
        self.device_part_2mib
            .copy_from_slice(&units.to_le_bytes()[..5]);
        self
    }

    pub fn op(&self) -> Option<Op> {
        Op::from_u8(self.op)
    }
    pub fn api(&self) -> Option<Api> {
        Api::from_u8(self.api)
    }
    pub fn placement(&self) -> Option<Placement> {
        Placement::from_u8(self.placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_codes_are_their_places_in_the_list() {
        // The shim counts launches in a table indexed by code, read back
        // in the list's order.
        for (place, api) in Api::ALL.iter().enumerate() {
            assert_eq!(*api as usize, place, "{}", api.name());
        }
    }

    #[test]
    fn what_a_name_says_of_its_api_is_read_from_the_name() {
        for api in Api::ALL {
            let name = api.name();
            let library = name.starts_with("cublas") || name.starts_with("cudnn");
            assert_eq!(api.is_library_call(), library, "{name}");
            assert_eq!(
                api.is_driver(),
                !library && !name.trim_start_matches('_').starts_with("cuda"),
                "{name}"
            );
            let copy = ["cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset"];
            assert_eq!(
                api.is_copy(),
                copy.iter().any(|p| name.starts_with(p)),
                "{name}"
            );
            let per_thread = name.ends_with("_ptsz") || name.ends_with("_ptds");
            assert_eq!(api.is_per_thread(), per_thread, "{name}");
        }
        assert!(Api::cuLaunchKernel.is_driver() && !Api::__cudaLaunchKernel.is_driver());
        assert!(Api::cudaLaunchKernel_ptsz.is_per_thread());
        assert!(Api::cublasSetStream_v2.is_library_call());
    }

    #[test]
    fn names_round_trip() {
        for api in Api::ALL {
            assert_eq!(Api::from_u8(*api as u8), Some(*api));
            assert_eq!(Api::from_name(api.name()), Some(*api));
        }
        assert_eq!(Api::from_u8(200), None);
        assert_eq!(Op::from_name("promote"), Some(Op::Promote));
        assert_eq!(Placement::Unknown.json_name(), None);
    }

    #[test]
    fn events_round_trip_through_words() {
        let event = Event::new(
            7,
            99,
            1234,
            1240,
            Op::Alloc,
            Api::cudaMalloc,
            0,
            0x7f00,
            4096,
            Placement::Host,
            0,
        );
        assert_eq!(Event::from_words(event.to_words()), event);
        assert_eq!(event.op(), Some(Op::Alloc));
        assert_eq!(event.placement(), Some(Placement::Host));
        let split = event.with_device_part(6 << 20);
        assert_eq!(split.device_part(), 6 << 20);
        assert_eq!(Event::from_words(split.to_words()).device_part(), 6 << 20);
        assert_eq!(
            event.with_device_part(3 << 20).device_part(),
            2 << 20,
            "whole 2 MiB units"
        );
    }
}
