/* The console: LiteX's crossover UART (the host reads it with `tlpx fw console`).
   Never blocks for long: a character that finds the transmit FIFO full for
   CONSOLE_TX_WAIT_CYCLES is dropped and counted in the mailbox (MBOX_DROPPED). */
#ifndef TLPX_FW_CONSOLE_H
#define TLPX_FW_CONSOLE_H

#include "types.h"

#define CONSOLE_TX_WAIT_CYCLES 2000u /* 16 us at 125 MHz */

void console_putc(char c);
void console_puts(const char *s);
/* A tiny printf: %s %c %u %d %x %X %%, with an optional 0 flag and width (%08x), and the
   l / ll length modifiers (%lu, %llu, %llx: 64-bit). No floating point. */
void console_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
