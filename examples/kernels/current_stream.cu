// The kernels of examples/current_stream.rs.

// Appends `tag` to `log`, mapped host memory: `log[0]` counts the tags, the `capacity` words
// after it hold them in the order the GPU ran the kernels (a tag past the capacity is dropped).
extern "C" __global__ void current_stream_tag(unsigned* log, unsigned capacity, unsigned tag) {
  unsigned slot = atomicAdd(&log[0], 1u);
  if (slot < capacity) log[1 + slot] = tag;
  __threadfence_system();
}
