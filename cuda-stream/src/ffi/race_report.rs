//! What the race detector ([`race`](crate::race)) reports: two accesses to the same memory
//! that nothing orders, the operations and streams that made them, where (backtraces), and
//! the edge that would order them. In the floor because [`Error::Race`](crate::Error::Race)
//! carries one.

use std::backtrace::Backtrace;
use std::fmt;
use std::sync::Arc;

/// How an operation uses memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// Reads it.
    Read,
    /// Writes it (or reads and writes it).
    Write,
    /// Frees it (`cudaFreeAsync`): conflicts as a write, and ends the memory's history.
    Free,
}

impl AccessKind {
    /// Whether two accesses of these kinds to the same bytes conflict (one of them writes).
    pub(crate) fn conflicts_with(self, other: AccessKind) -> bool {
        self != AccessKind::Read || other != AccessKind::Read
    }
}

/// Which pair of accesses a [`RaceReport`] is about (the earlier one first).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RaceKind {
    /// Two writes.
    WriteWrite,
    /// A write, then a read that may run before it has finished.
    WriteRead,
    /// A read, then a write that may run before the read has finished.
    ReadWrite,
    /// A free while an access on another stream may still be running (or not yet have run).
    FreeInUse,
    /// A host access while an access of the device (a copy) may still be in flight.
    HostInFlight,
}

/// One operation that accessed memory, as the detector saw it when it was enqueued.
#[derive(Clone, Debug)]
pub struct RaceAccess {
    /// The operation, e.g. `cudaMemcpyAsync` or the kernel's name.
    pub operation: String,
    /// How it used the memory.
    pub kind: AccessKind,
    /// The stream it was enqueued on (`host` for a host access).
    pub stream: String,
    /// The first byte's address.
    pub address: u64,
    /// How many bytes.
    pub bytes: u64,
    /// The enqueuing thread's name, if it has one.
    pub thread: Option<String>,
    /// Where it was enqueued ([`Backtrace::capture`]: set `RUST_BACKTRACE=1` to see frames).
    pub backtrace: Arc<Backtrace>,
}

/// Two accesses of the same memory that nothing orders: the device may run them in either
/// order, or at once. Displayed with `{}`: both accesses, the missing edge and the
/// allocation; with `{:#}` also the three backtraces.
#[derive(Clone, Debug)]
pub struct RaceReport {
    /// Which pair it is.
    pub kind: RaceKind,
    /// The access enqueued first.
    pub earlier: RaceAccess,
    /// The access enqueued later, which may run before the earlier one has finished.
    pub later: RaceAccess,
    /// Where the memory was allocated, when it is memory the crate allocated.
    pub allocation: Option<RaceAccess>,
    /// The edge that would order the two: which stream should record, and which wait.
    pub missing_edge: String,
}

impl Eq for RaceReport {}

impl PartialEq for RaceReport {
    /// The same pair of operations on the same streams and memory (backtraces aside).
    fn eq(&self, other: &RaceReport) -> bool {
        let same = |a: &RaceAccess, b: &RaceAccess| {
            (&a.operation, a.kind, &a.stream, a.address, a.bytes)
                == (&b.operation, b.kind, &b.stream, b.address, b.bytes)
        };
        self.kind == other.kind && same(&self.earlier, &other.earlier) && same(&self.later, &other.later)
    }
}

impl fmt::Display for RaceAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} by `{}` on {}, {} bytes at {:#x}, thread {}",
            self.kind,
            self.operation,
            self.stream,
            self.bytes,
            self.address,
            self.thread.as_deref().unwrap_or("<unnamed>")
        )
    }
}

impl fmt::Display for RaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "race ({:?}): two accesses of the same memory that nothing orders", self.kind)?;
        writeln!(f, "  earlier: {}", self.earlier)?;
        writeln!(f, "  later:   {}", self.later)?;
        writeln!(f, "  missing: {}", self.missing_edge)?;
        if let Some(allocation) = &self.allocation {
            writeln!(f, "  memory allocated by `{}` on {}", allocation.operation, allocation.stream)?;
        }
        if !f.alternate() {
            return Ok(());
        }
        writeln!(f, "  earlier access enqueued at:\n{}", self.earlier.backtrace)?;
        writeln!(f, "  later access enqueued at:\n{}", self.later.backtrace)?;
        if let Some(allocation) = &self.allocation {
            writeln!(f, "  allocated at:\n{}", allocation.backtrace)?;
        }
        Ok(())
    }
}

/// The label of the host's accesses.
pub(crate) const HOST: &str = "host";

/// The edge that would order `earlier` before `later`.
pub(crate) fn missing_edge(earlier: &RaceAccess, later: &RaceAccess) -> String {
    if later.stream == HOST {
        format!(
            "the host must wait for {} (synchronize it, or an event recorded on it after `{}`) before its `{}`",
            earlier.stream, earlier.operation, later.operation
        )
    } else {
        format!(
            "record an event on {} after `{}` and make {} wait for it (`wait_event`) before `{}`, \
             or call `wait_stream` on {} with {} before it",
            earlier.stream, earlier.operation, later.stream, later.operation, later.stream, earlier.stream
        )
    }
}
