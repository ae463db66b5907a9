//! `cuda_stream_ext`: the PyO3 extension that tests/python/test_exchange.py drives. A small
//! Rust kernel library exposed to Python through cuda-stream's `python` feature: it takes the
//! caller's streams (`__cuda_stream__`) and tensors (DLPack), and hands back streams and
//! buffers, as a user's extension would.

use cuda_stream::python::{CudaStream, ExportedBuffer, PyStream, import, import_with_dlpack};
use cuda_stream::{
    Access, AsStream, BuiltinStream, Device, DeviceBuffer, LaunchConfig, RaceMode, Stream, StreamOptions, StreamRef,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;

cuda_stream::kernel! {
    /// Spins `spin_ns`, then writes `value` to `n` floats.
    static FILL = fn px_fill(p: *mut f32, n: u64, value: f32, spin_ns: u64);
    /// Spins `spin_ns`, then copies `n` floats.
    static COPY = fn px_copy(to: *mut f32, from: *const f32, n: u64, spin_ns: u64);
}

/// A grid for `n` elements; a kernel that spins gets 8 blocks (every thread spins, so a full
/// grid would hold every SM, and unordered work would wait for it anyway).
fn config(n: usize, spin_ns: u64) -> LaunchConfig<'static> {
    let blocks = if spin_ns > 0 { 8 } else { n.div_ceil(256).clamp(1, 1024) as u32 };
    LaunchConfig::new(blocks, 256)
}

/// The stream of any object with `__cuda_stream__`.
fn borrowed(object: &Bound<'_, PyAny>) -> PyResult<PyStream> {
    // SAFETY: the tests pass PyTorch's, CuPy's, cuda.core's and this module's streams, each
    // alive as long as its object, and capture none of them on another thread.
    unsafe { PyStream::borrow(object) }
}

/// A new non-blocking stream of `device`, owned by the returned object.
#[pyfunction]
fn new_stream(device: i32) -> PyResult<CudaStream> {
    let stream = Stream::new(Device::new(device)?, StreamOptions::non_blocking())?;
    // SAFETY: the tests capture it only through `torch.cuda.graph` on the thread that calls
    // this module, and end what they begin.
    Ok(unsafe { CudaStream::new(Arc::new(stream)) })
}

/// A built-in stream of `device`: "legacy", "per_thread" or "null" (handle 0, which means
/// one of the two by this build's mode).
#[pyfunction]
fn builtin_stream(kind: &str, device: i32) -> PyResult<CudaStream> {
    let device = Device::new(device)?;
    let stream = match kind {
        "legacy" => BuiltinStream::legacy(device),
        "per_thread" => BuiltinStream::per_thread(device),
        "null" => BuiltinStream::null(device),
        _ => return Err(PyValueError::new_err(format!("no built-in stream {kind:?}"))),
    };
    // SAFETY: as in `new_stream`.
    Ok(unsafe { CudaStream::new(stream) })
}

/// `(handle, device)` of the stream `object` lends, as this crate borrowed it.
#[pyfunction]
fn stream_handle(object: &Bound<'_, PyAny>) -> PyResult<(usize, i32)> {
    let stream = borrowed(object)?;
    let stream = stream.as_stream();
    Ok((stream.as_raw() as usize, stream.device().ordinal()))
}

/// Launches the slow fill, declared to the race detector.
///
/// # Safety
/// `n` floats at `p`, used on `stream` only, as the caller ordered them (`use_on`).
unsafe fn fill(stream: &StreamRef, p: *mut f32, n: usize, value: f32, spin_ns: u64) -> cuda_stream::Result<()> {
    stream.declare_accesses("px_fill", &[Access::write(p.cast_const(), n)])?;
    // SAFETY: the caller's contract.
    unsafe { FILL.launch(stream, &config(n, spin_ns), (p, n as u64, value, spin_ns)) }
}

/// Launches the slow copy, declared to the race detector.
///
/// # Safety
/// `n` floats at each address, used on `stream` only, as the caller ordered them.
unsafe fn copy(stream: &StreamRef, to: *mut f32, from: *const f32, n: usize, spin_ns: u64) -> cuda_stream::Result<()> {
    stream.declare_accesses("px_copy", &[Access::read(from, n), Access::write(to.cast_const(), n)])?;
    // SAFETY: the caller's contract.
    unsafe { COPY.launch(stream, &config(n, spin_ns), (to, from, n as u64, spin_ns)) }
}

/// A buffer of `n` floats (at least 2) allocated on `home` (one of this module's streams,
/// which the buffer keeps alive), whose first half a slow kernel on one new stream writes to
/// `first` and whose second half one on another new stream writes to `second`: two streams
/// with pending writes, exported.
#[pyfunction]
#[pyo3(signature = (home, n, first, second, spin_ns, array_interface = false))]
fn written_on_two_streams(
    home: &Bound<'_, CudaStream>,
    n: usize,
    first: f32,
    second: f32,
    spin_ns: u64,
    array_interface: bool,
) -> PyResult<ExportedBuffer> {
    if n < 2 {
        return Err(PyValueError::new_err("two halves need two elements"));
    }
    let home = home.get().shared();
    let device = home.as_stream().device();
    let mut buffer = DeviceBuffer::<f32, _>::zeroed(home, n)?;
    let (a, b) =
        (Stream::new(device, StreamOptions::non_blocking())?, Stream::new(device, StreamOptions::non_blocking())?);
    let mut chunks = buffer.chunks_mut(n.div_ceil(2))?;
    let (Some(mut low), Some(mut high)) = (chunks.next(), chunks.next()) else {
        return Err(PyValueError::new_err("two halves need two elements"));
    };
    let (low_len, high_len) = (low.len(), high.len());
    // SAFETY: each half's own elements, on the stream its `use_on` ordered.
    low.use_on(&a, |s, p| unsafe { fill(s, p, low_len, first, spin_ns) })??;
    // SAFETY: as above.
    high.use_on(&b, |s, p| unsafe { fill(s, p, high_len, second, spin_ns) })??;
    let exported = ExportedBuffer::new(buffer)?;
    Ok(if array_interface { exported.with_array_interface() } else { exported })
}

/// A buffer on `home` written in chunks of `chunk` floats, chunk `i` to `values[i]` by a kernel
/// on its own new stream after `spins_ns[i]`: exported as one view per chunk.
#[pyfunction]
fn written_in_chunks(
    home: &Bound<'_, CudaStream>,
    chunk: usize,
    values: Vec<f32>,
    spins_ns: Vec<u64>,
) -> PyResult<Vec<ExportedBuffer>> {
    if values.is_empty() || values.len() != spins_ns.len() {
        return Err(PyValueError::new_err("one value and one spin per chunk"));
    }
    let home = home.get().shared();
    let device = home.as_stream().device();
    let mut buffer = DeviceBuffer::<f32, _>::zeroed(home, chunk * values.len())?;
    for ((mut view, value), spin_ns) in buffer.chunks_mut(chunk)?.zip(values).zip(spins_ns) {
        let writer = Stream::new(device, StreamOptions::non_blocking())?;
        let len = view.len();
        // SAFETY: the chunk's own elements, on the stream its `use_on` ordered.
        view.use_on(&writer, |s, p| unsafe { fill(s, p, len, value, spin_ns) })??;
    }
    Ok(ExportedBuffer::chunks(buffer, chunk)?)
}

/// `n` floats allocated on `home` (one of this module's streams) and set to `value` there (a
/// copy in `home`'s order): what reuses a block freed on `home` too early.
#[pyfunction]
fn allocate_and_fill(home: &Bound<'_, CudaStream>, n: usize, value: f32) -> PyResult<ExportedBuffer> {
    Ok(ExportedBuffer::new(DeviceBuffer::from_slice(home.get().shared(), &vec![value; n])?)?)
}

/// `n` floats allocated on `home`, held by an executable's memset node, handed to Python:
/// refused (the graph's launches would race the consumer's work); the executable still
/// launches after the refusal dropped the buffer (its memory stays the executable's).
#[pyfunction]
fn export_held_by_graph(home: &Bound<'_, CudaStream>, n: usize) -> PyResult<ExportedBuffer> {
    let stream = home.get().shared();
    let buffer = DeviceBuffer::<f32, _>::zeroed(Arc::clone(&stream), n)?;
    let mut graph = cuda_stream::Graph::new(stream.as_stream().device())?;
    graph.builder().add_fill_bytes(&buffer, .., 0x3f, &[])?;
    let exec = graph.instantiate()?;
    let exported = ExportedBuffer::new(buffer);
    exec.launch(&*stream.as_stream())?;
    stream.as_stream().synchronize()?;
    Ok(exported?)
}

/// `(min, max)` of `values`.
fn min_max(values: &[f32]) -> (f32, f32) {
    values.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// Imports `tensor` on the stream `stream` lends (`via` "auto": the C exchange API where the
/// producer offers it; "dlpack": `__dlpack__`), copies it there with our kernel (after
/// `spin_ns`), and returns `(min, max)` of the copy.
#[pyfunction]
#[pyo3(signature = (tensor, stream, spin_ns, via = "auto"))]
fn import_min_max(
    tensor: &Bound<'_, PyAny>,
    stream: &Bound<'_, PyAny>,
    spin_ns: u64,
    via: &str,
) -> PyResult<(f32, f32)> {
    let stream = borrowed(stream)?;
    // SAFETY: the tests pass PyTorch and CuPy tensors.
    let imported = match via {
        "auto" => unsafe { import::<f32, _>(tensor, &stream) }?,
        "dlpack" => unsafe { import_with_dlpack::<f32, _>(tensor, &stream) }?,
        _ => return Err(PyValueError::new_err(format!("no import via {via:?}"))),
    };
    let n = imported.len();
    let mut out = DeviceBuffer::<f32, _>::new(&stream, n)?;
    let to = out.as_mut_ptr();
    // SAFETY: the import's elements, read on the stream `use_on` ordered; `out`'s on its home.
    imported.slice(..)?.use_on(&stream, |s, from| unsafe { copy(s, to, from, n, spin_ns) })??;
    Ok(min_max(&out.to_vec()?))
}

/// The naive import, a control and not a model: the tensor's address (`data_ptr`) read at
/// once on `stream` with our kernel, ordered with nothing: `(min, max)` of what it read. An
/// address that is not `n` floats of device memory faults the context: the tests pass a live
/// tensor's.
#[pyfunction]
fn naive_min_max(address: usize, n: usize, stream: &Bound<'_, PyAny>) -> PyResult<(f32, f32)> {
    let stream = borrowed(stream)?;
    let mut out = DeviceBuffer::<f32, _>::new(&stream, n)?;
    let to = out.as_mut_ptr();
    // SAFETY: deliberately unordered with the producer's work (the control of the ordered
    // import): `n` floats of a live tensor the test keeps, read on `stream`; `out`'s on its home.
    unsafe { copy(&stream.as_stream(), to, address as *const f32, n, 0) }?;
    Ok(min_max(&out.to_vec()?))
}

/// Imports `tensor` on `stream`, copies it with a slow kernel on another stream of ours, and
/// drops the import (the tensor goes back to its exporter once the copy has read it): the
/// copy, exported.
#[pyfunction]
fn import_slow_copy(tensor: &Bound<'_, PyAny>, stream: &Bound<'_, PyAny>, spin_ns: u64) -> PyResult<ExportedBuffer> {
    let stream = borrowed(stream)?;
    // SAFETY: the tests pass PyTorch and CuPy tensors.
    let imported = unsafe { import::<f32, _>(tensor, &stream) }?;
    let n = imported.len();
    let other = Arc::new(Stream::new(imported.device(), StreamOptions::non_blocking())?);
    let mut out = DeviceBuffer::<f32, _>::new(Arc::clone(&other), n)?;
    let to = out.as_mut_ptr();
    // SAFETY: the import's elements, read on `other` as `use_on` ordered; `out`'s on its home.
    imported.slice(..)?.use_on(&*other, |s, from| unsafe { copy(s, to, from, n, spin_ns) })??;
    drop(imported);
    Ok(ExportedBuffer::new(out)?)
}

/// Imports `tensor` on `stream` (`via` as for `import_min_max`) and drops it again: the number
/// of elements.
#[pyfunction]
#[pyo3(signature = (tensor, stream, via = "auto"))]
fn import_len(tensor: &Bound<'_, PyAny>, stream: &Bound<'_, PyAny>, via: &str) -> PyResult<usize> {
    let stream = borrowed(stream)?;
    // SAFETY: the tests pass PyTorch and CuPy tensors.
    let imported = match via {
        "auto" => unsafe { import::<f32, _>(tensor, &stream) }?,
        "dlpack" => unsafe { import_with_dlpack::<f32, _>(tensor, &stream) }?,
        _ => return Err(PyValueError::new_err(format!("no import via {via:?}"))),
    };
    Ok(imported.len())
}

/// Imports a float64 `tensor` on `stream`: the number of elements.
#[pyfunction]
fn import_len_f64(tensor: &Bound<'_, PyAny>, stream: &Bound<'_, PyAny>) -> PyResult<usize> {
    let stream = borrowed(stream)?;
    // SAFETY: as above.
    let imported = unsafe { import::<f64, _>(tensor, &stream) }?;
    Ok(imported.len())
}

/// Turns the race detector off.
#[pyfunction]
fn race_off() {
    cuda_stream::set_race_mode(RaceMode::Off);
}

/// Puts the race detector in `Report` mode (and drops the reports so far).
#[pyfunction]
fn race_report_mode() {
    cuda_stream::set_race_mode(RaceMode::Report);
    cuda_stream::race::take_race_reports();
}

/// The race reports since the last call, as text.
#[pyfunction]
fn race_reports() -> Vec<String> {
    cuda_stream::race::take_race_reports().iter().map(ToString::to_string).collect()
}

/// Declares a write of `n` floats at `address` on a new stream of `device`, ordered with
/// nothing: the control the detector must report.
#[pyfunction]
fn declare_unordered_write(address: usize, n: usize, device: i32) -> PyResult<()> {
    let stream = Stream::new(Device::new(device)?, StreamOptions::non_blocking())?;
    stream.declare_accesses(
        "unordered write",
        &[Access::bytes(address as u64, (n * 4) as u64, cuda_stream::race::AccessKind::Write)],
    )?;
    Ok(())
}

/// Imports `tensor` on `stream`, reads it on another stream of ours through the buffer
/// (ordered), then declares an unordered write on a third: the reports of each part.
#[pyfunction]
fn import_race_probe(tensor: &Bound<'_, PyAny>, stream: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, Vec<String>)> {
    let stream = borrowed(stream)?;
    // SAFETY: the tests pass PyTorch and CuPy tensors.
    let imported = unsafe { import::<f32, _>(tensor, &stream) }?;
    let n = imported.len();
    let other = Stream::new(imported.device(), StreamOptions::non_blocking())?;
    let mut out = DeviceBuffer::<f32, _>::new(&other, n)?;
    let to = out.as_mut_ptr();
    // SAFETY: as above.
    imported.slice(..)?.use_on(&other, |s, from| unsafe { copy(s, to, from, n, 0) })??;
    let ordered = race_reports();
    // Before any wait: nothing orders this write after the import or the read.
    declare_unordered_write(imported.as_ptr() as usize, n, imported.device().ordinal())?;
    let control = race_reports();
    other.synchronize()?;
    Ok((ordered, control))
}

#[pymodule]
fn cuda_stream_ext(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<CudaStream>()?;
    module.add_class::<ExportedBuffer>()?;
    module.add("PER_THREAD", cuda_stream::NULL_STREAM_IS_PER_THREAD)?;
    module.add_function(wrap_pyfunction!(new_stream, module)?)?;
    module.add_function(wrap_pyfunction!(builtin_stream, module)?)?;
    module.add_function(wrap_pyfunction!(stream_handle, module)?)?;
    module.add_function(wrap_pyfunction!(written_on_two_streams, module)?)?;
    module.add_function(wrap_pyfunction!(allocate_and_fill, module)?)?;
    module.add_function(wrap_pyfunction!(export_held_by_graph, module)?)?;
    module.add_function(wrap_pyfunction!(written_in_chunks, module)?)?;
    module.add_function(wrap_pyfunction!(import_min_max, module)?)?;
    module.add_function(wrap_pyfunction!(naive_min_max, module)?)?;
    module.add_function(wrap_pyfunction!(import_slow_copy, module)?)?;
    module.add_function(wrap_pyfunction!(import_len, module)?)?;
    module.add_function(wrap_pyfunction!(import_len_f64, module)?)?;
    module.add_function(wrap_pyfunction!(race_off, module)?)?;
    module.add_function(wrap_pyfunction!(race_report_mode, module)?)?;
    module.add_function(wrap_pyfunction!(race_reports, module)?)?;
    module.add_function(wrap_pyfunction!(declare_unordered_write, module)?)?;
    module.add_function(wrap_pyfunction!(import_race_probe, module)?)?;
    Ok(())
}
