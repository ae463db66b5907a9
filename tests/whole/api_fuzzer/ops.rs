//! The operations of a program, and its generation from a seed.

use super::*;

/// One operation; the `u32` picks choose operands modulo what exists when it runs. The actors the
/// crate does not control: [`World::captured_event`], [`World::raw_capture`] and
/// [`World::non_primary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    NewStream { kind: u8, priority: u32 },
    DropStream { s: u32 },
    DestroyStream { s: u32 },
    TakeBuiltin { which: u8 },
    Borrowed { s: u32, action: u8, e: u32 },
    StreamInfo { s: u32 },
    NewEvent { flags: u8 },
    DropEvent { e: u32 },
    Record { s: u32, e: u32 },
    RecordEvent { s: u32 },
    WaitEvent { s: u32, e: u32 },
    WaitStream { s: u32, other: u32 },
    Fork { s: u32 },
    Query { s: u32 },
    Synchronize { s: u32 },
    EventUse { e: u32, action: u8 },
    Elapsed { end: u32, start: u32 },
    HostFn { s: u32, probe: bool },
    HostCallback { s: u32, probe: bool },
    Completion { s: u32, block: bool },
    Kernel { s: u32, kind: u8, micros: u8 },
    BeginCapture { mode: u8, fresh: bool, s: u32 },
    CaptureHostFn { s: u32, on_origin: bool, probe: bool },
    EndCapture { discard: bool },
    Instantiate { g: u32 },
    Launch { x: u32, s: u32, times: u8, upload: bool },
    DropGraph { g: u32 },
    DropExec { x: u32 },
    Pool { s: u32, action: u8 },
    Current { picks: [u32; 3], depth: u8, action: u8 },
    Threads { count: u8, seed: u64 },
    CapturedEvent { e: u32, action: u8, seed: u64 },
    RawCapture { s: u32, mode: u8, fresh: bool, seed: u64 },
    NonPrimaryContext { seed: u64 },
    DeviceSync,
    BufferNew { s: u32, how: u8, len: u8, tag: u8 },
    BufferWrite { b: u32, s: u32, how: u8, tag: u8, other: u32 },
    BufferRead { b: u32, s: u32, how: u8, other: u32 },
    BufferDrop { b: u32, elsewhere: bool },
    Pinned { p: u32, action: u8, tag: u8 },
    MemoryPool { action: u8, bytes: u32 },
    TypedLaunch { s: u32, other: u32, attr: u8, a: u8 },
    MemOps { s: u32, action: u8, tag: u8 },
    Partition { pick: u32, action: u8 },
    Conditional { value: u8, tag: u8 },
    SyncScope { s: u32, mode: u8, what: u8 },
    RaceScope { s: u32, other: u32, seed: u64 },
    JoinRace { seed: u64 },
    GraphMem { pick: u32, action: u8, tag: u8 },
    GraphBuild { seed: u64 },
    GraphCapture { s: u32, seed: u64 },
    GraphRun { x: u32, s: u32, action: u8, seed: u64 },
}

/// How many kinds of [`Op`] there are.
pub(crate) const OP_KINDS: usize = 52;

/// For each kind in the order of [`make_op`]: its weight outside a capture, and inside one.
pub(crate) const WEIGHTS: [(usize, usize); OP_KINDS] = [
    (6, 2), // NewStream
    (3, 1), // DropStream
    (2, 1), // DestroyStream
    (2, 1), // TakeBuiltin
    (3, 3), // Borrowed
    (2, 2), // StreamInfo
    (4, 2), // NewEvent
    (2, 1), // DropEvent
    (5, 5), // Record
    (2, 2), // RecordEvent
    (4, 4), // WaitEvent
    (5, 6), // WaitStream
    (2, 4), // Fork
    (3, 1), // Query
    (3, 1), // Synchronize
    (4, 2), // EventUse
    (2, 1), // Elapsed
    (6, 3), // HostFn
    (3, 2), // HostCallback
    (3, 2), // Completion
    (8, 8), // Kernel
    (5, 1), // BeginCapture (inside a capture: an attempt to nest one)
    (0, 6), // CaptureHostFn
    (1, 1), // EndCapture
    (4, 1), // Instantiate
    (5, 2), // Launch
    (2, 1), // DropGraph
    (2, 1), // DropExec
    (4, 2), // Pool
    (3, 2), // Current
    (2, 0), // Threads (never during a capture)
    (2, 5), // CapturedEvent (outside a capture: one recorded in a capture, recorded outside again)
    (2, 0), // RawCapture (never during a capture of the crate's)
    (1, 0), // NonPrimaryContext (never during a capture)
    (1, 0), // DeviceSync (never during a capture)
    (3, 2), // BufferNew
    (4, 3), // BufferWrite
    (3, 2), // BufferRead
    (2, 1), // BufferDrop
    (2, 2), // Pinned
    (1, 1), // MemoryPool
    (2, 0), // TypedLaunch (never during a capture)
    (2, 1), // MemOps
    (1, 0), // Partition (never during a capture)
    (1, 0), // Conditional (never during a capture)
    (2, 1), // SyncScope
    (1, 0), // RaceScope (never during a capture)
    (1, 0), // JoinRace (never during a capture)
    (3, 1), // GraphMem (during a capture: no host access, no swap)
    (3, 0), // GraphBuild (never during a capture)
    (1, 5), // GraphCapture (outside a capture: a capture of its own)
    (4, 1), // GraphRun (during a capture: launches, refused on its streams, and drops)
];

pub(crate) fn pick(rng: &mut Rng) -> u32 {
    rng.next_u64() as u32
}

pub(crate) fn byte(rng: &mut Rng) -> u8 {
    rng.next_u64() as u8
}

pub(crate) fn coin(rng: &mut Rng) -> bool {
    rng.below(2) == 0
}

pub(crate) fn make_op(kind: usize, rng: &mut Rng) -> Op {
    match kind {
        0 => Op::NewStream { kind: byte(rng), priority: pick(rng) },
        1 => Op::DropStream { s: pick(rng) },
        2 => Op::DestroyStream { s: pick(rng) },
        3 => Op::TakeBuiltin { which: byte(rng) },
        4 => Op::Borrowed { s: pick(rng), action: byte(rng), e: pick(rng) },
        5 => Op::StreamInfo { s: pick(rng) },
        6 => Op::NewEvent { flags: byte(rng) },
        7 => Op::DropEvent { e: pick(rng) },
        8 => Op::Record { s: pick(rng), e: pick(rng) },
        9 => Op::RecordEvent { s: pick(rng) },
        10 => Op::WaitEvent { s: pick(rng), e: pick(rng) },
        11 => Op::WaitStream { s: pick(rng), other: pick(rng) },
        12 => Op::Fork { s: pick(rng) },
        13 => Op::Query { s: pick(rng) },
        14 => Op::Synchronize { s: pick(rng) },
        15 => Op::EventUse { e: pick(rng), action: byte(rng) },
        16 => Op::Elapsed { end: pick(rng), start: pick(rng) },
        17 => Op::HostFn { s: pick(rng), probe: rng.below(4) == 0 },
        18 => Op::HostCallback { s: pick(rng), probe: rng.below(4) == 0 },
        19 => Op::Completion { s: pick(rng), block: coin(rng) },
        20 => Op::Kernel { s: pick(rng), kind: byte(rng), micros: byte(rng) },
        21 => Op::BeginCapture { mode: byte(rng), fresh: coin(rng), s: pick(rng) },
        22 => Op::CaptureHostFn { s: pick(rng), on_origin: coin(rng), probe: rng.below(4) == 0 },
        23 => Op::EndCapture { discard: rng.below(4) == 0 },
        24 => Op::Instantiate { g: pick(rng) },
        25 => Op::Launch { x: pick(rng), s: pick(rng), times: byte(rng), upload: rng.below(3) == 0 },
        26 => Op::DropGraph { g: pick(rng) },
        27 => Op::DropExec { x: pick(rng) },
        28 => Op::Pool { s: pick(rng), action: byte(rng) },
        29 => Op::Current { picks: [pick(rng), pick(rng), pick(rng)], depth: byte(rng), action: byte(rng) },
        30 => Op::Threads { count: byte(rng), seed: rng.next_u64() },
        31 => Op::CapturedEvent { e: pick(rng), action: byte(rng), seed: rng.next_u64() },
        32 => Op::RawCapture { s: pick(rng), mode: byte(rng), fresh: rng.below(4) == 0, seed: rng.next_u64() },
        33 => Op::NonPrimaryContext { seed: rng.next_u64() },
        34 => Op::DeviceSync,
        35 => Op::BufferNew { s: pick(rng), how: byte(rng), len: byte(rng), tag: byte(rng) },
        36 => Op::BufferWrite { b: pick(rng), s: pick(rng), how: byte(rng), tag: byte(rng), other: pick(rng) },
        37 => Op::BufferRead { b: pick(rng), s: pick(rng), how: byte(rng), other: pick(rng) },
        38 => Op::BufferDrop { b: pick(rng), elsewhere: rng.below(3) == 0 },
        39 => Op::Pinned { p: pick(rng), action: byte(rng), tag: byte(rng) },
        40 => Op::MemoryPool { action: byte(rng), bytes: pick(rng) },
        41 => Op::TypedLaunch { s: pick(rng), other: pick(rng), attr: byte(rng), a: byte(rng) },
        42 => Op::MemOps { s: pick(rng), action: byte(rng), tag: byte(rng) },
        43 => Op::Partition { pick: pick(rng), action: byte(rng) },
        44 => Op::Conditional { value: byte(rng), tag: byte(rng) },
        45 => Op::SyncScope { s: pick(rng), mode: byte(rng), what: byte(rng) },
        46 => Op::RaceScope { s: pick(rng), other: pick(rng), seed: rng.next_u64() },
        47 => Op::JoinRace { seed: rng.next_u64() },
        48 => Op::GraphMem { pick: pick(rng), action: byte(rng), tag: byte(rng) },
        49 => Op::GraphBuild { seed: rng.next_u64() },
        50 => Op::GraphCapture { s: pick(rng), seed: rng.next_u64() },
        _ => Op::GraphRun { x: pick(rng), s: pick(rng), action: byte(rng), seed: rng.next_u64() },
    }
}

pub(crate) fn random_op(rng: &mut Rng, capturing: bool) -> Op {
    let weight = |(outside, inside): (usize, usize)| if capturing { inside } else { outside };
    let mut roll = rng.below(WEIGHTS.iter().copied().map(weight).sum());
    for (kind, weights) in WEIGHTS.iter().copied().enumerate() {
        if roll < weight(weights) {
            return make_op(kind, rng);
        }
        roll -= weight(weights);
    }
    unreachable!("the roll is below the total weight")
}

/// The program of `seed`: 40 to 80 operations; a capture begun at the top level is ended after
/// 1 to 15 operations (or by a random `EndCapture`, or by the end of the program).
pub(crate) fn generate(seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let len = 40 + rng.below(41);
    let mut ops = Vec::with_capacity(len);
    let mut capture_left: Option<usize> = None;
    while ops.len() < len {
        if capture_left == Some(0) {
            ops.push(Op::EndCapture { discard: rng.below(4) == 0 });
            capture_left = None;
            continue;
        }
        let op = random_op(&mut rng, capture_left.is_some());
        capture_left = match op {
            Op::BeginCapture { .. } if capture_left.is_none() => Some(1 + rng.below(15)),
            Op::EndCapture { .. } => None,
            _ => capture_left.map(|left| left - 1),
        };
        ops.push(op);
    }
    ops
}
