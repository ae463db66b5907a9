//! A launch's shape and its launch attributes, as values: what `cudaLaunchKernelEx` takes in
//! its `cudaLaunchConfig_t`.

use crate::call::race::Access;
use crate::device::Device;
use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::ffi::priority::Priority;
use crate::sys;

/// Grid or block dimensions. `5`, `(5, 2)` and `(5, 2, 1)` convert into one.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// Along x.
    pub x: u32,
    /// Along y.
    pub y: u32,
    /// Along z.
    pub z: u32,
}

impl Dim3 {
    /// How many blocks or threads the dimensions make.
    pub fn count(self) -> u64 {
        u64::from(self.x) * u64::from(self.y) * u64::from(self.z)
    }

    fn raw(self) -> sys::dim3 {
        sys::dim3 { x: self.x, y: self.y, z: self.z }
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

/// The memory synchronization domain of a launch
/// ([`cudaLaunchAttributeMemSyncDomain`](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#memory-synchronization-domains)):
/// a memory fence in a kernel orders only the memory operations of its own domain, so a
/// compute kernel's fences need not wait for a communication kernel's traffic (sm_90 and
/// later; older GPUs accept it and have one domain).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum MemSyncDomain {
    /// The domain of ordinary kernels (CUDA's default).
    #[default]
    Default,
    /// The domain meant for kernels that communicate with other devices (NCCL's).
    Remote,
}

/// How to launch a kernel: grid, block and dynamic shared memory, and the launch attributes
/// ([`cudaLaunchKernelEx`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html),
/// [`cudaLaunchAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html)).
/// Built once and reused: a launch reads it, and checks only what it depends on (the device's
/// priority range, for a priority).
///
/// ```
/// use cuda_stream::{LaunchConfig, MemSyncDomain, Priority};
/// let config = LaunchConfig::new(132, 256).shared_bytes(4096).cluster(2).priority(Priority(-1));
/// let remote = LaunchConfig::new((64, 2), (32, 8)).mem_sync_domain(MemSyncDomain::Remote);
/// # let _ = (config, remote);
/// ```
#[derive(Clone, Debug)]
pub struct LaunchConfig<'event> {
    grid: Dim3,
    block: Dim3,
    shared_bytes: usize,
    programmatic: bool,
    cluster: Option<Dim3>,
    priority: Option<Priority>,
    mem_sync_domain: Option<MemSyncDomain>,
    completion_event: Option<&'event Event>,
    cooperative: bool,
    accesses: &'event [Access],
}

/// The most attributes one launch carries (one of each kind this crate sets).
const MAX_ATTRIBUTES: usize = 6;

impl LaunchConfig<'static> {
    /// `grid` blocks of `block` threads, no dynamic shared memory, no attributes.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig<'static> {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_bytes: 0,
            programmatic: false,
            cluster: None,
            priority: None,
            mem_sync_domain: None,
            completion_event: None,
            cooperative: false,
            accesses: &[],
        }
    }
}

impl<'event> LaunchConfig<'event> {
    /// Bytes of dynamic shared memory per block (`extern __shared__`).
    pub fn shared_bytes(mut self, bytes: usize) -> Self {
        self.shared_bytes = bytes;
        self
    }

    /// Programmatic dependent launch (`cudaLaunchAttributeProgrammaticStreamSerialization`,
    /// sm_90 and later): this kernel may begin before the previous kernel on its stream has
    /// completed, once every block of that kernel has called
    /// `cudaTriggerProgrammaticLaunchCompletion()` (or exited). Its code before
    /// `cudaGridDependencySynchronize()` overlaps the previous kernel's tail; after that call,
    /// the previous kernel has completed and its memory is visible. A kernel that reads the
    /// previous kernel's results without that call reads them too early: the ordering is the
    /// kernel's to keep.
    pub fn programmatic_dependent(mut self) -> Self {
        self.programmatic = true;
        self
    }

    /// Thread-block clusters of `dims` blocks (`cudaLaunchAttributeClusterDimension`, sm_90
    /// and later): the blocks of a cluster run together on one GPC and can read each other's
    /// shared memory. Each grid dimension must be a multiple of the cluster's (checked).
    pub fn cluster(mut self, dims: impl Into<Dim3>) -> Self {
        self.cluster = Some(dims.into());
        self
    }

    /// This launch's priority, in place of its stream's (`cudaLaunchAttributePriority`):
    /// checked against the device's range at launch.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The launch's memory synchronization domain (`cudaLaunchAttributeMemSyncDomain`).
    pub fn mem_sync_domain(mut self, domain: MemSyncDomain) -> Self {
        self.mem_sync_domain = Some(domain);
        self
    }

    /// Records `event` once every block of the kernel has begun (or called
    /// `cudaTriggerProgrammaticLaunchCompletion()`), not when the kernel completes
    /// (`cudaLaunchAttributeLaunchCompletionEvent`): work waiting on it overlaps the kernel's
    /// execution. The event must be of the stream's device and made without timing (CUDA's
    /// rule; checked). It counts as a record of the event: [`Event::query`] and waits see it.
    /// Refused during a stream capture ([`Error::CaptureMisuse`]): the graph's node would name
    /// an event that the graph does not keep.
    pub fn completion_event<'other>(self, event: &'other Event) -> LaunchConfig<'other>
    where
        'event: 'other,
    {
        LaunchConfig { completion_event: Some(event), ..self }
    }

    /// The memory the kernel reads and writes, for the race detector ([`race`](crate::race)):
    /// the launch is checked against the other streams' accesses of that memory, and later
    /// ones against it. Nothing is passed to CUDA; while the detector is off it costs nothing.
    pub fn accesses<'other>(self, accesses: &'other [Access]) -> LaunchConfig<'other>
    where
        'event: 'other,
    {
        LaunchConfig { accesses, ..self }
    }

    /// The accesses declared with [`LaunchConfig::accesses`].
    pub(crate) fn declared_accesses(&self) -> &[Access] {
        self.accesses
    }

    /// A cooperative launch (`cudaLaunchAttributeCooperative`): every block is resident at
    /// once, so blocks may wait for each other (cooperative groups' `grid.sync()`). CUDA
    /// refuses a grid larger than the device can hold at once
    /// (`cudaErrorCooperativeLaunchTooLarge`); [`Kernel::max_cooperative_blocks`](crate::Kernel::max_cooperative_blocks)
    /// says how many fit.
    pub fn cooperative(mut self) -> Self {
        self.cooperative = true;
        self
    }

    /// The grid.
    pub fn grid(&self) -> Dim3 {
        self.grid
    }

    /// The block.
    pub fn block(&self) -> Dim3 {
        self.block
    }

    /// The event recorded by the launch, if any.
    pub(crate) fn launch_completion_event(&self) -> Option<&'event Event> {
        self.completion_event
    }

    /// Whether the launch is a programmatic dependent launch.
    pub(crate) fn is_programmatic(&self) -> bool {
        self.programmatic
    }

    /// The checks CUDA's answer would be unclear for, before CUDA sees the launch.
    pub(crate) fn check(&self, device: Device) -> Result<()> {
        if self.grid.count() == 0 || self.block.count() == 0 {
            return Err(Error::InvalidLaunch("a grid or block dimension is zero"));
        }
        if let Some(cluster) = self.cluster {
            let divides = |grid: u32, cluster: u32| cluster != 0 && grid % cluster == 0;
            if !(divides(self.grid.x, cluster.x) && divides(self.grid.y, cluster.y) && divides(self.grid.z, cluster.z))
            {
                return Err(Error::InvalidLaunch("each grid dimension must be a nonzero multiple of the cluster's"));
            }
        }
        if let Some(priority) = self.priority {
            device.check_priority(priority)?;
        }
        if let Some(event) = self.completion_event {
            crate::device::same_device("a launch completion event is of the stream's device", device, event.device())?;
            if event.flags().timing != Some(false) {
                return Err(Error::InvalidLaunch("a launch completion event must be made without timing"));
            }
        }
        Ok(())
    }

    /// Calls `launch` with CUDA's configuration for `stream`, its attributes on the stack.
    pub(crate) fn with_raw<R>(
        &self,
        stream: sys::cudaStream_t,
        launch: impl FnOnce(&sys::cudaLaunchConfig_t) -> R,
    ) -> R {
        // SAFETY: a C union of plain integers and pointers, and its id: all zeros is a value.
        let mut attributes: [sys::cudaLaunchAttribute; MAX_ATTRIBUTES] = unsafe { std::mem::zeroed() };
        let mut count = 0;
        let mut push = |id: sys::cudaLaunchAttributeID, value: sys::cudaLaunchAttributeValue| {
            attributes[count].id = id;
            attributes[count].val = value;
            count += 1;
        };
        use sys::cudaLaunchAttributeID as Id;
        let value = || -> sys::cudaLaunchAttributeValue {
            // SAFETY: as above.
            unsafe { std::mem::zeroed() }
        };

        if self.programmatic {
            push(Id::cudaLaunchAttributeProgrammaticStreamSerialization, {
                let mut chosen = value();
                chosen.programmaticStreamSerializationAllowed = 1;
                chosen
            });
        }
        if let Some(cluster) = self.cluster {
            let mut dims = value();
            dims.clusterDim.x = cluster.x;
            dims.clusterDim.y = cluster.y;
            dims.clusterDim.z = cluster.z;
            push(Id::cudaLaunchAttributeClusterDimension, dims);
        }
        if let Some(priority) = self.priority {
            push(Id::cudaLaunchAttributePriority, {
                let mut chosen = value();
                chosen.priority = priority.value();
                chosen
            });
        }
        if let Some(domain) = self.mem_sync_domain {
            let domain = match domain {
                MemSyncDomain::Default => sys::cudaLaunchMemSyncDomain::cudaLaunchMemSyncDomainDefault,
                MemSyncDomain::Remote => sys::cudaLaunchMemSyncDomain::cudaLaunchMemSyncDomainRemote,
            };
            push(Id::cudaLaunchAttributeMemSyncDomain, {
                let mut chosen = value();
                chosen.memSyncDomain = domain;
                chosen
            });
        }
        if let Some(event) = self.completion_event {
            let mut recorded = value();
            recorded.launchCompletionEvent.event = event.as_raw();
            push(Id::cudaLaunchAttributeLaunchCompletionEvent, recorded);
        }
        if self.cooperative {
            push(Id::cudaLaunchAttributeCooperative, {
                let mut chosen = value();
                chosen.cooperative = 1;
                chosen
            });
        }
        let config = sys::cudaLaunchConfig_t {
            gridDim: self.grid.raw(),
            blockDim: self.block.raw(),
            dynamicSmemBytes: self.shared_bytes,
            stream,
            // CUDA reads the attributes only.
            attrs: attributes.as_mut_ptr(),
            numAttrs: count as u32,
        };
        launch(&config)
    }
}
