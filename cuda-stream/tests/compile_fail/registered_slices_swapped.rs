//! Two registrations' slices cannot be swapped: each would outlive its own registration.
use cuda_stream::register_host;

fn main() {
    let (mut outer, mut inner) = (vec![0u32; 16], vec![0u32; 16]);
    register_host(&mut outer, |a| {
        register_host(&mut inner, |b| std::mem::swap(a, b)).unwrap();
    })
    .unwrap();
}
