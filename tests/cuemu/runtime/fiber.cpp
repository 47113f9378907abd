// tests/cuemu/runtime/fiber.cpp: see fiber.h.
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUEMU_ASAN 1
#else
#define CUEMU_ASAN 0
#endif

// cuemu_swap_stacks(save, load): pushes the callee-saved registers (System V AMD64: rbp,
// rbx, r12-r15) on the running stack, stores the stack pointer at *save, switches to the
// stack `load` and pops the same from it. The SSE and x87 control words are not switched:
// every fiber of a thread runs with the thread's (nothing in a kernel changes them).
// cuemu_fiber_start: where a new fiber's first switch-in returns to; it calls the entry
// function left in r12 (it never returns).
#if defined(__x86_64__)
extern "C" void cuemu_swap_stacks(void** save, void* load);
extern "C" void cuemu_fiber_start();
asm(R"(
  .text
  .globl cuemu_swap_stacks
  .type cuemu_swap_stacks, @function
cuemu_swap_stacks:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size cuemu_swap_stacks, .-cuemu_swap_stacks

  .globl cuemu_fiber_start
  .type cuemu_fiber_start, @function
cuemu_fiber_start:
  .cfi_startproc
  .cfi_undefined rip
  endbr64
  xorl %ebp, %ebp
  call *%r12
  ud2
  .cfi_endproc
  .size cuemu_fiber_start, .-cuemu_fiber_start
)");
#endif

namespace cuemu::detail {
namespace {

#if defined(__x86_64__)
const bool kUcontext = [] {
  const char* v = std::getenv("RINGZERO_CUEMU_SWAPCONTEXT");
  return v != nullptr && v[0] == '1';
}();
#else
constexpr bool kUcontext = true;
#endif

thread_local unsigned long long t_switches = 0;
thread_local Ctx* t_leaving = nullptr;  // the context a switch left (ASan learns main's stack from it)

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "cuemu: %s\n", what);
  std::abort();
}

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

void make(Ctx* c, void (*entry)()) {
  c->asan_fake = nullptr;
#if defined(__x86_64__)
  if (!kUcontext) {
    // The frame cuemu_swap_stacks pops, from the lowest address: r15, r14, r13, r12 = entry,
    // rbx, rbp, then the return address cuemu_fiber_start, above which the stack is 16-byte
    // aligned (the ABI's state at a call).
    uint64_t* top =
        reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(c->stack + c->stack_bytes - c->top_skew) & ~uintptr_t(15));
    uint64_t* sp = top - 7;
    sp[0] = sp[1] = sp[2] = 0;                      // r15, r14, r13
    sp[3] = reinterpret_cast<uint64_t>(entry);     // r12
    sp[4] = sp[5] = 0;                              // rbx, rbp
    sp[6] = reinterpret_cast<uint64_t>(&cuemu_fiber_start);
    c->sp = sp;
    return;
  }
#endif
  if (getcontext(&c->uc) != 0) die("getcontext failed");
  c->uc.uc_stack.ss_sp = c->stack;
  c->uc.uc_stack.ss_size = c->stack_bytes - c->top_skew;
  c->uc.uc_link = nullptr;  // entry never returns
  makecontext(&c->uc, entry, 0);
}

// After a switch landed in `self`: tell ASan, and learn the main stack's bounds the first
// time a fiber is entered from it.
void finish(Ctx* self) {
#if CUEMU_ASAN
  const void* from_bottom = nullptr;
  size_t from_size = 0;
  __sanitizer_finish_switch_fiber(self->asan_fake, &from_bottom, &from_size);
  if (t_leaving != nullptr && t_leaving->stack == nullptr && t_leaving->asan_bottom == nullptr) {
    t_leaving->asan_bottom = from_bottom;
    t_leaving->asan_size = from_size;
  }
#else
  (void)self;
#endif
}

}  // namespace

void ctx_init_fiber(Ctx* c, size_t stack_bytes, void (*entry)(), unsigned n) {
  const size_t pg = page_size();
  stack_bytes = (stack_bytes + pg - 1) / pg * pg;
  void* m = mmap(nullptr, stack_bytes + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) die("cannot map a fiber stack");
  if (mprotect(m, pg, PROT_NONE) != 0) die("cannot protect a fiber stack's guard page");  // overflow: SIGSEGV
  c->stack = static_cast<char*>(m) + pg;
  c->stack_bytes = stack_bytes;
  c->asan_bottom = c->stack;
  c->asan_size = stack_bytes;
  c->top_skew = (size_t(n) * 3 * 64) % pg;  // 3: odd, so consecutive fibers spread over all sets
  make(c, entry);
}

void ctx_restart(Ctx* c, void (*entry)()) {
#if CUEMU_ASAN
  // The abandoned frames' redzones are still poisoned; the next run starts from the top.
  ASAN_UNPOISON_MEMORY_REGION(c->stack, c->stack_bytes);
#endif
  make(c, entry);
}

void ctx_free_fiber(Ctx* c) {
  if (c->stack == nullptr) return;
#if CUEMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(c->stack, c->stack_bytes);
#endif
  const size_t pg = page_size();
  munmap(c->stack - pg, c->stack_bytes + pg);
  c->stack = nullptr;
}

void ctx_switch(Ctx* from, Ctx* to) {
  ++t_switches;
  t_leaving = from;
#if CUEMU_ASAN
  __sanitizer_start_switch_fiber(&from->asan_fake, to->asan_bottom, to->asan_size);
#endif
#if defined(__x86_64__)
  if (!kUcontext)
    cuemu_swap_stacks(&from->sp, to->sp);
  else
#endif
  if (swapcontext(&from->uc, &to->uc) != 0) die("swapcontext failed");
  finish(from);
}

void ctx_landed(Ctx* self) { finish(self); }

unsigned long long ctx_switch_count() { return t_switches; }

const char* ctx_switch_kind() { return kUcontext ? "ucontext" : "x86-64"; }

}  // namespace cuemu::detail
