// A SIGPROF sampler: every 50 us of process CPU time, the interrupted thread's stack (up to 24
// frames, via backtrace) goes into a buffer; at exit the buffer and /proc/self/maps are written
// to $PROF_OUT. Load with LD_PRELOAD.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <fcntl.h>
#define DEPTH 24
#define MAXS 400000
static void *samples[MAXS][DEPTH];
static int depths[MAXS];
static volatile int count = 0;
static void handler(int sig, siginfo_t *info, void *ctx) {
  int i = __sync_fetch_and_add(&count, 1);
  if (i >= MAXS) return;
  depths[i] = backtrace(samples[i], DEPTH);
}
static void dump(void) {
  struct itimerval off = {0};
  setitimer(ITIMER_PROF, &off, 0);
  const char *out = getenv("PROF_OUT");
  if (!out) return;
  FILE *f = fopen(out, "w");
  if (!f) return;
  int n = count < MAXS ? count : MAXS;
  for (int i = 0; i < n; i++) {
    for (int d = 0; d < depths[i]; d++) fprintf(f, "%p ", samples[i][d]);
    fputc('\n', f);
  }
  fputs("MAPS\n", f);
  int fd = open("/proc/self/maps", O_RDONLY);
  char buf[4096];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) fwrite(buf, 1, r, f);
  close(fd);
  fclose(f);
}
__attribute__((constructor)) static void install(void) {
  if (!getenv("PROF_OUT")) return;
  void *warm[4];
  backtrace(warm, 4);
  struct sigaction sa = {0};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGPROF, &sa, 0);
  struct itimerval it = {{0, 50}, {0, 50}};
  setitimer(ITIMER_PROF, &it, 0);
  atexit(dump);
}
