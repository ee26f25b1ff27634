/* Preloaded by tools/gpu-memory-check.sh (LD_PRELOAD) on the GPU machine, which has no gdb: a
 * process that gets SIGSEGV prints its stack (symbol+offset per frame; demangle with c++filt) to
 * stderr, then dies of the signal as it would have. Build: gcc -shared -fPIC -o segv.so THIS. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

static void on_segv(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  static const char head[] = "SIGSEGV, stack:\n";
  (void)!write(2, head, sizeof head - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) { signal(SIGSEGV, on_segv); }
