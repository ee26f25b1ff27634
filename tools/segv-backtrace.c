/* Preloaded by tools/gpu-memory-check.sh (LD_PRELOAD) on the GPU machine, which has no gdb: a
 * process that gets SIGSEGV prints the faulting address, the instruction pointer and its stack
 * (symbol+offset per frame; demangle with c++filt) to stderr, then dies of the signal as it would
 * have. When the fault is a jump through a bad pointer, backtrace() cannot unwind from there, so
 * the words at the stack pointer that fall inside a loaded library (return addresses) are printed
 * as well. Build: gcc -shared -fPIC -o segv.so THIS -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void say(const char* text) { (void)!write(2, text, strlen(text)); }

static void where(const char* label, void* address) {
  char line[512];
  Dl_info info;
  if (dladdr(address, &info) && info.dli_fname) {
    const long offset = (long)((char*)address - (char*)(info.dli_saddr ? info.dli_saddr : info.dli_fbase));
    snprintf(line, sizeof line, "%s %p %s(%s+0x%lx)\n", label, address, info.dli_fname,
             info.dli_sname ? info.dli_sname : "", offset);
    say(line);
  }
}

static void on_segv(int sig, siginfo_t* si, void* context) {
  char line[128];
  snprintf(line, sizeof line, "SIGSEGV, stack:\nfault address %p\n", si->si_addr);
  say(line);
#if defined(__x86_64__)
  const ucontext_t* uc = (const ucontext_t*)context;
  void* ip = (void*)uc->uc_mcontext.gregs[REG_RIP];
  void** sp = (void**)uc->uc_mcontext.gregs[REG_RSP];
  snprintf(line, sizeof line, "ip %p\n", ip);
  say(line);
  where("ip in", ip);
  for (int i = 0; i < 48; ++i) where("stack word", sp[i]);
#else
  (void)context;
#endif
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
}
