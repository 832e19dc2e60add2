//! Human-readable views of a [`Program`]: a one-paragraph summary and a full listing.

use std::fmt::Write;

use crate::image::{DmaDescriptor, Insn, Program, SlotKind};
use crate::names;

fn reg_name(offset: u32) -> String {
    match names::register_at(u64::from(offset)) {
        Some(r) => format!("{}.{} (0x{offset:x})", r.region, r.name),
        None => format!("0x{offset:x}"),
    }
}

fn slot_ref(p: &Program, slot: u16) -> String {
    match p.slots.get(usize::from(slot)) {
        Some(s) => format!("#{slot} \"{}\"", s.name),
        None => format!("#{slot}"),
    }
}

fn events_of(p: &Program, mask: u32) -> String {
    let mut out = Vec::new();
    for (i, e) in p.events.iter().enumerate() {
        if mask & (1 << i) != 0 {
            out.push(names::event_name(e.offset, e.bit));
        }
    }
    out.join(" | ")
}

/// The generator run of a descriptor, in script words.
pub fn describe_dma(d: &DmaDescriptor) -> String {
    use tlpx_regs::generator::config as c;
    let cfg = u64::from(d.config);
    let op = ["read", "write", "readwrite", "writeread"][(c::OPERATION.get(cfg) & 3) as usize];
    let address = ["sequential", "fixed", "random", "3?"][(c::ADDRESS_PATTERN.get(cfg) & 3) as usize];
    let pattern = if c::DATA_PATTERN.get(cfg) == 1 { "prbs" } else { "counter" };
    let onoff = |f: tlpx_regs::Field| if f.get(cfg) == 1 { "on" } else { "off" };
    format!(
        "{op} size={} count={} duration={} request={} payload={} idle={} outstanding={} address={address} window={} offset={} base={} \
         pattern={pattern} seed={} check={} addr64={} relaxed={} nosnoop={} flush={} timeout={} cycles",
        d.transfer_size,
        d.count,
        d.duration,
        1u64 << d.request_size_log2.min(63),
        1u64 << d.payload_size_log2.min(63),
        d.idle_cycles,
        d.max_outstanding,
        u64::from(d.window_mask) + 1,
        d.offset,
        d.base_offset,
        d.seed,
        onoff(c::CHECK_DATA),
        onoff(c::ADDR64),
        onoff(c::RELAXED_ORDERING),
        onoff(c::NO_SNOOP),
        onoff(c::FLUSH),
        d.timeout,
    )
}

/// One paragraph: what the program holds and needs.
pub fn summary(p: &Program) -> String {
    let count = |k: SlotKind| p.slots.iter().filter(|s| s.kind == k).count();
    let dma_insns = p.insns.iter().filter(|i| matches!(i, Insn::Dma { .. })).count();
    format!(
        "{} instructions ({} bytes of image), {} DMA run(s) with {} distinct descriptor(s), {} event(s), {} result slot(s) \
         ({} mark, {} peek, {} check, {} dma, {} event); loops nest {} deep; host buffer {} bytes; clock {} Hz; register map 0x{:08x}",
        p.insns.len(),
        p.encode().len(),
        dma_insns,
        p.dmas.len(),
        p.events.len(),
        p.slots.len(),
        count(SlotKind::Mark),
        count(SlotKind::Peek),
        count(SlotKind::Check),
        count(SlotKind::Dma),
        count(SlotKind::Event),
        p.max_loop_depth,
        p.buffer_len,
        p.clock_hz,
        p.map_hash,
    )
}

/// The full listing: header, instructions, descriptors, events, result slots.
pub fn disassemble(p: &Program) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "; {}", summary(p));
    let mut depth = 0usize;
    for (i, insn) in p.insns.iter().enumerate() {
        if matches!(insn, Insn::EndLoop { .. }) {
            depth = depth.saturating_sub(1);
        }
        let indent = "  ".repeat(depth);
        let text = match *insn {
            Insn::End => "end".to_string(),
            Insn::Dma { desc, slot, nowait, limit_cycles } => {
                let mut t = format!("dma         #{desc}");
                if nowait {
                    t.push_str(" nowait");
                } else {
                    let _ = write!(t, " limit {limit_cycles} cycles");
                }
                if let Some(s) = slot {
                    let _ = write!(t, " -> {}", slot_ref(p, s));
                }
                t
            }
            Insn::Poke { offset, words, value } => format!("poke        {} x{words} = 0x{value:x}", reg_name(offset)),
            Insn::Peek { offset, words, slot } => format!("peek        {} x{words} -> {}", reg_name(offset), slot_ref(p, slot)),
            Insn::Wait { cycles } => format!("wait        {cycles} cycles"),
            Insn::WaitEvent { mask, timeout_cycles, slot } => {
                let mut t = format!("wait event  {} (mask 0x{mask:x}) timeout {timeout_cycles} cycles", events_of(p, mask));
                if let Some(s) = slot {
                    let _ = write!(t, " -> {}", slot_ref(p, s));
                }
                t
            }
            Insn::Loop { count } => format!("loop        {count}"),
            Insn::EndLoop { target } => format!("endloop     -> {target:04}"),
            Insn::Mark { slot } => format!("mark        {}", slot_ref(p, slot)),
            Insn::Check { op, stop, slot, source, constant, mask } => {
                let m = if mask == u64::MAX { String::new() } else { format!(" & 0x{mask:x}") };
                format!(
                    "{:<12}{}{m} {} 0x{constant:x} -> {}",
                    if stop { "assert" } else { "compare" },
                    slot_ref(p, source),
                    op.symbol(),
                    slot_ref(p, slot)
                )
            }
        };
        let _ = writeln!(o, "{i:04}  {indent}{text}");
        if matches!(insn, Insn::Loop { .. }) {
            depth += 1;
        }
    }
    for (i, d) in p.dmas.iter().enumerate() {
        let _ = writeln!(o, "dma #{i}: {}", describe_dma(d));
    }
    for (i, e) in p.events.iter().enumerate() {
        let _ = writeln!(o, "event #{i}: {} (0x{:x} bit {})", names::event_name(e.offset, e.bit), e.offset, e.bit);
    }
    for (i, s) in p.slots.iter().enumerate() {
        let _ = writeln!(o, "slot #{i}: {} \"{}\" (line {})", s.kind.name(), s.name, s.line);
    }
    o
}
