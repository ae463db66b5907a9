//! A launch's arguments: a tuple of values that CUDA copies into the kernel's parameters.

use crate::memory::DeviceCopy;
use std::ffi::c_void;

/// A value a kernel parameter can take: its bytes are copied into the parameter as they are.
///
/// # Safety
/// The type has no padding and owns nothing (plain old data): numbers, raw pointers, and
/// [`DeviceCopy`] types (`#[repr(C)]` structs that mirror a C++ struct parameter).
pub unsafe trait KernelArg: Copy {}

// SAFETY: `DeviceCopy` promises plain old data.
unsafe impl<T: DeviceCopy> KernelArg for T {}
// SAFETY: an address; the kernel decides what it may do with it (the launch's `unsafe`).
unsafe impl<T> KernelArg for *const T {}
// SAFETY: as above.
unsafe impl<T> KernelArg for *mut T {}

/// The arguments of one launch: a tuple of [`KernelArg`]s, `()` for a kernel without
/// parameters.
///
/// # Safety
/// `SIZES` holds the byte size of each element in order, and `with_pointers` passes one
/// pointer per element, to that element, in order (and a null after them).
pub unsafe trait KernelArgs: Copy {
    /// The byte size of each argument, in order.
    const SIZES: &'static [usize];

    /// Calls `launch` with a pointer to each argument (the `void** args` of
    /// `cudaLaunchKernelEx`), followed by a null.
    fn with_pointers<R>(&self, launch: impl FnOnce(*mut *mut c_void) -> R) -> R;
}

macro_rules! kernel_args {
    ($($arg:ident . $index:tt),*) => {
        // SAFETY: one size and one pointer per element, in order.
        unsafe impl<$($arg: KernelArg),*> KernelArgs for ($($arg,)*) {
            const SIZES: &'static [usize] = &[$(size_of::<$arg>()),*];

            #[inline(always)]
            fn with_pointers<R>(&self, launch: impl FnOnce(*mut *mut c_void) -> R) -> R {
                let mut pointers = [$((&raw const self.$index).cast::<c_void>().cast_mut(),)* std::ptr::null_mut()];
                launch(pointers.as_mut_ptr())
            }
        }
    };
}

kernel_args!();
kernel_args!(A.0);
kernel_args!(A.0, B.1);
kernel_args!(A.0, B.1, C.2);
kernel_args!(A.0, B.1, C.2, D.3);
kernel_args!(A.0, B.1, C.2, D.3, E.4);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5, G.6);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8, J.9);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8, J.9, K.10);
kernel_args!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8, J.9, K.10, L.11);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_pointers_follow_the_tuple() {
        let args = (1u8, 2u16, 3u64, [4u32, 5u32], std::ptr::null::<f32>());
        assert_eq!(<(u8, u16, u64, [u32; 2], *const f32)>::SIZES, &[1, 2, 8, 8, 8]);
        args.with_pointers(|pointers| {
            // SAFETY: five pointers to the tuple's elements, then a null.
            let pointers = unsafe { std::slice::from_raw_parts(pointers, 6) };
            assert_eq!(pointers[0].cast_const(), (&raw const args.0).cast());
            assert_eq!(pointers[3].cast_const(), (&raw const args.3).cast());
            // SAFETY: points to `args.2`.
            assert_eq!(unsafe { *pointers[2].cast::<u64>() }, 3);
            assert!(pointers[5].is_null());
        });
        assert!(<()>::SIZES.is_empty());
        ().with_pointers(|pointers| {
            // SAFETY: one null.
            assert!(unsafe { *pointers }.is_null());
        });
    }
}
