//! What NVIDIA's profilers see of a program: the profiler's capture range
//! ([`start_profiler`], [`stop_profiler`]: `cudaProfilerStart`/`Stop`, for
//! `nsys profile --capture-range=cudaProfilerApi`), and, with the feature `nvtx`, NVTX: ranges
//! and marks on the timeline (`profiling::range`, `profiling::mark`) and streams and events
//! shown by the names you give them (`StreamRef::nvtx_name`, `Event::nvtx_name`,
//! `StreamPool::nvtx_name`).
//!
//! NVTX here is NVTX 3's protocol, written in Rust: no `libnvToolsExt` is linked or loaded. At
//! the first NVTX call the process looks for a tool once, as NVTX's headers do on Linux: the
//! library that `NVTX_INJECTION64_PATH` names (what Nsight Systems and Nsight Compute set),
//! given NVTX's export tables with every module's function table. Without one, every later
//! call is one atomic load and returns: no name is even converted to a C string. With the
//! feature off none of it exists.

use crate::device::Device;
use crate::ffi::driver;
use crate::ffi::error::Result;

/// Starts the profiler's capture of the current process's work on `device`
/// ([`cudaProfilerStart`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PROFILER.html),
/// as `cuProfilerStart` in `device`'s primary context): with `nsys profile
/// --capture-range=cudaProfilerApi`, what runs between this and [`stop_profiler`] is what the
/// report holds. Without a profiler attached it does nothing.
///
/// # Errors
/// [`Error::InsideHostFn`](crate::Error::InsideHostFn); the errors of making the device current;
/// CUDA's errors.
pub fn start_profiler(device: Device) -> Result<()> {
    let _current = device.make_current()?;
    driver::profiler_start()
}

/// Stops the capture [`start_profiler`] started
/// ([`cudaProfilerStop`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PROFILER.html),
/// as `cuProfilerStop`).
///
/// # Errors
/// As [`start_profiler`].
pub fn stop_profiler(device: Device) -> Result<()> {
    let _current = device.make_current()?;
    driver::profiler_stop()
}

#[cfg(feature = "nvtx")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
pub use nvtx::{Range, mark, range};

#[cfg(feature = "nvtx")]
mod nvtx {
    use crate::event::Event;
    use crate::stream::StreamRef;
    use crate::sys;
    use std::cell::UnsafeCell;
    use std::ffi::{CString, c_char, c_int, c_uint, c_void};
    use std::marker::PhantomData;
    use std::sync::Once;
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

    /// NVTX's callback modules (`NvtxCallbackModule` in `nvtxDetail/nvtxTypes.h`), and each
    /// one's size (its callback ids run from 1 to the size minus 1). Every module gets its
    /// table, as NVTX's headers give them (tools ask for all of them, and some give up without
    /// one); this crate calls five callbacks of two of them.
    const MODULE_CORE: c_int = 1;
    const MODULE_CUDA: c_int = 2;
    const MODULE_OPENCL: c_int = 3;
    const MODULE_CUDART: c_int = 4;
    const MODULE_CORE2: c_int = 5;
    const MODULE_SYNC: c_int = 6;
    const CORE_SIZE: usize = 16;
    const CUDA_SIZE: usize = 9;
    const OPENCL_SIZE: usize = 15;
    const CUDART_SIZE: usize = 7;
    const CORE2_SIZE: usize = 16;
    const SYNC_SIZE: usize = 7;
    /// The callback ids this crate calls.
    const CORE_MARK_A: usize = 2;
    const CORE_RANGE_PUSH_A: usize = 9;
    const CORE_RANGE_POP: usize = 11;
    const CUDART_NAME_STREAM_A: usize = 3;
    const CUDART_NAME_EVENT_A: usize = 5;
    /// NVTX's export tables (`NvtxExportTableID`).
    const EXPORT_TABLE_CALLBACKS: u32 = 1;
    const EXPORT_TABLE_VERSION_INFO: u32 = 3;
    /// The NVTX API version these tables follow.
    const NVTX_VERSION: u32 = 3;

    /// A module as NVTX hands it to a tool: its slots, where the tool writes the function it
    /// implements each callback with (null: not implemented; slot 0, the invalid id, unused),
    /// and its table, a pointer to each slot of ids 1 to `SIZE - 1` between two nulls (index 0
    /// and index `SIZE`: a tool that reads past the table then stops). `ENTRIES` is `SIZE + 1`.
    struct Module<const SIZE: usize, const ENTRIES: usize> {
        slots: UnsafeCell<[*const c_void; SIZE]>,
        table: UnsafeCell<[*mut *const c_void; ENTRIES]>,
    }

    // SAFETY: the tables are filled inside `INIT` (one thread, once) before a tool sees them;
    // the tool writes the slots during its initialization, inside `INIT` too, and the slots are
    // read after `INIT` completed (atomically: a tool that writes again later races nothing).
    unsafe impl<const SIZE: usize, const ENTRIES: usize> Sync for Module<SIZE, ENTRIES> {}

    impl<const SIZE: usize, const ENTRIES: usize> Module<SIZE, ENTRIES> {
        const fn new() -> Self {
            Module {
                slots: UnsafeCell::new([std::ptr::null(); SIZE]),
                table: UnsafeCell::new([std::ptr::null_mut(); ENTRIES]),
            }
        }

        /// Points the table's entries 1 to `SIZE - 1` at their slots.
        ///
        /// # Safety
        /// Inside `INIT`, before a tool has the table.
        unsafe fn fill(&self) {
            const { assert!(ENTRIES == SIZE + 1) };
            let (slots, table) =
                (self.slots.get().cast::<*const c_void>(), self.table.get().cast::<*mut *const c_void>());
            for id in 1..SIZE {
                // SAFETY: the caller's contract (nothing else touches them); `id` is within both.
                unsafe { *table.add(id) = slots.add(id).cast_mut() };
            }
        }

        /// The table and its size, for `GetModuleFunctionTable`.
        fn table(&self) -> (*mut *mut *const c_void, usize) {
            (self.table.get().cast(), SIZE)
        }

        /// The tool's function for callback `id`, if it implements it: read after `INIT`.
        fn slot(&self, id: usize) -> Option<*const c_void> {
            assert!(id > 0 && id < SIZE, "a callback id of the module");
            // SAFETY: a slot of this module, a pointer-sized, aligned location that lives for
            // the process; read atomically (a tool may write it again from another thread).
            let slot = unsafe { AtomicPtr::from_ptr(self.slots.get().cast::<*mut c_void>().add(id)) };
            let function = slot.load(Ordering::Acquire);
            (!function.is_null()).then_some(function.cast_const())
        }
    }

    static CORE: Module<CORE_SIZE, { CORE_SIZE + 1 }> = Module::new();
    static CUDA: Module<CUDA_SIZE, { CUDA_SIZE + 1 }> = Module::new();
    static OPENCL: Module<OPENCL_SIZE, { OPENCL_SIZE + 1 }> = Module::new();
    static CUDART: Module<CUDART_SIZE, { CUDART_SIZE + 1 }> = Module::new();
    static CORE2: Module<CORE2_SIZE, { CORE2_SIZE + 1 }> = Module::new();
    static SYNC: Module<SYNC_SIZE, { SYNC_SIZE + 1 }> = Module::new();

    /// `NvtxExportTableCallbacks`.
    #[repr(C)]
    struct ExportTableCallbacks {
        struct_size: usize,
        get_module_function_table: unsafe extern "C" fn(c_int, *mut *mut *mut *const c_void, *mut c_uint) -> c_int,
    }

    /// `NvtxExportTableVersionInfo`.
    #[repr(C)]
    struct ExportTableVersionInfo {
        struct_size: usize,
        version: u32,
        reserved0: u32,
        set_injection_nvtx_version: unsafe extern "C" fn(u32),
    }

    static CALLBACKS: ExportTableCallbacks =
        ExportTableCallbacks { struct_size: size_of::<ExportTableCallbacks>(), get_module_function_table };
    static VERSION_INFO: ExportTableVersionInfo = ExportTableVersionInfo {
        struct_size: size_of::<ExportTableVersionInfo>(),
        version: NVTX_VERSION,
        reserved0: 0,
        set_injection_nvtx_version,
    };

    /// `nvtxEtiGetModuleFunctionTable`: a module's table and its number of slots (the size of
    /// the module's callback ids), for the tool to write its functions into.
    unsafe extern "C" fn get_module_function_table(
        module: c_int,
        out_table: *mut *mut *mut *const c_void,
        out_size: *mut c_uint,
    ) -> c_int {
        let (table, size) = match module {
            MODULE_CORE => CORE.table(),
            MODULE_CUDA => CUDA.table(),
            MODULE_OPENCL => OPENCL.table(),
            MODULE_CUDART => CUDART.table(),
            MODULE_CORE2 => CORE2.table(),
            MODULE_SYNC => SYNC.table(),
            _ => return 0,
        };
        // SAFETY: the tool passes valid out-pointers or null, as NVTX's contract has it.
        unsafe {
            if !out_size.is_null() {
                *out_size = size as c_uint;
            }
            if !out_table.is_null() {
                *out_table = table;
            }
        }
        1
    }

    /// `nvtxEtiSetInjectionNvtxVersion`: reserved, ignored (as by NVTX's own headers).
    unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

    /// `nvtxGetExportTable`, handed to the tool's `InitializeInjectionNvtx2`.
    unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
        match id {
            EXPORT_TABLE_CALLBACKS => (&raw const CALLBACKS).cast(),
            EXPORT_TABLE_VERSION_INFO => (&raw const VERSION_INFO).cast(),
            _ => std::ptr::null(),
        }
    }

    type InitializeInjection = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> c_int;

    unsafe extern "C" {
        fn dlopen(path: *const c_char, flags: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    const RTLD_LAZY: c_int = 1;

    static INIT: Once = Once::new();
    /// Whether a tool took the process's NVTX calls (set once, by `INIT`).
    static ATTACHED: AtomicBool = AtomicBool::new(false);

    /// Whether a tool is attached, looking for one the first time (see the module docs).
    #[inline(always)]
    fn attached() -> bool {
        INIT.call_once(attach);
        ATTACHED.load(Ordering::Acquire)
    }

    #[cold]
    fn attach() {
        // SAFETY: inside `INIT`, before any tool has a table.
        unsafe {
            CORE.fill();
            CUDA.fill();
            OPENCL.fill();
            CUDART.fill();
            CORE2.fill();
            SYNC.fill();
        }
        // The tool `NVTX_INJECTION64_PATH` names, as NVTX's headers look for it on Linux (they
        // take no injection already in the process; an empty value names none).
        let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH").filter(|path| !path.is_empty()) else { return };
        let Ok(path) = CString::new(std::os::unix::ffi::OsStringExt::into_vec(path)) else { return };
        // SAFETY: a NUL-terminated path; loading a tool is what the variable asks for.
        let library = unsafe { dlopen(path.as_ptr(), RTLD_LAZY) };
        if library.is_null() {
            return;
        }
        // SAFETY: a library handle and a NUL-terminated symbol name.
        let init = unsafe { dlsym(library, c"InitializeInjectionNvtx2".as_ptr()) };
        if init.is_null() {
            return;
        }
        // SAFETY: `InitializeInjectionNvtx2` has this signature in NVTX's protocol.
        let init = unsafe { std::mem::transmute::<*mut c_void, InitializeInjection>(init) };
        // SAFETY: the tool's entry point, called once, with NVTX's export-table getter; it
        // writes its functions into the slots through the tables.
        if unsafe { init(get_export_table) } != 0 {
            ATTACHED.store(true, Ordering::Release);
        }
    }

    /// The tool's function for callback `id` of `module`, if a tool is attached and implements
    /// it.
    #[inline(always)]
    fn implementation<const SIZE: usize, const ENTRIES: usize>(
        module: &Module<SIZE, ENTRIES>,
        id: usize,
    ) -> Option<*const c_void> {
        if !attached() {
            return None;
        }
        module.slot(id)
    }

    /// `name` as a C string, cut at its first NUL (a C string cannot hold one).
    fn c_name(name: &str) -> CString {
        let name = name.split('\0').next().unwrap_or_default();
        CString::new(name).unwrap_or_default()
    }

    /// Marks an instant on this thread's timeline (`nvtxMarkA`).
    pub fn mark(name: &str) {
        if let Some(function) = implementation(&CORE, CORE_MARK_A) {
            // SAFETY: the tool's `nvtxMarkA`: `void (const char*)`.
            let mark = unsafe { std::mem::transmute::<*const c_void, unsafe extern "C" fn(*const c_char)>(function) };
            let name = c_name(name);
            // SAFETY: a NUL-terminated string that lives through the call.
            unsafe { mark(name.as_ptr()) };
        }
    }

    /// A range of this thread's timeline, from now until the guard drops (`nvtxRangePushA`,
    /// then `nvtxRangePop`). Ranges nest; the guard stays on its thread (`!Send`), as NVTX's
    /// push and pop must.
    pub fn range(name: &str) -> Range {
        let pushed = match implementation(&CORE, CORE_RANGE_PUSH_A) {
            Some(function) => {
                // SAFETY: the tool's `nvtxRangePushA`: `int (const char*)`.
                let push = unsafe {
                    std::mem::transmute::<*const c_void, unsafe extern "C" fn(*const c_char) -> c_int>(function)
                };
                let name = c_name(name);
                // SAFETY: a NUL-terminated string that lives through the call.
                unsafe { push(name.as_ptr()) };
                true
            }
            None => false,
        };
        Range { pushed, _on_this_thread: PhantomData }
    }

    /// A range of the timeline, ended when dropped (see [`range`]).
    #[derive(Debug)]
    #[must_use = "the range ends when the guard drops"]
    pub struct Range {
        pushed: bool,
        _on_this_thread: PhantomData<*const ()>,
    }

    impl Drop for Range {
        fn drop(&mut self) {
            if !self.pushed {
                return;
            }
            if let Some(function) = implementation(&CORE, CORE_RANGE_POP) {
                // SAFETY: the tool's `nvtxRangePop`: `int (void)`.
                let pop = unsafe { std::mem::transmute::<*const c_void, unsafe extern "C" fn() -> c_int>(function) };
                // SAFETY: no arguments; pops the range this guard pushed on this thread.
                unsafe { pop() };
            }
        }
    }

    impl StreamRef {
        /// Shows this stream by `name` in NVIDIA's tools, as Nsight Systems' timeline rows
        /// (`nvtxNameCudaStreamA`). Feature `nvtx`; nothing without a tool attached (see
        /// [`profiling`](crate::profiling)). A name with a NUL is cut there.
        #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
        pub fn nvtx_name(&self, name: &str) {
            name_handle(CUDART_NAME_STREAM_A, self.as_raw().cast(), name);
        }
    }

    impl Event {
        /// Shows this event by `name` in NVIDIA's tools (`nvtxNameCudaEventA`). Feature
        /// `nvtx`; as [`StreamRef::nvtx_name`].
        #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
        pub fn nvtx_name(&self, name: &str) {
            name_handle(CUDART_NAME_EVENT_A, self.as_raw().cast(), name);
        }
    }

    /// Names the CUDA handle `handle` through the runtime module's callback `id`
    /// (`void (handle, const char*)`).
    fn name_handle(id: usize, handle: *mut c_void, name: &str) {
        if let Some(function) = implementation(&CUDART, id) {
            // SAFETY: the tool's `nvtxNameCudaStreamA`/`nvtxNameCudaEventA`: `void (handle, const char*)`,
            // handles being pointers.
            let name_it = unsafe {
                std::mem::transmute::<*const c_void, unsafe extern "C" fn(*mut c_void, *const c_char)>(function)
            };
            let name = c_name(name);
            // SAFETY: the handle is passed by value; a NUL-terminated string that lives through
            // the call.
            unsafe { name_it(handle, name.as_ptr()) };
        }
    }

    /// The handle types the names are for, as the runtime declares them.
    const _: () = {
        assert!(size_of::<sys::cudaStream_t>() == size_of::<*mut c_void>());
        assert!(size_of::<sys::cudaEvent_t>() == size_of::<*mut c_void>());
    };

    #[cfg(test)]
    mod tests {
        /// The module's layout against NVTX's `nvtxTypes.h`: struct sizes a tool checks.
        #[test]
        fn export_tables_have_nvtx_layouts() {
            assert_eq!(super::CALLBACKS.struct_size, 16);
            assert_eq!(super::VERSION_INFO.struct_size, 24);
        }
    }
}
