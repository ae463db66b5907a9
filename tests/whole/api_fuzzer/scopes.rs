//! Sync-debug and race-detector scopes around operations of the program; the race detector
//! over whole programs (process-wide `RaceMode::Report`), its oracle, and the planted race.

use super::*;
use cuda_stream::race::{RaceKind, RaceMode, take_race_reports};
use cuda_stream::sync_debug::SyncDebugMode;
use cuda_stream::{Access, RaceReport, race_scope, set_race_mode, sync_debug_scope};

/// How the planted race's two writes are named in the detector's reports (the prefix marks
/// them apart from the program's operations).
const PLANTED: &str = "api fuzzer: planted race";
pub(crate) const PLANTED_FIRST: &str = "api fuzzer: planted race, first write";
pub(crate) const PLANTED_SECOND: &str = "api fuzzer: planted race, second write";

/// Whether a program runs under the race detector, and with a planted race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RaceCheck {
    Off,
    /// Under the detector: it must report nothing.
    Checked,
    /// Under the detector with a planted race: it must report exactly that race.
    Planted,
}

/// The seeds divisible by [`race_every`] run under the detector; one in four of them (the
/// quotient 1 modulo 4: seeds 4, 20, 36, … by default) plants a race. (Each planted race is
/// printed to stderr by the detector, as every race it reports.)
pub(crate) fn race_check(seed: u64) -> RaceCheck {
    let every = race_every();
    if every == 0 || seed % every != 0 {
        RaceCheck::Off
    } else if (seed / every) % 4 == 1 {
        RaceCheck::Planted
    } else {
        RaceCheck::Checked
    }
}

/// The race detector in `RaceMode::Report` for the whole process while alive: every thread of
/// the program (the main thread, the spawned ones, the drops elsewhere) reports into
/// [`take_race_reports`]. The previous process mode comes back when it drops.
pub(crate) struct Detector {
    previous: RaceMode,
}

impl Detector {
    pub(crate) fn report() -> Detector {
        // Nothing is reported under the process mode while it is off: nothing stale is kept.
        drop(take_race_reports());
        Detector { previous: set_race_mode(RaceMode::Report) }
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        // Off everywhere again: the history ends with it.
        set_race_mode(self.previous);
    }
}

/// What the planted race did: both writes were declared (then the detector must report their
/// race), and the buffer's free was ordered after both (else a report of the free, which
/// names a planted write, may come too).
#[derive(Debug)]
pub(crate) struct Plant {
    pub(crate) declared: bool,
    pub(crate) ordered: bool,
}

/// The reports, one per line (`{}`: both accesses, the missing edge, the allocation).
fn listed(reports: &[RaceReport]) -> String {
    reports.iter().map(|report| format!("{report}")).collect::<Vec<_>>().join("\n")
}

/// Whether one of the two accesses of `report` is a planted write.
fn planted(report: &RaceReport) -> bool {
    [&report.earlier, &report.later].iter().any(|access| access.operation.starts_with(PLANTED))
}

/// The oracle of a program run under the detector: it reported no race among the operations
/// of the program (every one the crate ordered, or unseen by the detector), and exactly the
/// planted race where one was declared.
pub(crate) fn check_race_reports(plant: Option<&Plant>) {
    let (planted, ordered): (Vec<RaceReport>, Vec<RaceReport>) = take_race_reports().into_iter().partition(planted);
    assert!(
        ordered.is_empty(),
        "the race detector (RaceMode::Report, the whole program) reported {} races among operations the crate \
         ordered:\n{}",
        ordered.len(),
        listed(&ordered)
    );
    RACE_PROGRAMS.fetch_add(1, Ordering::SeqCst);
    let Some(plant) = plant.filter(|plant| plant.declared) else {
        assert!(planted.is_empty(), "reports of a planted race that was not declared:\n{}", listed(&planted));
        return;
    };
    PLANTS.fetch_add(1, Ordering::SeqCst);
    let found = planted
        .iter()
        .filter(|report| {
            report.kind == RaceKind::WriteWrite
                && report.earlier.operation == PLANTED_FIRST
                && report.later.operation == PLANTED_SECOND
        })
        .count();
    assert_eq!(
        found,
        1,
        "the planted race (two writes of one buffer's bytes on two streams that nothing orders, declared with \
         declare_accesses) must be reported once, as WriteWrite ({PLANTED_FIRST:?}, then {PLANTED_SECOND:?}); \
         the reports naming a planted write:\n{}",
        listed(&planted)
    );
    if plant.ordered {
        assert_eq!(
            planted.len(),
            1,
            "only the planted pair is reported (the free was ordered after both writes):\n{}",
            listed(&planted)
        );
    }
    PLANTS_REPORTED.fetch_add(1, Ordering::SeqCst);
}

/// Sets `bytes` bytes at `ptr` to `byte` on `stream`, by raw FFI: work the crate does not see.
fn planted_write(stream: &StreamRef, ptr: *mut u32, bytes: usize, byte: u8) -> Result<()> {
    // SAFETY: `ptr` is the address of a live device allocation of `bytes` bytes on the
    // stream's device (device 0, current), which the planted race frees only after its home
    // stream waited for `stream` (or the device synchronized).
    let code = unsafe { sys::cudaMemsetAsync(ptr.cast(), i32::from(byte), bytes, stream.as_raw()) };
    check(code, "cudaMemsetAsync")
}

impl<'p> World<'p> {
    /// A sync-debug scope (`Report` or `Refuse`) around a call that makes the host wait: a
    /// stream synchronize, a copy of a buffer into a slice, a device synchronize (never during
    /// a capture). Under `Refuse` none of them may succeed; under `Report` a synchronize that
    /// succeeded was reported.
    pub(crate) fn sync_scope(&mut self, s: u32, mode: u8, what: u8, active: Option<&Active<'_>>) {
        let origin = active.map(|active| active.origin);
        let capturing = active.is_some();
        let refuse = mode % 2 == 1;
        let scope = sync_debug_scope(if refuse { SyncDebugMode::Refuse } else { SyncDebugMode::Report });
        let (what, result, reported_if_ok) = match what % 3 {
            0 => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                ("StreamRef::synchronize (sync-debug scope)", stream.synchronize(), true)
            }
            1 => {
                let Some(stream) = pick_in(&self.slots, s, origin) else { return skip() };
                if self.mem.buffers.is_empty() {
                    return skip();
                }
                let buf = &self.mem.buffers[s as usize % self.mem.buffers.len()];
                let mut values = vec![0u32; buf.buffer.len()];
                ("DeviceBuffer::copy_to_slice (sync-debug scope)", buf.buffer.copy_to_slice(stream, &mut values), false)
            }
            _ => {
                if capturing {
                    return skip();
                }
                ("Device::synchronize (sync-debug scope)", self.device.synchronize(), true)
            }
        };
        note(what, &result);
        if refuse {
            assert!(result.is_err(), "{what}: a wait must be refused under SyncDebugMode::Refuse");
        } else if result.is_ok() && reported_if_ok {
            assert!(!scope.take_events().is_empty(), "{what}: a wait under SyncDebugMode::Report must be reported");
        }
        drop(scope);
    }

    /// A race-detector scope (`Report`) around buffer operations that the crate orders (a
    /// fresh pair of buffers filled, copied into each other and read on random streams of the
    /// program, then dropped): nothing may be reported. Never during a capture.
    pub(crate) fn race_scope_op(&mut self, s: u32, other: u32, seed: u64) {
        let mut rng = Rng::new(seed);
        let Some(home) = self.mem.home(self.device, s) else { return skip() };
        let scope = race_scope(RaceMode::Report);
        let a = Buffer::zeroed(Arc::clone(&home), 64);
        note("DeviceBuffer::zeroed (race scope)", &a);
        let b = Buffer::new(home, 64);
        note("DeviceBuffer::new (race scope)", &b);
        if let (Ok(mut a), Ok(mut b)) = (a, b) {
            for _ in 0..2 + rng.below(5) {
                let picks = [s.wrapping_add(rng.next_u64() as u32), other.wrapping_add(rng.next_u64() as u32)];
                let (Some(one), Some(two)) =
                    (pick_in(&self.slots, picks[0], None), pick_in(&self.slots, picks[1], None))
                else {
                    break;
                };
                let (what, result) = match rng.below(6) {
                    0 => ("DeviceBuffer::fill_bytes", a.fill_bytes(one, byte(&mut rng))),
                    1 => ("DeviceBuffer::copy_from", b.copy_from(one, &a)),
                    2 => ("DeviceBuffer::copy_from", a.copy_from(two, &b)),
                    3 => {
                        let mut values = vec![0u32; 64];
                        ("DeviceBuffer::copy_to_slice", b.copy_to_slice(two, &mut values))
                    }
                    4 => ("DeviceBuffer::fill_bytes", b.fill_bytes(two, byte(&mut rng))),
                    _ => (
                        "DeviceBuffer::use_on (a kernel)",
                        a.use_on(one, |on, _| cuda_stream_tests::empty(on)).and_then(|done| done),
                    ),
                };
                note(what, &result);
            }
            if coin(&mut rng) {
                drop(a);
                drop(b);
            } else {
                drop(b);
                drop(a);
            }
        }
        let reports = scope.take_reports();
        assert!(reports.is_empty(), "the race detector reported operations the crate ordered: {reports:#?}");
        drop(scope);
    }
}

impl<'p> World<'p> {
    /// The planted race, at the top level of a race-checked program: a fresh buffer (homed on a
    /// program home, zeroed there), two streams (owned streams of the program outside any
    /// capture, or fresh ones where fewer than two) that wait for its home, then a raw write of
    /// all its bytes on each, each declared first ([`StreamRef::declare_accesses`], as
    /// `tests/call/race_detector.rs` declares raw kernels): nothing orders the second after the
    /// first, so the detector must report the pair ([`check_race_reports`]). Then the home
    /// stream waits for both (or the device synchronizes) and the buffer drops: its free races
    /// nothing.
    pub(crate) fn plant_race(&mut self, seed: u64) -> Plant {
        let mut rng = Rng::new(seed);
        let nothing = Plant { declared: false, ordered: true };
        let device = self.device;
        let Some(home) = self.mem.home(device, pick(&mut rng)) else {
            skip();
            return nothing;
        };
        // Owned streams are distinct streams, none of them legacy: the detector orders no two
        // of them implicitly.
        let owned: Vec<usize> = (0..self.slots.len())
            .filter(|&index| {
                let stream = &self.slots[index].stream;
                matches!(stream, HeldStream::Owned(_)) && records_into_capture(stream) == Some(false)
            })
            .collect();
        let fresh: Vec<Stream> = (owned.len().min(2)..2)
            .filter_map(|_| {
                let stream = Stream::new(device, StreamOptions::non_blocking());
                note("Stream::new (planted race)", &stream);
                stream.ok()
            })
            .collect();
        let mut streams: Vec<&StreamRef> =
            owned.iter().map(|&index| &*self.slots[index].stream).chain(fresh.iter().map(|stream| &**stream)).collect();
        if streams.len() < 2 {
            skip();
            return nothing;
        }
        let first = streams.swap_remove(rng.below(streams.len()));
        let second = streams[rng.below(streams.len())];
        assert!(*first != *second, "the planted race's two streams are two streams");
        let buffer = Buffer::zeroed(Arc::clone(&home), 64);
        note("DeviceBuffer::zeroed (planted race)", &buffer);
        let Ok(mut buffer) = buffer else { return nothing };
        let len = buffer.len();
        let bytes = len * size_of::<u32>();
        let ptr = buffer.as_mut_ptr();
        // Both writes after the allocation and its zeros: they race each other only.
        for stream in [first, second] {
            if !note("StreamRef::wait_stream (planted race, on the home)", &stream.wait_stream(&*home)) {
                return nothing;
            }
        }
        let write = [Access::write(ptr.cast_const(), len)];
        let declared_first = first.declare_accesses(PLANTED_FIRST, &write);
        note("StreamRef::declare_accesses (planted race, first write)", &declared_first);
        if declared_first.is_ok() {
            note("cudaMemsetAsync (planted race, first write)", &planted_write(first, ptr, bytes, 0x11));
        }
        let declared_second = second.declare_accesses(PLANTED_SECOND, &write);
        note("StreamRef::declare_accesses (planted race, second write)", &declared_second);
        if declared_second.is_ok() {
            note("cudaMemsetAsync (planted race, second write)", &planted_write(second, ptr, bytes, 0x22));
        }
        // The free (on the home stream) after both writes.
        let mut ordered = [first, second].into_iter().all(|stream| {
            note("StreamRef::wait_stream (planted race, the home on a write)", &home.wait_stream(stream))
        });
        if !ordered {
            let synced = device.synchronize();
            ordered = note("Device::synchronize (planted race)", &synced);
        }
        drop(buffer);
        Plant { declared: declared_first.is_ok() && declared_second.is_ok(), ordered }
    }
}
