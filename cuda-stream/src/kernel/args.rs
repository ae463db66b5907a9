//! A launch's arguments: a tuple of values that CUDA copies into the kernel's parameters, or
//! buffers and views that stand for their device addresses and whose uses the launch orders.

use crate::ffi::error::Result;
use crate::memory::{ArgUse, DeviceBuffer, DeviceCopy, DeviceSlice, DeviceSliceMut};
use crate::stream::AsStream;
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

/// What a launch passes for a kernel parameter of type `P`: the value itself, or memory that
/// stands for its device address and whose use the launch orders (see
/// [`Kernel::launch`](crate::Kernel::launch)):
///
/// | argument | parameter | the launch's use |
/// |---|---|---|
/// | a value of the parameter's type (numbers, `#[repr(C)]` structs, raw pointers) | the same | none (raw pointers are yours to order) |
/// | `&DeviceSlice<T, _>`, `&DeviceSliceMut<T, _>`, `&DeviceBuffer<T, _>` | `*const T` (`const T*`) | a read of the view's or buffer's elements |
/// | `&mut DeviceSliceMut<T, _>`, `&mut DeviceBuffer<T, _>` | `*mut T` (`T*`) | a write of them |
///
/// Sealed: the crate's types only.
pub trait LaunchArg<P: KernelArg>: sealed::Sealed<P> {
    /// The parameter's value (for the launch only: a buffer's address taken here is not
    /// marked as handed out).
    #[doc(hidden)]
    fn param(&self, token: sealed::Token) -> P;

    /// Whether the argument is memory whose use the launch orders.
    #[doc(hidden)]
    const TRACKED: bool = false;

    /// The memory it touches, if it is a buffer or a view.
    #[doc(hidden)]
    fn arg_use(&self, _token: sealed::Token) -> Result<Option<ArgUse<'_>>> {
        Ok(None)
    }
}

pub(crate) mod sealed {
    pub trait Sealed<P> {}

    /// What the argument traits' methods take: only the launch makes one, so their untracked
    /// addresses stay inside it.
    #[derive(Debug, Clone, Copy)]
    pub struct Token(pub(in crate::kernel) ());
}

impl<P: KernelArg> sealed::Sealed<P> for P {}
impl<P: KernelArg> LaunchArg<P> for P {
    #[inline(always)]
    fn param(&self, _: sealed::Token) -> P {
        *self
    }
}

/// Memory whose use a launch argument makes: the address it stands for and the use.
macro_rules! memory_arg {
    ($([$($generics:tt)*] $arg:ty => $param:ty, |$this:ident| $address:expr, $arg_use:expr;)*) => {$(
        impl<$($generics)*> sealed::Sealed<$param> for $arg {}
        impl<$($generics)*> LaunchArg<$param> for $arg {
            const TRACKED: bool = true;

            #[inline]
            fn param(&self, _: sealed::Token) -> $param {
                let $this = self;
                $address
            }

            fn arg_use(&self, _: sealed::Token) -> Result<Option<ArgUse<'_>>> {
                let $this = self;
                $arg_use.map(Some)
            }
        }
    )*};
}

memory_arg! {
    ['a, T: DeviceCopy, S: AsStream] &DeviceSlice<'a, T, S> => *const T, |this| this.as_ptr_untracked(), this.launch_use();
    ['a, T: DeviceCopy, S: AsStream] &DeviceSliceMut<'a, T, S> => *const T, |this| this.as_ptr_untracked(), this.launch_use();
    ['a, T: DeviceCopy, S: AsStream] &mut DeviceSliceMut<'a, T, S> => *mut T, |this| this.as_ptr_untracked().cast_mut(), this.launch_use_mut();
    [T: DeviceCopy, S: AsStream] &DeviceBuffer<T, S> => *const T, |this| this.as_ptr_untracked(), this.launch_use(false);
    [T: DeviceCopy, S: AsStream] &mut DeviceBuffer<T, S> => *mut T, |this| this.as_ptr_untracked().cast_mut(), this.launch_use(true);
}

/// A launch's arguments for a kernel whose parameters are `A`: a tuple of [`LaunchArg`]s, one
/// per parameter.
pub trait LaunchArgs<A: KernelArgs>: sealed::Sealed<A> {
    /// Whether some argument is memory whose use the launch orders.
    #[doc(hidden)]
    const TRACKED: bool;

    /// The parameters' values.
    #[doc(hidden)]
    fn params(&self, token: sealed::Token) -> A;

    /// The memory the arguments touch.
    #[doc(hidden)]
    fn arg_uses(&self, token: sealed::Token) -> Result<Vec<ArgUse<'_>>>;
}

macro_rules! launch_args {
    ($($param:ident $arg:ident . $index:tt),*) => {
        impl<$($param: KernelArg, $arg: LaunchArg<$param>),*> sealed::Sealed<($($param,)*)> for ($($arg,)*) {}
        impl<$($param: KernelArg, $arg: LaunchArg<$param>),*> LaunchArgs<($($param,)*)> for ($($arg,)*) {
            const TRACKED: bool = false $(|| $arg::TRACKED)*;

            #[inline(always)]
            #[allow(clippy::unused_unit)]
            fn params(&self, _token: sealed::Token) -> ($($param,)*) {
                ($(self.$index.param(_token),)*)
            }

            #[allow(unused_mut)]
            fn arg_uses(&self, _token: sealed::Token) -> Result<Vec<ArgUse<'_>>> {
                let mut uses = Vec::new();
                $(uses.extend(self.$index.arg_use(_token)?);)*
                Ok(uses)
            }
        }
    };
}

launch_args!();
launch_args!(PA A.0);
launch_args!(PA A.0, PB B.1);
launch_args!(PA A.0, PB B.1, PC C.2);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5, PG G.6);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5, PG G.6, PH H.7);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5, PG G.6, PH H.7, PI I.8);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5, PG G.6, PH H.7, PI I.8, PJ J.9);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5, PG G.6, PH H.7, PI I.8, PJ J.9, PK K.10);
launch_args!(PA A.0, PB B.1, PC C.2, PD D.3, PE E.4, PF F.5, PG G.6, PH H.7, PI I.8, PJ J.9, PK K.10, PL L.11);

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
