/* The exerciser script interpreter: docs/firmware.md, "Binary format", "Result records" and
   "What the firmware checks before running". */
#ifndef TLPX_FW_SCRIPT_H
#define TLPX_FW_SCRIPT_H

#include "types.h"
#include "tlpx_regs.h"

/* Format limits (tlpx_script::image) */
#define IMG_MAGIC        0x53584C54u /* "TLXS" as bytes */
#define IMG_VERSION      1u
#define IMG_HEADER_LEN   48u
#define IMG_INSN_LEN     24u
#define IMG_DMA_LEN      TLPX_GENERATOR_DESC_LEN /* generated: tlpx_regs.h */
#define IMG_EVENT_LEN    8u
#define IMG_SLOT_LEN     8u
#define IMG_MAX_INSNS    16384u
#define IMG_MAX_DMAS     1024u
#define IMG_MAX_EVENTS   32u
#define IMG_MAX_SLOTS    4096u
#define IMG_MAX_DEPTH    8u
#define IMG_MAX_STRINGS  65536u
#define IMG_NO_SLOT      0xFFFFu

#define OP_END        0x00u
#define OP_DMA        0x01u
#define OP_POKE       0x02u
#define OP_PEEK       0x03u
#define OP_WAIT       0x04u
#define OP_WAIT_EVENT 0x05u
#define OP_LOOP       0x06u
#define OP_END_LOOP   0x07u
#define OP_MARK       0x08u
#define OP_CHECK      0x09u

#define KIND_END   0u
#define KIND_MARK  1u
#define KIND_PEEK  2u
#define KIND_CHECK 3u
#define KIND_DMA   4u
#define KIND_EVENT 5u

#define RECORD_LEN 32u

/* How long a stopped generator may take to drain its outstanding reads (card cycles): the
   host waits 5 ms after a stop, as here (at 125 MHz; computed from ident.clock_hz). */
#define DMA_DRAIN_MS 5u

/* Runs the RUN_SCRIPT command from the mailbox's args; returns its status (also in the end
   record and MBOX_STATUS). */
u32 script_run_command(void);

/* Called by the trap handler: if a script is running, ends it with STOPPED (the end record is
   written only if the ring has room: the trap handler cannot wait). */
void script_trap_cleanup(void);

const char *status_name(u32 status);

#endif
