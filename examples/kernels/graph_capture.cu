// The kernels of examples/graph_capture.rs.

// Does nothing: what is timed is the cost of launching it, replayed or direct.
extern "C" __global__ void graph_capture_empty() {}
