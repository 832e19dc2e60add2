/*
 * tlpx_pci: a small, layout-independent C interface to pciutils' libpci for tlpx.
 *
 * Why a shim: `struct pci_access` and `struct pci_dev` change layout between pciutils
 * releases, `pci_lookup_name` is variadic, and libpci reports fatal errors by calling
 * `access->error`, which by default prints and exit()s the process. Compiled against the
 * libpci headers of the build machine, this file is the only code that touches those
 * structures; Rust sees only the functions and the fixed struct below.
 *
 * Error model: every entry point that calls into libpci arms a setjmp() target first. The
 * error callback installed on the access handle formats the message into the handle and
 * longjmp()s back to that target, so the entry point returns an error code instead of the
 * process exiting. The jump never crosses a Rust frame: setjmp and longjmp both happen
 * inside one call from Rust into this file. Warnings are collected in the handle.
 *
 * A handle is used by one thread at a time (the callback finds its handle through a
 * thread-local pointer, since libpci's callbacks carry no context argument).
 */
#ifndef TLPX_PCI_H
#define TLPX_PCI_H

#include <stddef.h>
#include <stdint.h>

/* Bump when the layout of struct tlpx_pci_info or a signature changes (checked by Rust). */
#define TLPX_PCI_SHIM_ABI 1

struct tlpx_pci;

/* What libpci knows about one function; fixed layout mirrored by #[repr(C)] in Rust. */
struct tlpx_pci_info {
  uint32_t domain;            /* PCI domain (segment); may exceed 16 bits on VMD hosts */
  uint8_t bus;                /* bus number */
  uint8_t dev;                /* device number, 0..31 */
  uint8_t func;               /* function number, 0..7 */
  uint8_t revision;           /* revision id (config 0x08) */
  uint16_t vendor_id;         /* vendor id (config 0x00) */
  uint16_t device_id;         /* device id (config 0x02) */
  uint32_t class_code;        /* 24-bit class code: base << 16 | sub << 8 | prog-if */
  uint16_t subsys_vendor_id;  /* subsystem vendor id, 0 if none */
  uint16_t subsys_id;         /* subsystem id, 0 if none */
};

/* Kinds of name for tlpx_pci_lookup(). */
enum tlpx_pci_name_kind {
  TLPX_PCI_NAME_VENDOR = 1,   /* a = vendor id */
  TLPX_PCI_NAME_DEVICE = 2,   /* a = vendor id, b = device id */
  TLPX_PCI_NAME_CLASS = 3,    /* a = base class << 8 | subclass */
};

int tlpx_pci_shim_abi(void);

/* Opens libpci: the default (auto-detected, sysfs on Linux) access method when dump_path is
 * NULL, else the "dump" method reading dump_path. Returns NULL on failure with a message in
 * err (always NUL-terminated when errlen > 0). */
struct tlpx_pci *tlpx_pci_open(const char *dump_path, char *err, size_t errlen);

/* Scans the bus. Returns the number of functions found, or -1 (see tlpx_pci_error). */
int tlpx_pci_scan(struct tlpx_pci *h);

/* Identity of function `index` (0 .. count-1). Returns 0, or -1 on error. */
int tlpx_pci_info(struct tlpx_pci *h, int index, struct tlpx_pci_info *out);

/* Reads config space of function `index` from offset 0 into buf, trying 4096, 256, 128 and
 * 64 bytes (whatever fits in buflen) until libpci can deliver that much. Returns the number
 * of bytes read, 0 if not even 64 bytes were readable, or -1 on error. */
int tlpx_pci_read_config(struct tlpx_pci *h, int index, uint8_t *buf, int buflen);

/* Looks a name up in the ID database (pci.ids / udev hwdb). Returns 1 with the name in buf,
 * 0 if the database has no such entry, or -1 on error. */
int tlpx_pci_lookup(struct tlpx_pci *h, int kind, unsigned a, unsigned b, char *buf, int buflen);

/* Message of the last error (empty if none). Valid until the next call on h. */
const char *tlpx_pci_error(const struct tlpx_pci *h);

/* Warnings libpci emitted so far, one per line (empty if none). */
const char *tlpx_pci_warnings(const struct tlpx_pci *h);

/* Releases libpci and the handle. NULL is allowed. */
void tlpx_pci_close(struct tlpx_pci *h);

#endif
