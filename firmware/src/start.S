/* Entry at 0x40000 (the CPU's reset vector): stack, trap vector, zeroed .bss, fw_main. */
    .option arch, +zicsr            /* csrw/csrr: the M-mode CSRs (VexRiscv has them) */
    .section .text.start, "ax", @progbits
    .globl _start
_start:
    la      sp, _stack_top
    la      t0, trap_entry
    csrw    mtvec, t0
    la      t0, _bss_start
    la      t1, _bss_end
1:  bgeu    t0, t1, 2f
    sw      zero, 0(t0)
    addi    t0, t0, 4
    j       1b
2:  call    fw_main
3:  j       3b                      /* fw_main never returns */

/* A trap (no interrupts are enabled: an illegal instruction, a misaligned or failed access,
   ebreak/ecall): a fresh stack and fw_trap(mcause, mepc), which reports it, ends the command
   in progress and goes back to the command loop. */
    .text
    .balign 4
    .globl trap_entry
trap_entry:
    la      sp, _stack_top
    csrr    a0, mcause
    csrr    a1, mepc
    call    fw_trap
4:  j       4b
