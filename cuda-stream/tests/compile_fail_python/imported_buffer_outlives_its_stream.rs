// A tensor imported on a borrowed Python stream is a buffer whose home is that borrow: it
// cannot outlive the `PyStream` (which keeps the Python stream alive).
use cuda_stream::python::{PyStream, import};
use pyo3::prelude::*;

fn keep(object: &Bound<'_, PyAny>, tensor: &Bound<'_, PyAny>) -> PyResult<()> {
    let buffer;
    {
        let stream = unsafe { PyStream::borrow(object) }?;
        buffer = unsafe { import::<f32, _>(tensor, &stream) }?;
    }
    drop(buffer);
    Ok(())
}

fn main() {
    let _ = keep;
}
