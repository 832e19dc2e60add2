//! Names a script may use: the card's registers (tlpx-regs, as `region.name`) and events.

use tlpx_regs::{generator, irq_timer, rt_loop, rule30, rule30_batch, spy, Field, Register};

/// A register by its script name, `region.name` (e.g. `spy.control`).
pub fn register(name: &str) -> Option<&'static Register> {
    let (region, reg) = name.split_once('.')?;
    tlpx_regs::ALL.iter().find(|r| r.region == region && r.name == reg)
}

/// The register at BAR0 `offset`, for the disassembler.
pub fn register_at(offset: u64) -> Option<&'static Register> {
    tlpx_regs::ALL.iter().find(|r| r.offset == offset)
}

/// Every register's script name.
pub fn register_names() -> impl Iterator<Item = String> {
    tlpx_regs::ALL.iter().map(|r| format!("{}.{}", r.region, r.name))
}

/// The 32-bit words a `poke`/`peek` moves for a register: 1 up to 32 bits, 2 up to 64.
pub fn words(reg: &Register) -> Option<u8> {
    match reg.size_bits {
        0..=32 => Some(1),
        33..=64 => Some(2),
        _ => None,
    }
}

/// A named event: a one-bit field of a status register that reads 1 when the event happened.
pub struct NamedEvent {
    pub name: &'static str,
    pub register: Register,
    pub field: Field,
    pub meaning: &'static str,
}

/// The named events of `wait event`.
pub fn events() -> [NamedEvent; 9] {
    [
        NamedEvent {
            name: "generator.done",
            register: generator::STATUS,
            field: generator::status::DONE,
            meaning: "the generator's run ended",
        },
        NamedEvent {
            name: "irq_timer.fire",
            register: irq_timer::STATUS,
            field: irq_timer::status::PENDING,
            meaning: "the interrupt timer fired (a fire waits for ack_user)",
        },
        NamedEvent {
            name: "irq_timer.done",
            register: irq_timer::STATUS,
            field: irq_timer::status::DONE,
            meaning: "the interrupt timer made its count of fires",
        },
        NamedEvent {
            name: "rt_loop.done",
            register: rt_loop::STATUS,
            field: rt_loop::status::DONE,
            meaning: "the real-time loop made its iterations",
        },
        NamedEvent {
            name: "rt_loop.waiting",
            register: rt_loop::STATUS,
            field: rt_loop::status::WAITING,
            meaning: "the real-time loop waits for the host's result",
        },
        NamedEvent { name: "spy.triggered", register: spy::STATUS, field: spy::status::TRIGGERED, meaning: "the spy's trigger matched" },
        NamedEvent {
            name: "spy.stopped",
            register: spy::STATUS,
            field: spy::status::STOPPED,
            meaning: "the spy stopped after its post-trigger count",
        },
        NamedEvent {
            name: "rule30.complete",
            register: rule30::STATUS,
            field: rule30::status::COMPLETE,
            meaning: "the rule-30 accelerator completed an operation",
        },
        NamedEvent {
            name: "rule30_batch.done",
            register: rule30_batch::STATUS,
            field: rule30_batch::status::DONE,
            meaning: "the rule-30 batch engine finished its batch",
        },
    ]
}

/// The name of the event at (offset, bit), for the disassembler.
pub fn event_name(offset: u32, bit: u8) -> String {
    for e in events() {
        if e.register.offset == u64::from(offset) && e.field.shift == u32::from(bit) {
            return e.name.to_string();
        }
    }
    match register_at(u64::from(offset)) {
        Some(r) => format!("{}.{}[{bit}]", r.region, r.name),
        None => format!("0x{offset:x}[{bit}]"),
    }
}

/// Levenshtein distance (small strings only).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest candidate to `word`, if it is close enough to be a likely typo.
pub fn suggest<I, S>(word: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let word_l = word.to_ascii_lowercase();
    let mut best: Option<(usize, String)> = None;
    for c in candidates {
        let c = c.as_ref();
        let d = distance(&word_l, &c.to_ascii_lowercase());
        // the same field in another region (generator.contrl -> generator.control) or a typo
        if best.as_ref().is_none_or(|(bd, _)| d < *bd) {
            best = Some((d, c.to_string()));
        }
    }
    let limit = (word.chars().count() / 3).clamp(1, 4);
    best.filter(|(d, _)| *d <= limit).map(|(_, c)| c)
}

/// " did you mean "x"?" or "".
pub fn did_you_mean<I, S>(word: &str, candidates: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    match suggest(word, candidates) {
        Some(s) => format!(": did you mean \"{s}\"?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_resolve_and_typos_are_suggested() {
        assert_eq!(register("spy.control").map(|r| r.offset), Some(0x3800));
        assert_eq!(register("pio.read_delay").map(|r| r.offset), Some(0x3004));
        assert!(register("spy.contrl").is_none());
        assert_eq!(suggest("spy.contrl", register_names()), Some("spy.control".to_string()));
        assert_eq!(suggest("zzzzzzzzzz", register_names()), None);
        assert_eq!(event_name(0x2848, 1), "generator.done");
        assert_eq!(event_name(0x3800, 2), "spy.control[2]");
    }
}
