//! The model alone (no CUDA): each ordering rule, each race class, and what is forgotten.

use super::model::{Model, Origin, Step, StreamClass, StreamKey, Use};
use super::{AccessKind, RaceKind};
use std::sync::Arc;

fn stream(handle: usize, class: StreamClass) -> StreamKey {
    StreamKey { device: 0, handle, thread: 0, class }
}

fn buffer(kind: AccessKind) -> Use {
    Use { address: 0x1000, bytes: 256, kind }
}

/// Enqueues `step` with `uses` on `key` and returns the kinds of the races it made (also
/// the PyTorch port's).
pub(super) fn op(model: &mut Model, key: &StreamKey, step: Step, uses: &[Use]) -> Vec<RaceKind> {
    let origin = Arc::new(Origin::unseen("op"));
    let mut pending = model.check(key, step, uses, &origin);
    let races = std::mem::take(&mut pending.races);
    model.commit(pending, uses, origin);
    races.iter().map(|race| race.kind).collect()
}

const A: usize = 0xa;
const B: usize = 0xb;

#[test]
fn unordered_accesses_on_two_streams_race_and_an_event_orders_them() {
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    assert!(op(&mut m, &a, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
    assert_eq!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Read)]), [RaceKind::WriteRead]);
    assert_eq!(op(&mut m, &a, Step::Work, &[buffer(AccessKind::Write)]), [RaceKind::ReadWrite]);
    // Ordered: a records after its writes, b waits.
    op(&mut m, &a, Step::Record(1), &[]);
    op(&mut m, &b, Step::WaitEvent(1), &[]);
    assert!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
    // Reads on two streams never race each other.
    assert!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Read)]).is_empty());
}

#[test]
fn a_record_covers_the_work_before_it_only() {
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &a, Step::Record(1), &[]);
    op(&mut m, &a, Step::Work, &[buffer(AccessKind::Write)]);
    op(&mut m, &b, Step::WaitEvent(1), &[]);
    assert_eq!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Write)]), [RaceKind::WriteWrite]);
    // A wait on an event never recorded orders nothing.
    op(&mut m, &b, Step::WaitEvent(7), &[]);
    assert_eq!(op(&mut m, &a, Step::Work, &[buffer(AccessKind::Read)]), [RaceKind::WriteRead]);
}

#[test]
fn the_legacy_stream_orders_blocking_streams_and_not_non_blocking_ones() {
    let legacy = stream(1, StreamClass::Legacy);
    let (blocking, free) = (stream(A, StreamClass::Blocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &blocking, Step::Work, &[buffer(AccessKind::Write)]);
    assert!(op(&mut m, &legacy, Step::Work, &[buffer(AccessKind::Write)]).is_empty(), "legacy waits for blocking work");
    assert!(
        op(&mut m, &blocking, Step::Work, &[buffer(AccessKind::Read)]).is_empty(),
        "blocking waits for legacy work"
    );
    let races = op(&mut m, &free, Step::Work, &[buffer(AccessKind::Write)]);
    assert_eq!(races.len(), 3, "the non-blocking stream follows none of the three: {races:?}");
    assert_eq!(races.iter().filter(|kind| **kind == RaceKind::ReadWrite).count(), 1);
    // A record is no work: the legacy rule orders against the blocking stream's last work.
    let mut m = Model::default();
    op(&mut m, &blocking, Step::Work, &[]);
    op(&mut m, &blocking, Step::Record(3), &[buffer(AccessKind::Write)]);
    assert_eq!(op(&mut m, &legacy, Step::Work, &[buffer(AccessKind::Read)]), [RaceKind::WriteRead]);
}

#[test]
fn synchronizes_order_everything_after_them_and_prune_the_history() {
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &a, Step::Work, &[buffer(AccessKind::Write)]);
    m.stream_synchronized(&a);
    assert!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
    op(&mut m, &b, Step::Record(2), &[]);
    m.event_synchronized(2);
    assert!(op(&mut m, &a, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
    m.device_synchronized(0);
    assert!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
}

#[test]
fn a_free_races_uses_it_does_not_follow_and_ends_the_history() {
    let (home, other) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &other, Step::Work, &[buffer(AccessKind::Read)]);
    assert_eq!(op(&mut m, &home, Step::Work, &[buffer(AccessKind::Free)]), [RaceKind::FreeInUse]);
    assert!(op(&mut m, &other, Step::Work, &[buffer(AccessKind::Write)]).is_empty(), "a new history");
}

#[test]
fn a_host_access_races_device_accesses_the_host_has_not_waited_for() {
    let a = stream(A, StreamClass::NonBlocking);
    let pinned = Use { address: 0x5000, bytes: 64, kind: AccessKind::Write };
    let mut m = Model::default();
    op(&mut m, &a, Step::Work, &[pinned]);
    let origin = Arc::new(Origin::unseen("host"));
    let read = Use { kind: AccessKind::Read, ..pinned };
    let races = m.host_check(&[read], &origin);
    assert_eq!(races.iter().map(|r| r.kind).collect::<Vec<_>>(), [RaceKind::HostInFlight]);
    assert!(races[0].missing_edge.contains("the host must wait"), "{}", races[0].missing_edge);
    m.stream_synchronized(&a);
    assert!(m.host_check(&[read], &origin).is_empty());
    m.host_commit(&[Use { kind: AccessKind::Write, ..pinned }], origin);
    // Work enqueued after a host access comes after it.
    assert!(op(&mut m, &a, Step::Work, &[read]).is_empty());
}

#[test]
fn only_overlapping_bytes_conflict_and_reports_name_both_sides() {
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let first = Use { address: 0x1000, bytes: 128, kind: AccessKind::Write };
    let second = Use { address: 0x1080, ..first };
    let mut m = Model::default();
    op(&mut m, &a, Step::Work, &[first]);
    assert!(op(&mut m, &b, Step::Work, &[second]).is_empty(), "disjoint halves");
    let origin = Arc::new(Origin::unseen("reader"));
    let whole = Use { bytes: 256, kind: AccessKind::Read, ..first };
    let races = m.check(&b, Step::Work, &[whole], &origin).races;
    assert_eq!(races.len(), 1);
    assert_eq!((races[0].earlier.operation.as_str(), races[0].later.operation.as_str()), ("op", "reader"));
    assert!(races[0].earlier.stream.contains("0xa") && races[0].later.stream.contains("0xb"));
    assert!(races[0].missing_edge.contains("wait_stream"), "{}", races[0].missing_edge);
}

#[test]
fn a_forgotten_stream_handle_is_a_new_stream() {
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &b, Step::Work, &[buffer(AccessKind::Write)]);
    op(&mut m, &b, Step::Record(1), &[]);
    op(&mut m, &a, Step::WaitEvent(1), &[]);
    m.forget_stream(&a);
    m.forget_event(1);
    // The new stream under `a`'s handle never waited; the new event under 1 was never recorded.
    op(&mut m, &a, Step::WaitEvent(1), &[]);
    assert_eq!(op(&mut m, &a, Step::Work, &[buffer(AccessKind::Read)]), [RaceKind::WriteRead]);
}

#[test]
fn an_operation_recorded_between_a_check_and_its_record_is_checked_at_the_record() {
    // Two threads: each checks a write of the same buffer on its stream before either records.
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    let origin = Arc::new(Origin::unseen("op"));
    let write = [buffer(AccessKind::Write)];
    let first = m.check(&a, Step::Work, &write, &origin);
    let second = m.check(&b, Step::Work, &write, &origin);
    assert!(first.races.is_empty() && second.races.is_empty(), "neither saw the other");
    assert!(m.commit(first, &write, origin.clone()).is_empty());
    let late = m.commit(second, &write, origin.clone());
    assert_eq!(late.iter().map(|race| race.kind).collect::<Vec<_>>(), [RaceKind::WriteWrite]);
    // A wait recorded between a check and its record counts at the record: no false race.
    op(&mut m, &a, Step::Record(9), &[]);
    let pending = m.check(&b, Step::Work, &[buffer(AccessKind::Read)], &origin);
    op(&mut m, &b, Step::WaitEvent(9), &[]);
    assert!(m.commit(pending, &[buffer(AccessKind::Read)], origin).is_empty());
}

#[test]
fn an_operation_checked_against_an_older_model_is_not_recorded_in_a_newer_one() {
    let a = stream(A, StreamClass::NonBlocking);
    let (mut old, mut new) = (Model::default(), Model::default());
    let origin = Arc::new(Origin::unseen("op"));
    let pending = old.check(&a, Step::Work, &[buffer(AccessKind::Write)], &origin);
    assert!(new.commit(pending, &[buffer(AccessKind::Write)], origin).is_empty());
    let b = stream(B, StreamClass::NonBlocking);
    assert!(op(&mut new, &b, Step::Work, &[buffer(AccessKind::Write)]).is_empty(), "nothing was recorded");
}

#[test]
fn one_stream_is_one_stream_whatever_class_a_wrapper_knew() {
    let (owned, borrowed) = (stream(A, StreamClass::Blocking), stream(A, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &owned, Step::Work, &[buffer(AccessKind::Write)]);
    assert!(op(&mut m, &borrowed, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
}

#[test]
fn a_device_synchronize_covers_the_work_of_destroyed_streams() {
    let (gone, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &gone, Step::Work, &[buffer(AccessKind::Write)]);
    m.forget_stream(&gone);
    m.device_synchronized(0);
    assert!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Write)]).is_empty());
}

#[test]
fn a_synchronize_covers_what_was_enqueued_before_it_only() {
    let (a, b) = (stream(A, StreamClass::NonBlocking), stream(B, StreamClass::NonBlocking));
    let mut m = Model::default();
    op(&mut m, &a, Step::Work, &[]);
    let before = m.stream_clock(&a);
    // Another thread enqueues a write on `a` while this one waits.
    op(&mut m, &a, Step::Work, &[buffer(AccessKind::Write)]);
    m.host_saw(&before);
    assert_eq!(op(&mut m, &b, Step::Work, &[buffer(AccessKind::Read)]), [RaceKind::WriteRead]);
}

#[test]
fn empty_accesses_are_nothing_and_a_spanning_access_is_in_every_history_it_meets() {
    let (a, b, c) = (
        stream(A, StreamClass::NonBlocking),
        stream(B, StreamClass::NonBlocking),
        stream(0xc, StreamClass::NonBlocking),
    );
    let at = |address: u64, bytes: u64, kind| Use { address, bytes, kind };
    let mut m = Model::default();
    op(&mut m, &a, Step::Work, &[at(0x1000, 100, AccessKind::Write)]);
    assert!(op(&mut m, &b, Step::Work, &[at(0x1000, 0, AccessKind::Write)]).is_empty(), "zero bytes");
    assert_eq!(op(&mut m, &b, Step::Work, &[at(0x1000, 1, AccessKind::Read)]), [RaceKind::WriteRead], "history kept");
    // [0x1000, 0x10c8) spans the first history and new bytes; its tail is met later.
    op(&mut m, &b, Step::Work, &[at(0x1000, 200, AccessKind::Write)]);
    let races = op(&mut m, &c, Step::Work, &[at(0x1096, 10, AccessKind::Read)]);
    assert_eq!(races, [RaceKind::WriteRead], "the spanning write, once");
}

/// Serializes the tests that open scopes of the process's detector: one of them needs the
/// detector off everywhere.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn an_off_scope_decides_on_its_thread() {
    let _serial = serial();
    let _report = super::race_scope(super::RaceMode::Report);
    assert_eq!(super::this_threads_mode(), super::RaceMode::Report);
    {
        let _off = super::race_scope(super::RaceMode::Off);
        assert_eq!(super::this_threads_mode(), super::RaceMode::Off);
    }
    assert_eq!(super::this_threads_mode(), super::RaceMode::Report);
}

/// Streams of one test's own: the detector's model is the process's.
fn own_stream(test: usize, handle: usize) -> StreamKey {
    StreamKey { device: 0, handle: 0xc011_0000 + test * 0x100 + handle, thread: 0, class: StreamClass::NonBlocking }
}

/// 256 bytes at `offset` of one test's own memory.
fn own_memory(test: u64, offset: u64, kind: AccessKind) -> Use {
    Use { address: 0x7c11_0000_0000 + test * 0x10_0000 + offset, bytes: 256, kind }
}

/// Checks operation `operation` with `uses` on `key` through the process's detector, records
/// it, and returns the kinds of the races it reported (this thread's scope must be `Report`).
fn declared(scope: &super::RaceScope, key: &StreamKey, uses: Vec<Use>) -> Vec<RaceKind> {
    super::check(key.clone(), Step::Work, uses, "op".into()).unwrap().enqueued();
    scope.take_reports().iter().map(|race| race.kind).collect()
}

#[test]
fn a_collective_orders_each_rank_after_the_earlier_work_of_the_ranks_it_receives_from() {
    use super::CollectiveOrder::{AllToAll, FromFirstRank, IntoFirstRank};
    let _serial = serial();
    let scope = super::race_scope(super::RaceMode::Report);
    for (test, order) in [(1, AllToAll), (2, FromFirstRank), (3, IntoFirstRank)] {
        let (a, b, c) = (own_stream(test, 1), own_stream(test, 2), own_stream(test, 3));
        let at = |offset: u64, kind: AccessKind| own_memory(test as u64, offset, kind);
        let (x, y) = (0, 0x100);
        // Before the collective, rank a writes X and rank b writes Y.
        assert!(declared(&scope, &a, vec![at(x, AccessKind::Write)]).is_empty());
        assert!(declared(&scope, &b, vec![at(y, AccessKind::Write)]).is_empty());
        // Rank a (the first) reads 0x200 and writes 0x300; rank b reads 0x400, writes 0x500.
        let ranks = vec![
            (a.clone(), vec![at(0x200, AccessKind::Read), at(0x300, AccessKind::Write)]),
            (b.clone(), vec![at(0x400, AccessKind::Read), at(0x500, AccessKind::Write)]),
        ];
        super::check_collective(ranks, order, "collective").unwrap().enqueued();
        assert!(scope.take_reports().is_empty());
        // Rank b reads X: ordered when b receives from a.
        let b_reads_x = declared(&scope, &b, vec![at(x, AccessKind::Read)]);
        assert_eq!(b_reads_x.is_empty(), order != IntoFirstRank, "{order:?}: {b_reads_x:?}");
        // Rank a reads Y: ordered when a receives from b.
        let a_reads_y = declared(&scope, &a, vec![at(y, AccessKind::Read)]);
        assert_eq!(a_reads_y.is_empty(), order != FromFirstRank, "{order:?}: {a_reads_y:?}");
        // Never after the other rank's own part of the collective.
        assert_eq!(declared(&scope, &b, vec![at(0x300, AccessKind::Read)]), [RaceKind::WriteRead], "{order:?}");
        // A stream outside the collective is ordered by nothing.
        assert!(declared(&scope, &c, vec![at(x, AccessKind::Write)]).contains(&RaceKind::WriteWrite), "{order:?}");
    }
}

#[test]
fn a_collective_that_was_not_enqueued_or_moves_no_bytes_orders_nothing() {
    let _serial = serial();
    let scope = super::race_scope(super::RaceMode::Report);
    let (a, b) = (own_stream(4, 1), own_stream(4, 2));
    let at = |offset: u64, kind: AccessKind| own_memory(4, offset, kind);
    assert!(declared(&scope, &a, vec![at(0, AccessKind::Write)]).is_empty());
    // Checked, never enqueued (the library refused it): nothing recorded.
    let ranks = vec![(a.clone(), vec![at(0x200, AccessKind::Write)]), (b.clone(), vec![at(0x400, AccessKind::Write)])];
    drop(super::check_collective(ranks, super::CollectiveOrder::AllToAll, "refused").unwrap());
    assert!(declared(&scope, &b, vec![at(0x200, AccessKind::Write)]).is_empty(), "a's part was never recorded");
    // Zero elements: enqueued, but NCCL enqueues nothing, so no rendezvous.
    let empty = |key: &StreamKey| (key.clone(), vec![Use { bytes: 0, ..at(0x600, AccessKind::Write) }]);
    super::check_collective(vec![empty(&a), empty(&b)], super::CollectiveOrder::AllToAll, "empty").unwrap().enqueued();
    assert_eq!(declared(&scope, &b, vec![at(0, AccessKind::Read)]), [RaceKind::WriteRead], "not ordered by it");
}

#[test]
fn under_fail_a_collective_with_a_racing_rank_is_refused_whole() {
    let _serial = serial();
    let _fail = super::race_scope(super::RaceMode::Fail);
    let (producer, a, b) = (own_stream(5, 1), own_stream(5, 2), own_stream(5, 3));
    let at = |offset: u64, kind: AccessKind| own_memory(5, offset, kind);
    let (input_a, output_a, input_b, output_b) = (0, 0x100, 0x200, 0x300);
    super::check(producer.clone(), Step::Work, vec![at(input_b, AccessKind::Write)], "producer".into())
        .unwrap()
        .enqueued();
    let ranks = vec![
        (a, vec![at(input_a, AccessKind::Read), at(output_a, AccessKind::Write)]),
        (b, vec![at(input_b, AccessKind::Read), at(output_b, AccessKind::Write)]),
    ];
    match super::check_collective(ranks, super::CollectiveOrder::AllToAll, "ncclAllReduce") {
        Err(crate::Error::Race(race)) => {
            assert_eq!((race.kind, race.later.operation.as_str()), (RaceKind::WriteRead, "ncclAllReduce"));
        }
        Err(other) => panic!("rank b reads what the producer may still write: {other:?}"),
        Ok(_) => panic!("rank b reads what the producer may still write: not refused"),
    }
    // Nothing of it was recorded, rank a's part neither: the producer may write rank a's output.
    super::check(producer, Step::Work, vec![at(output_a, AccessKind::Write)], "after".into()).unwrap().enqueued();
}

/// A check that reaches the model once the detector is off everywhere (its thread found it on,
/// then took the model's lock after the last scope closed) records nothing: no model of the
/// next on-period is made for it, which would start that period with a stale write and report
/// races that are not.
#[test]
fn a_check_made_after_the_detector_went_off_leaves_nothing_to_the_next_period() {
    let _serial = serial();
    let (a, b) = (own_stream(6, 1), own_stream(6, 2));
    let at = |kind: AccessKind| own_memory(6, 0, kind);
    {
        let scope = super::race_scope(super::RaceMode::Report);
        assert!(declared(&scope, &a, vec![at(AccessKind::Write)]).is_empty());
    }
    // Off everywhere now (the serial lock keeps every other scope of this binary closed).
    assert!(!super::tracking());
    super::check(a.clone(), Step::Work, vec![at(AccessKind::Write)], "late".into()).unwrap().enqueued();
    let scope = super::race_scope(super::RaceMode::Report);
    assert!(declared(&scope, &b, vec![at(AccessKind::Read)]).is_empty(), "the last period's write was kept");
}
