/* The mailbox: 256 bytes of SRAM at 0x47F00 shared with the host (u32 words, little-endian).
   The host zeroes it before it starts the CPU; the layout is a contract with the host side
   (tlpx fw / tlpx script run): keep it exact. See firmware/README.md. */
#ifndef TLPX_FW_MAILBOX_H
#define TLPX_FW_MAILBOX_H

#define MBOX_BASE          0x47F00u
#define MBOX_SIZE          0x100u

#define MBOX_MAGIC         0x00u /* fw: MBOX_MAGIC_VALUE once ready for commands */
#define MBOX_VERSION       0x04u /* fw: major << 16 | minor */
#define MBOX_STATE         0x08u /* fw: MBOX_STATE_* */
#define MBOX_HEARTBEAT     0x0Cu /* fw: +1 about every ms of card time while idle */
#define MBOX_CMD_SEQ       0x10u /* host: cmd_seq + 1 after filling command and args */
#define MBOX_COMMAND       0x14u /* host: MBOX_CMD_* */
#define MBOX_ABORT         0x18u /* host: nonzero stops a running script (STOPPED); fw clears it */
#define MBOX_RESERVED      0x1Cu /* 0 */
#define MBOX_ARG(i)        (0x20u + 4u * (i)) /* host: args[0..8] */
#define MBOX_DONE_SEQ      0x40u /* fw: = cmd_seq when the command finished */
#define MBOX_STATUS        0x44u /* fw: status of the last command */
#define MBOX_RECORDS       0x48u /* fw: records written by the current/last command */
#define MBOX_CONSUMED      0x4Cu /* host: records consumed (fw zeroes it when a RUN_SCRIPT starts) */
#define MBOX_DROPPED       0x50u /* fw: console characters dropped (txfull) */
#define MBOX_INSNS         0x54u /* fw: instructions executed by the current/last script (low 32 bits) */
#define MBOX_PC            0x58u /* fw: pc of the current/last instruction */

#define MBOX_MAGIC_VALUE   0x57464C54u /* "TLFW" as bytes */

#define MBOX_STATE_BOOTING 0u
#define MBOX_STATE_READY   1u
#define MBOX_STATE_BUSY    2u

#define MBOX_CMD_RUN_SCRIPT 1u
#define MBOX_CMD_SELFTEST   2u

/* RUN_SCRIPT arguments */
#define MBOX_ARG_IMAGE_ADDR   0u /* 0x48000 */
#define MBOX_ARG_IMAGE_LEN    1u /* bytes */
#define MBOX_ARG_BUF_LO       2u /* host buffer bus address, low word */
#define MBOX_ARG_BUF_HI       3u /* high word */
#define MBOX_ARG_BUF_BYTES    4u /* host buffer bytes */
#define MBOX_ARG_RING_ADDR    5u /* 0x4C000 */
#define MBOX_ARG_RING_RECORDS 6u /* 512 */

/* Statuses (MBOX_STATUS): the script statuses of docs/firmware.md, plus two for commands that
   are not scripts. */
#define ST_OK               0u
#define ST_COMPARE_FAILED   1u
#define ST_ASSERT_FAILED    2u
#define ST_EVENT_TIMEOUT    3u
#define ST_DMA_LIMIT        4u
#define ST_BAD_IMAGE        5u
#define ST_BUFFER_TOO_SMALL 6u
#define ST_STOPPED          7u
#define ST_SELFTEST_FAILED  0x100u /* SELFTEST: the self-test found a fault */
#define ST_UNKNOWN_COMMAND  0x101u /* an unknown command number */

#include "hw.h"

static inline u32 mbox_rd(u32 off)
{
    return rd32(MBOX_BASE + off);
}

static inline void mbox_wr(u32 off, u32 v)
{
    wr32(MBOX_BASE + off, v);
}

#endif
