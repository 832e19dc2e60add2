/*
 * tlpx_pci: layout-independent shim over pciutils' libpci. See tlpx_pci.h for the why.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later (links libpci, which is GPL-2.0-or-later)
 */
#include "tlpx_pci.h"

#include <pci/pci.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PCI_NONRET
#define PCI_NONRET
#endif

/* Handle ------------------------------------------------------------------------------ */

struct tlpx_pci {
  struct pci_access *acc;   /* libpci access object, owned */
  jmp_buf *jump;            /* armed setjmp target while inside a guarded call, else NULL */
  struct pci_dev **devs;    /* functions found by the last scan, in libpci's list order */
  int ndevs;                /* number of entries in devs */
  char error[1024];         /* last error message */
  char warnings[4096];      /* warnings, newline-separated, truncated when full */
  size_t warnings_len;      /* bytes used in warnings (without the NUL) */
};

/* libpci's callbacks carry no context argument: the handle of the guarded call in progress
 * on this thread. */
static _Thread_local struct tlpx_pci *tls_current;

/* Callbacks --------------------------------------------------------------------------- */

static void PCI_NONRET
tlpx_on_error(char *fmt, ...)
{
  struct tlpx_pci *h = tls_current;
  va_list args;

  va_start(args, fmt);
  if (h)
    vsnprintf(h->error, sizeof(h->error), fmt, args);
  else
    vfprintf(stderr, fmt, args);
  va_end(args);
  if (h && h->jump)
    longjmp(*h->jump, 1);
  /* Unreachable by construction: every call into libpci is guarded. libpci cannot go on
   * after an error, and returning from this callback is undefined, so stop loudly. */
  fputs("\ntlpx_pci: libpci error outside a guarded call\n", stderr);
  abort();
}

static void
tlpx_on_warning(char *fmt, ...)
{
  struct tlpx_pci *h = tls_current;
  char line[512];
  va_list args;
  size_t n, room;

  if (!h)
    return;
  va_start(args, fmt);
  vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  n = strlen(line);
  while (n && line[n - 1] == '\n')
    line[--n] = 0;
  room = sizeof(h->warnings) - h->warnings_len;
  if (room <= n + 1)
    return; /* full: keep the first warnings, they usually explain the later ones */
  memcpy(h->warnings + h->warnings_len, line, n);
  h->warnings[h->warnings_len + n] = '\n';
  h->warnings_len += n + 1;
  h->warnings[h->warnings_len] = 0;
}

static void
tlpx_on_debug(char *fmt, ...)
{
  (void) fmt;
}

/* Guards: arm a setjmp target that tlpx_on_error jumps to. At most one per function. After
 * the longjmp, locals changed since TLPX_ARM are indeterminate (C11 7.13.2.1p3), so the
 * failure path reads none of them; the longer calls (pci_init, pci_scan_bus) sit in small
 * functions of their own so that no caller's local lives across the setjmp. */
#define TLPX_ARM(h, on_fail)                \
  jmp_buf tlpx_jb_;                         \
  if (setjmp(tlpx_jb_))                     \
    {                                       \
      (h)->jump = NULL;                     \
      tls_current = NULL;                   \
      on_fail;                              \
    }                                       \
  (h)->jump = &tlpx_jb_;                    \
  tls_current = (h)

#define TLPX_DISARM(h) ((h)->jump = NULL, tls_current = NULL)

/* Entry points ------------------------------------------------------------------------ */

int
tlpx_pci_shim_abi(void)
{
  return TLPX_PCI_SHIM_ABI;
}

static void
copy_str(char *dst, size_t dstlen, const char *src)
{
  if (!dstlen)
    return;
  snprintf(dst, dstlen, "%s", src);
}

/* Releases the access object; an error during clean-up leaks it rather than exiting. */
static void
release_access(struct tlpx_pci *h)
{
  struct pci_access *acc = h->acc;

  h->acc = NULL;
  free(h->devs);
  h->devs = NULL;
  h->ndevs = 0;
  if (!acc)
    return;
  TLPX_ARM(h, return);
  pci_cleanup(acc);
  TLPX_DISARM(h);
}

static int
init_access(struct tlpx_pci *h)
{
  TLPX_ARM(h, return -1);
  pci_init(h->acc);
  TLPX_DISARM(h);
  return 0;
}

struct tlpx_pci *
tlpx_pci_open(const char *dump_path, char *err, size_t errlen)
{
  struct tlpx_pci *h;

  if (errlen)
    err[0] = 0;
  h = calloc(1, sizeof(*h));
  if (!h)
    {
      copy_str(err, errlen, "out of memory");
      return NULL;
    }
  /* pci_alloc() cannot report through our callbacks yet (they are installed below); it only
   * fails on out-of-memory. */
  h->acc = pci_alloc();
  if (!h->acc)
    {
      copy_str(err, errlen, "pci_alloc failed");
      free(h);
      return NULL;
    }
  h->acc->error = tlpx_on_error;
  h->acc->warning = tlpx_on_warning;
  h->acc->debug = tlpx_on_debug;

  if (dump_path)
    {
      h->acc->method = PCI_ACCESS_DUMP;
      /* pci_set_param copies the value. */
      if (pci_set_param(h->acc, "dump.name", (char *) dump_path) != 0)
        {
          copy_str(err, errlen, "this libpci was built without the dump access method");
          release_access(h);
          free(h);
          return NULL;
        }
    }
  else
    h->acc->method = PCI_ACCESS_AUTO;

  if (init_access(h) != 0)
    {
      copy_str(err, errlen, h->error);
      release_access(h);
      free(h);
      return NULL;
    }
  return h;
}

static int
scan_bus(struct tlpx_pci *h)
{
  TLPX_ARM(h, return -1);
  pci_scan_bus(h->acc);
  TLPX_DISARM(h);
  return 0;
}

int
tlpx_pci_scan(struct tlpx_pci *h)
{
  struct pci_dev *d;
  int n = 0, i = 0;

  h->error[0] = 0;
  free(h->devs);
  h->devs = NULL;
  h->ndevs = 0;

  if (scan_bus(h) != 0)
    return -1;
  for (d = h->acc->devices; d; d = d->next)
    n++;
  h->devs = calloc(n ? n : 1, sizeof(*h->devs));
  if (!h->devs)
    {
      copy_str(h->error, sizeof(h->error), "out of memory");
      return -1;
    }
  for (d = h->acc->devices; d; d = d->next)
    h->devs[i++] = d;
  h->ndevs = n;
  return n;
}

static struct pci_dev *
dev_at(struct tlpx_pci *h, int index)
{
  if (index < 0 || index >= h->ndevs)
    {
      snprintf(h->error, sizeof(h->error), "function index %d out of range (0..%d)", index, h->ndevs);
      return NULL;
    }
  return h->devs[index];
}

int
tlpx_pci_info(struct tlpx_pci *h, int index, struct tlpx_pci_info *out)
{
  struct pci_dev *d;
  int flags = PCI_FILL_IDENT | PCI_FILL_CLASS;

  h->error[0] = 0;
  if (!(d = dev_at(h, index)))
    return -1;
#ifdef PCI_FILL_CLASS_EXT
  flags |= PCI_FILL_CLASS_EXT;
#endif
#ifdef PCI_FILL_SUBSYS
  flags |= PCI_FILL_SUBSYS;
#endif

  TLPX_ARM(h, return -1);
  pci_fill_info(d, flags);
  memset(out, 0, sizeof(*out));
  out->domain = (uint32_t) d->domain;
  out->bus = d->bus;
  out->dev = d->dev;
  out->func = d->func;
  out->vendor_id = d->vendor_id;
  out->device_id = d->device_id;
#ifdef PCI_FILL_CLASS_EXT
  out->class_code = (uint32_t) d->device_class << 8 | d->prog_if;
  out->revision = d->rev_id;
#else
  /* Older libpci: prog-if and revision straight from config space (PCI LB 3.0, 6.2.1). */
  out->class_code = (uint32_t) d->device_class << 8 | pci_read_byte(d, PCI_CLASS_PROG);
  out->revision = pci_read_byte(d, PCI_REVISION_ID);
#endif
#ifdef PCI_FILL_SUBSYS
  out->subsys_vendor_id = d->subsys_vendor_id;
  out->subsys_id = d->subsys_id;
#else
  if ((pci_read_byte(d, PCI_HEADER_TYPE) & 0x7f) == PCI_HEADER_TYPE_NORMAL)
    {
      out->subsys_vendor_id = pci_read_word(d, PCI_SUBSYSTEM_VENDOR_ID);
      out->subsys_id = pci_read_word(d, PCI_SUBSYSTEM_ID);
    }
#endif
  TLPX_DISARM(h);
  return 0;
}

int
tlpx_pci_read_config(struct tlpx_pci *h, int index, uint8_t *buf, int buflen)
{
  /* Extended (PCIe) space, conventional space, CardBus header, type 0/1 header: the sysfs
   * config file gives unprivileged readers only the header, and a dump only what it holds. */
  static const int sizes[] = { 4096, 256, 128, 64 };
  struct pci_dev *d;
  volatile int got = 0;
  unsigned i;

  h->error[0] = 0;
  if (!(d = dev_at(h, index)))
    return -1;

  TLPX_ARM(h, return -1);
  for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    if (sizes[i] <= buflen && pci_read_block(d, 0, buf, sizes[i]))
      {
        got = sizes[i];
        break;
      }
  TLPX_DISARM(h);
  return got;
}

int
tlpx_pci_lookup(struct tlpx_pci *h, int kind, unsigned a, unsigned b, char *buf, int buflen)
{
  char *name = NULL;

  h->error[0] = 0;
  if (buflen <= 0)
    return 0;
  buf[0] = 0;

  TLPX_ARM(h, return -1);
  switch (kind)
    {
    case TLPX_PCI_NAME_VENDOR:
      name = pci_lookup_name(h->acc, buf, buflen, PCI_LOOKUP_VENDOR | PCI_LOOKUP_NO_NUMBERS, (int) a);
      break;
    case TLPX_PCI_NAME_DEVICE:
      name = pci_lookup_name(h->acc, buf, buflen, PCI_LOOKUP_DEVICE | PCI_LOOKUP_NO_NUMBERS, (int) a, (int) b);
      break;
    case TLPX_PCI_NAME_CLASS:
      name = pci_lookup_name(h->acc, buf, buflen, PCI_LOOKUP_CLASS | PCI_LOOKUP_NO_NUMBERS, (int) a);
      break;
    default:
      TLPX_DISARM(h);
      snprintf(h->error, sizeof(h->error), "unknown name kind %d", kind);
      return -1;
    }
  TLPX_DISARM(h);

  if (!name)
    return 0;
  if (name != buf)   /* e.g. libpci's own "buffer too small" text */
    copy_str(buf, (size_t) buflen, name);
  return 1;
}

const char *
tlpx_pci_error(const struct tlpx_pci *h)
{
  return h->error;
}

const char *
tlpx_pci_warnings(const struct tlpx_pci *h)
{
  return h->warnings;
}

void
tlpx_pci_close(struct tlpx_pci *h)
{
  if (!h)
    return;
  release_access(h);
  free(h);
}
