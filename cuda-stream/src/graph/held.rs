//! Memory that a graph's nodes use and the graph holds, as this layer sees it: an opaque value
//! (the memory layer's, which knows buffers) that each launch of an executable asks to order
//! the launch with the memory's other uses. A graph, its clones and its executables each hold
//! it, so no launch outlives the memory its memcpy and memset nodes touch.

use crate::ffi::error::Result;
use crate::stream::StreamRef;
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// The memory a graph's nodes use, held by the graph (see the [module docs](self)).
pub(crate) trait GraphMemory: Any + Send + Sync + fmt::Debug {
    /// Runs `launch` (one launch of a graph on `stream`, which sets its flag once CUDA took the
    /// launch, whatever it returns after), ordered after the earlier uses of the memory it
    /// conflicts with, and noted for the later ones and the frees.
    ///
    /// # Errors
    /// Those of the ordering, and `launch`'s.
    fn ordered_launch(&self, stream: &StreamRef, launch: &mut dyn FnMut(&mut bool) -> Result<()>) -> Result<()>;

    /// What names the nodes, without the memory: what an executable keeps of the graph it was
    /// made from (to check a node whose memory it is asked to change), holding nothing.
    fn nodes_only(&self) -> Arc<dyn GraphMemory>;

    /// The memory without the names of the nodes (a clone's: they are the original's nodes).
    fn without_nodes(&self) -> Arc<dyn GraphMemory>;

    /// Whether the graph may have one executable at a time only (its allocations outlive its
    /// launches, and their state is the graph's).
    fn one_executable(&self) -> bool;

    /// Notes how an executable of the graph was instantiated (`auto_free`: with
    /// `cudaGraphInstantiateFlagAutoFreeOnLaunch`).
    fn instantiated(&self, auto_free: bool);

    /// The value itself, for the memory layer to grow it by a node (no trait upcasting at the
    /// crate's minimum Rust).
    fn as_any(&self) -> &dyn Any;
}
