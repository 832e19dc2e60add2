#include <stdarg.h>
#include "types.h"

#include "console.h"
#include "hw.h"
#include "mailbox.h"

/* Set after a drop: while the FIFO stays full, further characters are dropped at once
   instead of each waiting CONSOLE_TX_WAIT_CYCLES (nobody is reading). */
static int dropping;

void console_putc(char c)
{
    if (rd32(TLPX_UART_TXFULL) & 1u) {
        if (dropping) {
            mbox_wr(MBOX_DROPPED, mbox_rd(MBOX_DROPPED) + 1u);
            return;
        }
        u32 t0 = rd32(TLPX_TIMEBASE_CYCLES_LO);
        while (rd32(TLPX_UART_TXFULL) & 1u) {
            if (rd32(TLPX_TIMEBASE_CYCLES_LO) - t0 > CONSOLE_TX_WAIT_CYCLES) {
                dropping = 1;
                mbox_wr(MBOX_DROPPED, mbox_rd(MBOX_DROPPED) + 1u);
                return;
            }
        }
    }
    dropping = 0;
    wr32(TLPX_UART_RXTX, (u8)c);
}

void console_puts(const char *s)
{
    while (*s)
        console_putc(*s++);
}

static void put_unsigned(u64 v, unsigned base, int width, char pad, int upper)
{
    char buf[24];
    int n = 0;
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    if (base == 16 || v <= 0xFFFFFFFFu) {
        /* 32-bit (or shift-only) conversion: no 64-bit division helper needed */
        if (base == 16) {
            do {
                buf[n++] = digits[v & 0xFu];
                v >>= 4;
            } while (v);
        } else {
            u32 w = (u32)v;
            do {
                buf[n++] = digits[w % 10u];
                w /= 10u;
            } while (w);
        }
    } else {
        do {
            buf[n++] = digits[v % 10u];
            v /= 10u;
        } while (v);
    }
    while (n < width && n < (int)sizeof buf)
        buf[n++] = pad;
    while (n)
        console_putc(buf[--n]);
}

void console_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            console_putc(*p);
            continue;
        }
        p++;
        char pad = ' ';
        int width = 0, longs = 0;
        if (*p == '0') {
            pad = '0';
            p++;
        }
        while (*p >= '0' && *p <= '9')
            width = width * 10 + (*p++ - '0');
        while (*p == 'l') {
            longs++;
            p++;
        }
        switch (*p) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            int len = 0;
            while (s[len])
                len++;
            for (; len < width; len++)
                console_putc(' ');
            console_puts(s);
            break;
        }
        case 'c':
            console_putc((char)va_arg(ap, int));
            break;
        case 'u':
        case 'x':
        case 'X': {
            u64 v = longs >= 2 ? va_arg(ap, unsigned long long) : (longs ? va_arg(ap, unsigned long) : va_arg(ap, unsigned));
            put_unsigned(v, *p == 'u' ? 10u : 16u, width, pad, *p == 'X');
            break;
        }
        case 'd': {
            i64 v = longs >= 2 ? va_arg(ap, long long) : (longs ? va_arg(ap, long) : va_arg(ap, int));
            if (v < 0) {
                console_putc('-');
                put_unsigned((u64)0 - (u64)v, 10u, width ? width - 1 : 0, pad, 0);
            } else {
                put_unsigned((u64)v, 10u, width, pad, 0);
            }
            break;
        }
        case '%':
            console_putc('%');
            break;
        case '\0':
            p--; /* a trailing '%': stop at the terminator */
            break;
        default:
            console_putc('%');
            console_putc(*p);
            break;
        }
    }
    va_end(ap);
}
