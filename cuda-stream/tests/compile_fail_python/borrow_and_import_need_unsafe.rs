// Borrowing a Python stream and importing a tensor trust the other library's promises
// (the stream lives with its object, the capsule describes valid memory): both are `unsafe`.
use cuda_stream::python::{PyStream, import};
use pyo3::prelude::*;

fn take(object: &Bound<'_, PyAny>, tensor: &Bound<'_, PyAny>) -> PyResult<usize> {
    let stream = PyStream::borrow(object)?;
    let buffer = import::<f32, _>(tensor, &stream)?;
    Ok(buffer.len())
}

fn main() {
    let _ = take;
}
