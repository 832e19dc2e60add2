//! The driver's user-space ABI: litepcie/software/kernel/litepcie.h of LitePCIe 2024.12, as
//! `#[repr(C)]` structs and ioctl numbers. tests/litepcie_abi.rs compiles a C program against
//! the installed litepcie.h and checks every size, offset and number here against it.

/// `struct litepcie_ioctl_reg`: one 32-bit CSR access at `addr` (a BAR0 offset: CSR_BASE is 0).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Reg {
    pub addr: u32,
    pub val: u32,
    pub is_write: u8,
}

/// `struct litepcie_ioctl_flash` (SPI flash; not built for the tlpx card).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Flash {
    pub tx_len: i32,
    pub tx_data: u64,
    pub rx_data: u64,
}

/// `struct litepcie_ioctl_icap` (FPGA reload; not built for the tlpx card).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Icap {
    pub addr: u8,
    pub data: u32,
}

/// `struct litepcie_ioctl_dma`: the DMA loopback switch.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Dma {
    pub loopback_enable: u8,
}

/// `struct litepcie_ioctl_dma_writer` / `_reader` (same layout): sets the engine's enable
/// (starting or stopping it when it changes) and returns the buffer counts.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DmaEngine {
    pub enable: u8,
    pub hw_count: i64,
    pub sw_count: i64,
}

/// `struct litepcie_ioctl_lock`: advisory ownership of the reader/writer of a channel.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Lock {
    pub dma_reader_request: u8,
    pub dma_writer_request: u8,
    pub dma_reader_release: u8,
    pub dma_writer_release: u8,
    pub dma_reader_status: u8,
    pub dma_writer_status: u8,
}

/// `struct litepcie_ioctl_mmap_dma_info`: where mmap puts the buffers. "tx" are the
/// reader's (host -> card), "rx" the writer's (card -> host).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MmapDmaInfo {
    pub dma_tx_buf_offset: u64,
    pub dma_tx_buf_size: u64,
    pub dma_tx_buf_count: u64,
    pub dma_rx_buf_offset: u64,
    pub dma_rx_buf_size: u64,
    pub dma_rx_buf_count: u64,
}

/// `struct litepcie_ioctl_mmap_dma_update`: the software count after user space consumed
/// (writer) or filled (reader) mmapped buffers.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MmapDmaUpdate {
    pub sw_count: i64,
}

/// `LITEPCIE_IOCTL`, the ioctl type.
pub const IOCTL_TYPE: u8 = b'S';

const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

/// Linux's `_IOC(dir, type, nr, size)` (asm-generic layout: x86, arm, riscv).
pub const fn ioc(dir: u64, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((IOCTL_TYPE as u64) << 8) | nr as u64
}
const fn iowr<T>(nr: u8) -> u64 {
    ioc(IOC_READ | IOC_WRITE, nr, std::mem::size_of::<T>())
}
const fn iow<T>(nr: u8) -> u64 {
    ioc(IOC_WRITE, nr, std::mem::size_of::<T>())
}
const fn ior<T>(nr: u8) -> u64 {
    ioc(IOC_READ, nr, std::mem::size_of::<T>())
}

pub const LITEPCIE_IOCTL_REG: u64 = iowr::<Reg>(0);
pub const LITEPCIE_IOCTL_FLASH: u64 = iowr::<Flash>(1);
pub const LITEPCIE_IOCTL_ICAP: u64 = iowr::<Icap>(2);
pub const LITEPCIE_IOCTL_DMA: u64 = iow::<Dma>(20);
pub const LITEPCIE_IOCTL_DMA_WRITER: u64 = iowr::<DmaEngine>(21);
pub const LITEPCIE_IOCTL_DMA_READER: u64 = iowr::<DmaEngine>(22);
pub const LITEPCIE_IOCTL_MMAP_DMA_INFO: u64 = ior::<MmapDmaInfo>(24);
pub const LITEPCIE_IOCTL_LOCK: u64 = iowr::<Lock>(25);
pub const LITEPCIE_IOCTL_MMAP_DMA_WRITER_UPDATE: u64 = iow::<MmapDmaUpdate>(26);
pub const LITEPCIE_IOCTL_MMAP_DMA_READER_UPDATE: u64 = iow::<MmapDmaUpdate>(27);
