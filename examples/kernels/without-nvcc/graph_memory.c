/* Host stubs of examples/kernels/graph_memory.cu for a toolkit without nvcc: the example
 * links, and its first launch fails (no kernel image). */
void graph_memory_reduce(void) {}
void graph_memory_reduce_final(void) {}
