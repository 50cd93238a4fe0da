/*
 * The smallest task: exits 0 at once — no C library, so no start-up (the
 * processor's identification, each CPUID a trap out of a virtual machine)
 * whose cost, ~1 ms a start on this VM and moving with the host's load,
 * would bury an init's own ~0.1-0.3 ms. bench/nsinit_ab.py --task exit0
 * builds it (cc -O2 -static -nostdlib).
 */
#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\tmov $60, %eax\n\txor %edi, %edi\n\tsyscall\n");
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n\tmov x8, #93\n\tmov x0, #0\n\tsvc #0\n");
#else
#error "bench/nsinit_exit0.c: x86-64 or arm64 only"
#endif
