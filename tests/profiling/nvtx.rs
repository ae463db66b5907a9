//! NVTX as NVIDIA's tools see it: a stand-in tool (`kernels/nvtx_recorder.c`, loaded through
//! `NVTX_INJECTION64_PATH` as Nsight Systems' injection is) records the ranges, marks and
//! names of a child process; without a tool nothing is loaded. Each case runs in a child
//! process: NVTX looks for its tool once per process.

use cuda_stream::profiling::{mark, range};
use cuda_stream::{Event, EventFlags, Stream, StreamOptions, StreamPool};
use cuda_stream_tests::child_test_prints_with;
use std::ffi::{c_char, c_void};

/// The stand-in tool, built by the build script: where `CUDA_STREAM_NVTX_RECORDER` says when
/// it is set (the GPU bundle carries it beside the binaries), else where the build put it.
fn recorder() -> String {
    std::env::var("CUDA_STREAM_NVTX_RECORDER").unwrap_or_else(|_| env!("CUDA_STREAM_NVTX_RECORDER").to_string())
}

/// What the stand-in tool recorded in this process, a line per call.
fn recorded() -> String {
    // SAFETY: the recorder, already loaded into this process by NVTX's lookup (loading it again
    // returns the same library); its `nvtx_recorder_log` copies at most `capacity` bytes.
    unsafe {
        let library = libloading::Library::new(recorder()).expect("the recorder loads");
        let log: libloading::Symbol<unsafe extern "C" fn(*mut c_char, usize) -> usize> =
            library.get(b"nvtx_recorder_log").expect("the recorder's log");
        let mut text = vec![0u8; 1 << 16];
        let length = log(text.as_mut_ptr().cast(), text.len());
        text.truncate(length);
        String::from_utf8_lossy(&text).into_owned()
    }
}

/// The shared libraries mapped into this process whose file names contain `word`.
fn mapped(word: &str) -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut found: Vec<String> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.contains(".so") && path.rsplit('/').next().is_some_and(|file| file.contains(word)))
        .map(String::from)
        .collect();
    found.dedup();
    found
}

/// Whether the tests skip: compute-sanitizer attaches an NVTX tool of its own
/// (`NVTX_INJECTION64_PATH` in every process it follows), so neither the stand-in tool nor
/// "no tool" can be arranged.
fn skipped_under_sanitizer(test: &str) -> bool {
    cuda_stream_tests::skipped_under_sanitizer(test, "the sanitizer is the process's NVTX tool")
}

#[test]
fn a_tool_sees_the_ranges_marks_and_names() {
    if skipped_under_sanitizer("a_tool_sees_the_ranges_marks_and_names") {
        return;
    }
    child_test_prints_with(
        "child_with_a_tool",
        &[("NVTX_INJECTION64_PATH", recorder())],
        &["the tool saw the ranges and marks"],
    );
}

#[test]
#[ignore = "run by a_tool_sees_the_ranges_marks_and_names in a child process"]
fn child_with_a_tool() {
    mark("start");
    {
        let _outer = range("outer");
        let _inner = range("inner \0 cut here");
    }
    mark("end");
    let log = recorded();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["attached", "mark start", "push outer", "push inner ", "pop", "pop", "mark end"],
        "what the tool recorded"
    );
    println!("the tool saw the ranges and marks");
    // Streams and events by name: on a GPU.
    let Some(device) = cuda_stream::testing::device_or_skip("child_with_a_tool (names)") else { return };
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let event = Event::new(device, EventFlags::default()).unwrap();
    stream.nvtx_name("copies");
    event.nvtx_name("copies done");
    let log = recorded();
    let named = |what: &str, handle: *mut c_void, name: &str| format!("{what} {handle:p} {name}");
    assert!(log.contains(&named("stream", stream.as_raw().cast(), "copies")), "{log}");
    assert!(log.contains(&named("event", event.as_raw().cast(), "copies done")), "{log}");
    // A pool named once: the stream it has, and the one it creates later.
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 2).unwrap();
    let first = pool.acquire().unwrap();
    pool.nvtx_name("decode");
    let second = pool.acquire().unwrap();
    let log = recorded();
    let slot_name =
        |raw: *mut c_void| ["decode 0", "decode 1"].into_iter().find(|name| log.contains(&named("stream", raw, name)));
    let names = (slot_name(first.as_raw().cast()), slot_name(second.as_raw().cast()));
    assert!(names.0.is_some() && names.1.is_some() && names.0 != names.1, "{names:?}: {log}");
    println!("the tool saw the stream's, the event's and the pool's names");
}

#[test]
fn without_a_tool_nothing_is_loaded() {
    if skipped_under_sanitizer("without_a_tool_nothing_is_loaded") {
        return;
    }
    // Not inherited from a run under a tool: an empty value names none.
    child_test_prints_with(
        "child_without_a_tool",
        &[("NVTX_INJECTION64_PATH", String::new())],
        &["no NVTX library loaded"],
    );
}

#[test]
#[ignore = "run by without_a_tool_nothing_is_loaded in a child process"]
fn child_without_a_tool() {
    assert!(std::env::var_os("NVTX_INJECTION64_PATH").is_none_or(|path| path.is_empty()), "run without a tool");
    mark("start");
    drop(range("a range"));
    let loaded: Vec<String> = ["nvToolsExt", "nvtx"].iter().flat_map(|word| mapped(word)).collect();
    // The stand-in tool is what this binary would load with one: it must be absent too.
    assert!(loaded.is_empty(), "NVTX libraries loaded without a tool: {loaded:?}");
    println!("no NVTX library loaded");
}
