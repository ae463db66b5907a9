/* A stand-in for an NVTX tool (what Nsight Systems injects through NVTX_INJECTION64_PATH):
 * it takes the process's NVTX calls through NVTX 3's protocol (InitializeInjectionNvtx2, the
 * callbacks export table, the module function tables of nvtxDetail/nvtxTypes.h) and records
 * each call as a line, which tests/profiling/nvtx.rs reads back through nvtx_recorder_log. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*nvtx_function)(void);
typedef struct {
  size_t struct_size;
  int (*get_module_function_table)(int module, nvtx_function*** out_table, unsigned* out_size);
} nvtx_callbacks;
typedef struct {
  size_t struct_size;
  uint32_t version;
  uint32_t reserved0;
  void (*set_injection_nvtx_version)(uint32_t version);
} nvtx_version_info;
typedef const void* (*nvtx_get_export_table)(uint32_t id);

enum { MODULE_CORE = 1, MODULE_CUDART = 4, EXPORT_TABLE_CALLBACKS = 1, EXPORT_TABLE_VERSION_INFO = 3 };
enum { CORE_MARK_A = 2, CORE_RANGE_PUSH_A = 9, CORE_RANGE_POP = 11 };
enum { CUDART_NAME_STREAM_A = 3, CUDART_NAME_EVENT_A = 5 };

static char recorded[1 << 16];
static size_t length;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void record(const char* what, const void* handle, const char* name) {
  char line[512];
  int n = handle ? snprintf(line, sizeof line, "%s %p %s\n", what, handle, name)
          : name ? snprintf(line, sizeof line, "%s %s\n", what, name)
                 : snprintf(line, sizeof line, "%s\n", what);
  pthread_mutex_lock(&lock);
  if (n > 0 && length + (size_t)n < sizeof recorded) {
    memcpy(recorded + length, line, (size_t)n);
    length += (size_t)n;
  }
  pthread_mutex_unlock(&lock);
}

static void mark_a(const char* name) { record("mark", NULL, name); }
static int range_push_a(const char* name) { record("push", NULL, name); return 0; }
static int range_pop(void) { record("pop", NULL, NULL); return 0; }
static void name_stream_a(void* stream, const char* name) { record("stream", stream, name); }
static void name_event_a(void* event, const char* name) { record("event", event, name); }

/* As NVIDIA's own injection samples do: every module's table, each of NVTX's size, null at
 * index 0 and after its last slot, and the version table; any of it missing fails the init,
 * and the recorder records the failure instead of attaching. */
int InitializeInjectionNvtx2(nvtx_get_export_table get_export_table) {
  static const unsigned sizes[7] = {0, 16, 9, 15, 7, 16, 7}; /* CORE, CUDA, OPENCL, CUDART, CORE2, SYNC */
  const nvtx_callbacks* callbacks = (const nvtx_callbacks*)get_export_table(EXPORT_TABLE_CALLBACKS);
  const nvtx_version_info* version = (const nvtx_version_info*)get_export_table(EXPORT_TABLE_VERSION_INFO);
  nvtx_function** tables[7] = {0};
  if (!callbacks || callbacks->struct_size < sizeof(nvtx_callbacks)) return record("refused callbacks", NULL, NULL), 0;
  if (!version || version->struct_size < sizeof(nvtx_version_info) || version->version < 2)
    return record("refused version", NULL, NULL), 0;
  for (int module = 1; module <= 6; module++) {
    unsigned size = 0;
    if (!callbacks->get_module_function_table(module, &tables[module], &size) || size != sizes[module])
      return record("refused module size", NULL, NULL), 0;
    if (tables[module][0] || tables[module][size]) return record("refused module bounds", NULL, NULL), 0;
    for (unsigned id = 1; id < size; id++)
      if (!tables[module][id]) return record("refused module slot", NULL, NULL), 0;
  }
  *tables[MODULE_CORE][CORE_MARK_A] = (nvtx_function)mark_a;
  *tables[MODULE_CORE][CORE_RANGE_PUSH_A] = (nvtx_function)range_push_a;
  *tables[MODULE_CORE][CORE_RANGE_POP] = (nvtx_function)range_pop;
  *tables[MODULE_CUDART][CUDART_NAME_STREAM_A] = (nvtx_function)name_stream_a;
  *tables[MODULE_CUDART][CUDART_NAME_EVENT_A] = (nvtx_function)name_event_a;
  record("attached", NULL, NULL);
  return 1;
}

/* Copies what was recorded (NUL-terminated, cut to `capacity`); returns its length. */
size_t nvtx_recorder_log(char* out, size_t capacity) {
  if (capacity == 0) return 0;
  pthread_mutex_lock(&lock);
  size_t n = length < capacity - 1 ? length : capacity - 1;
  memcpy(out, recorded, n);
  out[n] = 0;
  pthread_mutex_unlock(&lock);
  return n;
}
