/* Host stubs of examples/kernels/graph_capture.cu for a toolkit without nvcc: the example
 * links, and its first launch fails (no kernel image). */
void graph_capture_empty(void) {}
