//! A registered slice lives only inside its closure: the memory is unregistered and handed
//! back when it returns.
use cuda_stream::{RegisteredSlice, register_host};

fn main() {
    let mut data = vec![0u32; 16];
    let mut kept: Option<&mut RegisteredSlice<'_, u32>> = None;
    register_host(&mut data, |registered| kept = Some(registered)).unwrap();
    println!("{:?}", kept.map(|slice| slice.len()));
}
