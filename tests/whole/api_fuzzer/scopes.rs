//! Sync-debug and race-detector scopes around operations of the program.

use super::*;
use cuda_stream::race::RaceMode;
use cuda_stream::sync_debug::SyncDebugMode;
use cuda_stream::{race_scope, sync_debug_scope};

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
