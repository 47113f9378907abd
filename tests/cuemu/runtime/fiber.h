// tests/cuemu/runtime/fiber.h: user-level contexts for the emulator's CUDA threads.
//
// A Ctx is a saved stack pointer and registers. The thread's own stack is the "main"
// context (no stack of ours); a fiber has an mmap'd stack with a PROT_NONE guard page
// below it, and starts at an entry function on its first switch-in. Two ways to switch:
//   x86-64    a few instructions (fiber.cpp): push the callee-saved registers, swap stack
//             pointers, pop. What a function call may clobber the compiler has already
//             saved, so that is the whole context.
//   ucontext  glibc's swapcontext, the portable way; it also saves the signal mask, a
//             system call per switch (about 20 times the cost: the emulated op tests take
//             several times longer). Used off x86-64, or with RINGZERO_CUEMU_SWAPCONTEXT=1.
// Under AddressSanitizer every switch is announced (__sanitizer_*_switch_fiber), so ASan
// follows the stack that is running.
#pragma once

#include <ucontext.h>

#include <cstddef>

namespace cuemu::detail {

struct Ctx {
  ucontext_t uc;          // the ucontext way
  void* sp = nullptr;     // the x86-64 way: the saved stack pointer
  char* stack = nullptr;  // lowest usable byte; null for a thread's main context
  size_t stack_bytes = 0;
  size_t top_skew = 0;    // bytes left unused at the top (see ctx_init_fiber)
  void* asan_fake = nullptr;                 // ASan's fake stack while switched away
  const void* asan_bottom = nullptr;         // the stack ASan is told about on switching here
  size_t asan_size = 0;
};

// A fiber context with its own stack, whose first switch-in calls entry(). The n-th fiber
// of a thread starts its stack n cache lines (mod a page) below the top: page-aligned stack
// tops would all fall in the same few cache sets, and every switch would miss.
void ctx_init_fiber(Ctx* c, size_t stack_bytes, void (*entry)(), unsigned n);
// Makes the next switch-in start entry() afresh (the fiber was abandoned mid-kernel).
void ctx_restart(Ctx* c, void (*entry)());
void ctx_free_fiber(Ctx* c);
// Saves the running context into `from` and resumes `to`; returns when something switches
// back to `from`.
void ctx_switch(Ctx* from, Ctx* to);
// The first thing a fiber's entry function calls (tells ASan the switch completed).
void ctx_landed(Ctx* self);
// Context switches made by this thread so far (for the runtime's own tests and reports).
unsigned long long ctx_switch_count();
// "x86-64" or "ucontext": how this process switches.
const char* ctx_switch_kind();

}  // namespace cuemu::detail
