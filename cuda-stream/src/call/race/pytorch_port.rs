//! A port of the event-handler cases of PyTorch's CUDA Sanitizer tests, class
//! `TestEventHandler` and, where they map, `TestMessages`, of
//! <https://github.com/pytorch/pytorch/blob/main/test/test_cuda_sanitizer.py> (the version
//! whose `assert_bad_kernel_launch` takes the number of errors, seen at commit 0908223d), to
//! the model alone (no CUDA). Written here from the Python tests' scenarios, not copied.
//!
//! The mapping: `kernel_launch(stream, read_only, read_write)` is one [`Step::Work`] on the
//! stream with a [`AccessKind::Read`] use per read-only tensor and a [`AccessKind::Write`] use
//! per read-write one (tensor `t` is 64 bytes at `0x1000 * (t + 1)`); `_handle_event_record`
//! and `_handle_event_wait` are [`Step::Record`] and [`Step::WaitEvent`]; the stream, event and
//! device synchronizations are [`Model::stream_synchronized`], [`Model::event_synchronized`] and
//! [`Model::device_synchronized`]; an event's deletion is [`Model::forget_event`]. PyTorch's
//! streams are non-blocking ones (no legacy-stream ordering) with distinct handles, and its
//! errors are the reports [`Model::check`] returns. Stream creation has no step here: a stream
//! is known from its first operation, and starts from the host's clock as PyTorch's new streams
//! do.
//!
//! Our model reports every unordered conflicting pair, where PyTorch checks a write against
//! the last write and the reads since it only; no case below reaches a pair PyTorch skips, so
//! every count is PyTorch's.
//!
//! Not ported:
//! * `TestArgumentHandler` (all of it): which tensors an ATen operator reads and writes, from
//!   its schema; our accesses are declared by the operations themselves.
//! * `test_deleted_record`'s subcase of a creation without a deletion: PyTorch takes a duplicate
//!   creation for a deletion its trace missed; the crate sees every destroy (each `Event`'s
//!   drop forgets its handle, borrowed ones too) and the model has no creation step, so there is
//!   nothing to repair.
//! * `TestMessages::test_ensure_does_not_exist`: log messages for duplicate event and stream
//!   creations, which have no step here (see above).
//! * The wording of `TestMessages`: our messages are our own; `ensure_exists` and
//!   `error_message` below check what they carry instead.

use super::model::{Model, Origin, Step, StreamClass, StreamKey, Use};
use super::tests::op;
use super::{AccessKind, RaceKind};
use std::sync::Arc;

/// PyTorch's `stream_id(i)`: a non-blocking stream of device 0 with handle `1000 + i`.
fn stream(i: usize) -> StreamKey {
    StreamKey { device: 0, handle: 1000 + i, thread: 0, class: StreamClass::NonBlocking }
}

/// PyTorch's `event_id(i)`.
fn event(i: usize) -> usize {
    2000 + i
}

/// PyTorch's `tensor_id(t)`: 64 bytes of its own.
fn tensor(t: usize, kind: AccessKind) -> Use {
    Use { address: 0x1000 * (t as u64 + 1), bytes: 64, kind }
}

/// PyTorch's `kernel_launch`: one kernel on stream `s` reading `read_only` and writing
/// `read_write`.
fn kernel_launch(model: &mut Model, s: usize, read_only: &[usize], read_write: &[usize]) -> Vec<RaceKind> {
    let reads = read_only.iter().map(|&t| tensor(t, AccessKind::Read));
    let writes = read_write.iter().map(|&t| tensor(t, AccessKind::Write));
    let uses: Vec<Use> = reads.chain(writes).collect();
    op(model, &stream(s), Step::Work, &uses)
}

fn assert_good_kernel_launch(model: &mut Model, s: usize, read_only: &[usize], read_write: &[usize]) {
    let races = kernel_launch(model, s, read_only, read_write);
    assert!(races.is_empty(), "stream {s}, reads {read_only:?}, writes {read_write:?}: {races:?}");
}

/// Asserts the launch makes `number_of_errors` races, and returns their kinds.
fn assert_bad_kernel_launch(
    model: &mut Model,
    number_of_errors: usize,
    s: usize,
    read_only: &[usize],
    read_write: &[usize],
) -> Vec<RaceKind> {
    let races = kernel_launch(model, s, read_only, read_write);
    assert_eq!(races.len(), number_of_errors, "stream {s}, reads {read_only:?}, writes {read_write:?}: {races:?}");
    races
}

fn record_event(model: &mut Model, e: usize, s: usize) {
    assert!(op(model, &stream(s), Step::Record(event(e)), &[]).is_empty());
}

fn wait_event(model: &mut Model, e: usize, s: usize) {
    assert!(op(model, &stream(s), Step::WaitEvent(event(e)), &[]).is_empty());
}

#[test]
fn empty_kernel_launch() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 0, &[], &[]);
}

#[test]
fn simple_passing() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[1], &[]);
    assert_good_kernel_launch(&mut m, 2, &[1], &[]);
}

#[test]
fn simple_error() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[1], &[]);
    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[], &[1]), [RaceKind::ReadWrite]);
}

#[test]
fn simple_sync() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[1], &[]);
    record_event(&mut m, 0, 1);
    wait_event(&mut m, 0, 2);
    assert_good_kernel_launch(&mut m, 2, &[], &[1]);
}

/// Not only the first read is checked against the last write: every read is.
#[test]
fn reads_check_last_write() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    record_event(&mut m, 0, 1);
    wait_event(&mut m, 0, 2);
    assert_good_kernel_launch(&mut m, 2, &[1], &[]);

    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 3, &[1], &[]), [RaceKind::WriteRead]);
}

/// Two streams may read after both waited for a third, but not write without more
/// synchronization.
#[test]
fn branch_sync() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    record_event(&mut m, 0, 1);
    wait_event(&mut m, 0, 2);
    wait_event(&mut m, 0, 3);
    assert_good_kernel_launch(&mut m, 2, &[1], &[]);
    assert_good_kernel_launch(&mut m, 3, &[1], &[]);

    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[], &[1]), [RaceKind::ReadWrite]);
}

#[test]
fn chain_sync() {
    let iterations = 10;
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 0, &[1], &[]);
    for i in 0..iterations {
        record_event(&mut m, i, i);
        wait_event(&mut m, i, i + 1);
    }
    assert_good_kernel_launch(&mut m, iterations, &[], &[1]);
}

/// A wait covers the work before the record, not the work after it.
#[test]
fn expired_record() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[1], &[]);
    record_event(&mut m, 0, 1);
    assert_good_kernel_launch(&mut m, 1, &[1], &[]);
    wait_event(&mut m, 0, 2);

    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[], &[1]), [RaceKind::ReadWrite]);
}

/// A deleted event's record is gone: a wait for the handle (deleted, or deleted and created
/// again) orders nothing. (PyTorch's third subcase, a creation without a deletion, is not
/// ported: see the module's documentation.)
#[test]
fn deleted_record() {
    // PyTorch's subcases with a deletion. A creation is no step here: an event is unknown to
    // the model until its first record.
    for subcase in ["deleted and created again", "deleted"] {
        let mut m = Model::default();
        assert_good_kernel_launch(&mut m, 1, &[1], &[]);
        record_event(&mut m, 0, 1);

        m.forget_event(event(0));

        wait_event(&mut m, 0, 2);
        assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[], &[1]), [RaceKind::ReadWrite], "{subcase}");
    }
}

#[test]
fn all_reads_checked_failing() {
    let iterations = 10;
    let mut m = Model::default();
    for i in 1..iterations {
        assert_good_kernel_launch(&mut m, i, &[1], &[]);
        record_event(&mut m, i, i);
    }
    for i in 1..iterations {
        wait_event(&mut m, i, 0);
    }

    assert_good_kernel_launch(&mut m, iterations, &[1], &[]);
    // As PyTorch's test does (its loop variable left at `iterations - 1`): the event is
    // recorded on another stream than the read's, and nobody waits for it anyway.
    record_event(&mut m, iterations, iterations - 1);

    // Does not synchronize with the last read.
    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 0, &[], &[1]), [RaceKind::ReadWrite]);
}

#[test]
fn all_reads_checked_passing() {
    let iterations = 10;
    let mut m = Model::default();
    for i in 1..iterations {
        assert_good_kernel_launch(&mut m, i, &[1], &[]);
        record_event(&mut m, i, i);
    }
    for i in 1..iterations {
        wait_event(&mut m, i, 0);
    }

    assert_good_kernel_launch(&mut m, 0, &[], &[1]);
}

#[test]
fn multiple_errors() {
    let iterations = 10;
    let tensors: Vec<usize> = (0..iterations).collect();
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 0, &[], &tensors);
    let races = assert_bad_kernel_launch(&mut m, iterations, 1, &[], &tensors);
    assert!(races.iter().all(|kind| *kind == RaceKind::WriteWrite), "{races:?}");
}

/// After a wait, a stream's clock is the pointwise maximum of its own and the recorded one.
#[test]
fn correct_state_merging() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    assert_good_kernel_launch(&mut m, 2, &[], &[2]);
    record_event(&mut m, 1, 1);
    record_event(&mut m, 2, 2);

    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    assert_good_kernel_launch(&mut m, 2, &[], &[2]);
    wait_event(&mut m, 1, 2);
    wait_event(&mut m, 2, 1);

    record_event(&mut m, 3, 2);
    wait_event(&mut m, 3, 1);
    assert_good_kernel_launch(&mut m, 1, &[], &[1, 2]);
}

/// A second record of an event replaces the first: a wait covers the second stream only.
#[test]
fn record_override() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[1], &[]);
    assert_good_kernel_launch(&mut m, 2, &[2], &[]);
    record_event(&mut m, 1, 1);
    record_event(&mut m, 1, 2);

    wait_event(&mut m, 1, 3);
    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 3, &[], &[1]), [RaceKind::ReadWrite]);
}

/// One event may be waited for many times, by different streams.
#[test]
fn multiple_wait() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    record_event(&mut m, 1, 1);
    wait_event(&mut m, 1, 2);
    wait_event(&mut m, 1, 3);

    assert_good_kernel_launch(&mut m, 2, &[1], &[]);
    assert_good_kernel_launch(&mut m, 3, &[1], &[]);
}

/// A device synchronize orders every stream's work before everything enqueued later.
#[test]
fn device_synchronize() {
    let iterations = 10;
    let mut m = Model::default();
    for i in 1..iterations {
        assert_good_kernel_launch(&mut m, i, &[], &[i]);
    }

    m.device_synchronized(0);
    let tensors: Vec<usize> = (1..iterations).collect();
    assert_good_kernel_launch(&mut m, 0, &[], &tensors);
}

/// A device synchronize orders the work before it only.
#[test]
fn device_synchronization_expired() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    m.device_synchronized(0);
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);

    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[], &[1]), [RaceKind::WriteWrite]);
}

/// A stream first used after a synchronize comes after what the host waited for.
#[test]
fn new_stream_is_synchronized() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    m.device_synchronized(0);
    // PyTorch's `_handle_stream_creation(stream_id(2))`: no step here; the stream is new at
    // its first operation.
    assert_good_kernel_launch(&mut m, 2, &[], &[1]);
}

/// A stream synchronize orders that stream's work before everything enqueued later, and
/// orders no other stream.
#[test]
fn stream_synchronize() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 0, &[], &[1]);
    assert_good_kernel_launch(&mut m, 1, &[], &[2]);
    m.stream_synchronized(&stream(0));

    assert_good_kernel_launch(&mut m, 2, &[1], &[]);
    assert_good_kernel_launch(&mut m, 3, &[1], &[]);
    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 4, &[2], &[]), [RaceKind::WriteRead]);
}

/// An event synchronize orders the work before the event's record, not the recording
/// stream's later work.
#[test]
fn event_synchronize() {
    let mut m = Model::default();
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    record_event(&mut m, 1, 1);
    assert_good_kernel_launch(&mut m, 1, &[], &[2]);

    m.event_synchronized(event(1));
    assert_good_kernel_launch(&mut m, 2, &[], &[1]);
    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[], &[2]), [RaceKind::WriteWrite]);
}

/// `TestMessages::test_ensure_exists`: PyTorch logs a deletion of an event (or a free of a
/// tensor) its trace never saw created, and backfills; ours has nothing to backfill: forgetting
/// an event, memory or stream never seen changes nothing.
#[test]
fn ensure_exists() {
    let mut m = Model::default();
    m.forget_event(0);
    m.forget_memory(0, 64);
    m.forget_stream(&stream(0));
    assert_good_kernel_launch(&mut m, 1, &[], &[1]);
    assert_eq!(assert_bad_kernel_launch(&mut m, 1, 2, &[1], &[]), [RaceKind::WriteRead]);
}

/// `TestMessages::test_error_message`: a write on stream 1001 after a read on stream 1000 of
/// the same allocated memory; the report names both accesses (the earlier first), their
/// operations and streams, the bytes, and the allocation.
#[test]
fn error_message() {
    let mut m = Model::default();
    let memory = tensor(1, AccessKind::Write);
    // The allocation is no access in PyTorch's test: it completed before (a device
    // synchronize), and the report still names it.
    m.allocated(&stream(5), memory, Arc::new(Origin::unseen("alloc")));
    m.device_synchronized(0);

    let read = Use { kind: AccessKind::Read, ..memory };
    let reader = Arc::new(Origin::unseen("schema"));
    let pending = m.check(&stream(0), Step::Work, &[read], &reader);
    assert!(pending.races.is_empty());
    m.commit(pending, &[read], reader);

    let writer = Arc::new(Origin::unseen("schema"));
    let races = m.check(&stream(1), Step::Work, &[memory], &writer).races;
    assert_eq!(races.len(), 1, "{races:?}");
    let race = &races[0];
    assert_eq!(race.kind, RaceKind::ReadWrite);
    assert_eq!((race.earlier.kind, race.earlier.stream.as_str()), (AccessKind::Read, "stream 0x3e8 (device 0)"));
    assert_eq!((race.later.kind, race.later.stream.as_str()), (AccessKind::Write, "stream 0x3e9 (device 0)"));
    assert_eq!((race.later.address, race.later.bytes), (0x2000, 64));
    let allocation = race.allocation.as_ref().expect("the allocation is named");
    assert_eq!((allocation.operation.as_str(), allocation.stream.as_str()), ("alloc", "stream 0x3ed (device 0)"));

    // `{:#}`: with the backtraces (plain `{}` leaves them out).
    let message = format!("{race:#}");
    assert!(!race.to_string().contains("enqueued at:"));
    for part in [
        "race (ReadWrite)",
        "earlier: Read by `schema` on stream 0x3e8 (device 0), 64 bytes at 0x2000",
        "later:   Write by `schema` on stream 0x3e9 (device 0), 64 bytes at 0x2000",
        "memory allocated by `alloc` on stream 0x3ed (device 0)",
        "earlier access enqueued at:",
        "later access enqueued at:",
        "allocated at:",
    ] {
        assert!(message.contains(part), "{part:?} missing from:\n{message}");
    }
}
