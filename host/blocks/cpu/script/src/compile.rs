//! Script text -> [`Program`]: one statement per line, errors collected line by line.

use std::collections::HashMap;

use tlpx_blocks::generator::GenConfig;
use tlpx_blocks::LinkLimits;
use tlpx_regs::generator::config as gcfg;

use crate::image::{self, CmpOp, DmaDescriptor, Event, Insn, Program, Slot, SlotKind};
use crate::lex::{self, Qty, Tok, Token};
use crate::names;
use crate::{Diagnostic, Options};

/// Statement keywords.
pub const KEYWORDS: [&str; 9] = ["let", "dma", "poke", "peek", "wait", "loop", "mark", "assert", "compare"];
/// DMA operations: the script's word for each of the generator's operations, in [`DMA_OP_VALUES`]' order.
pub const DMA_OPS: [&str; 4] = ["read", "write", "readwrite", "writeread"];
/// The generator's operation (generated from the register map) each word of [`DMA_OPS`] runs.
pub const DMA_OP_VALUES: [gcfg::Operation; 4] =
    [gcfg::Operation::Read, gcfg::Operation::Write, gcfg::Operation::ReadWrite, gcfg::Operation::WriteThenRead];
/// DMA parameters.
pub const DMA_PARAMS: [&str; 19] = [
    "size",
    "count",
    "duration",
    "request",
    "payload",
    "idle",
    "outstanding",
    "address",
    "window",
    "offset",
    "base",
    "pattern",
    "seed",
    "check",
    "addr64",
    "relaxed",
    "nosnoop",
    "flush",
    "timeout",
];
/// DMA parameters outside the generator's registers.
pub const DMA_RUN_PARAMS: [&str; 2] = ["limit", "nowait"];

/// Largest transfer the generator moves (the gateware's, as tlpx-device's generator::MAX_TRANSFER_BYTES).
pub const MAX_TRANSFER_BYTES: u64 = tlpx_regs::constants::GENERATOR_MAX_TRANSFER_BYTES;
/// Reads in flight at most (the generator's tags).
pub const TAGS: u64 = tlpx_regs::constants::GENERATOR_TAGS;
/// Largest window (and base + window): 2 GiB.
pub const MAX_WINDOW: u64 = 1 << 31;

/// Default time a `wait event` waits before the script fails: 1 s of card time.
pub const DEFAULT_EVENT_TIMEOUT_PS: u128 = 1_000_000_000_000;
/// Default time a blocking `dma` may run before the script fails: 1 s of card time.
pub const DEFAULT_DMA_LIMIT_PS: u128 = 1_000_000_000_000;
/// Default completion timeout of the generator's reads: 1 ms (as the host programs it,
/// tlpx_blocks::generator::completion_timeout_cycles).
pub const DEFAULT_COMPLETION_TIMEOUT_PS: u128 = 1_000_000_000;

enum Name {
    Const(Qty),
    Result { slot: u16, kind: SlotKind },
}

struct Frame {
    insn: usize,
    line: usize,
    col: usize,
}

struct Compiler<'a> {
    opts: &'a Options,
    diags: Vec<Diagnostic>,
    insns: Vec<Insn>,
    dmas: Vec<DmaDescriptor>,
    events: Vec<Event>,
    slots: Vec<Slot>,
    names: HashMap<String, (Name, usize)>,
    loops: Vec<Frame>,
    max_depth: usize,
    line: usize,
    limit_reported: bool,
}

type R<T> = Result<T, Diagnostic>;

/// A line's tokens with a cursor.
struct Line<'t> {
    toks: &'t [Token],
    pos: usize,
    /// Column just past the last token (for "expected ... at the end of the line").
    eol: usize,
}

impl<'t> Line<'t> {
    fn peek(&self) -> Option<&'t Token> {
        self.toks.get(self.pos)
    }
    fn next(&mut self) -> Option<&'t Token> {
        let t = self.toks.get(self.pos);
        self.pos += usize::from(t.is_some());
        t
    }
    fn col(&self) -> usize {
        self.peek().map_or(self.eol, |t| t.col)
    }
    fn at_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Token { tok: Tok::Sym(x), .. }) if *x == s)
    }
    fn at_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Token { tok: Tok::Word(x), .. }) if x == w)
    }
}

fn describe(t: Option<&Token>) -> String {
    match t {
        None => "the end of the line".to_string(),
        Some(t) => format!("\"{}\"", t.text()),
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_') && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn cmp_op(s: &str) -> Option<CmpOp> {
    CmpOp::ALL.into_iter().find(|o| o.symbol() == s)
}

/// Compiles a script. All errors found are returned, in line order.
pub fn compile(source: &str, opts: &Options) -> Result<Program, Vec<Diagnostic>> {
    let mut c = Compiler {
        opts,
        diags: Vec::new(),
        insns: Vec::new(),
        dmas: Vec::new(),
        events: Vec::new(),
        slots: Vec::new(),
        names: HashMap::new(),
        loops: Vec::new(),
        max_depth: 0,
        line: 0,
        limit_reported: false,
    };
    if opts.clock_hz == 0 {
        c.diags.push(Diagnostic::new(0, 0, "clock is 0 Hz: give the card's clock (e.g. 125MHz)".to_string()));
        return Err(c.diags);
    }
    for (i, text) in source.lines().enumerate() {
        c.line = i + 1;
        let toks = match lex::tokens(c.line, text.strip_suffix('\r').unwrap_or(text)) {
            Ok(t) => t,
            Err(d) => {
                c.diags.push(d);
                // keep the loop structure when the line was a loop header or a closing brace
                let code = text.split('#').next().unwrap_or("").trim();
                if code.ends_with('{') {
                    c.loops.push(Frame { insn: c.insns.len(), line: c.line, col: 1 });
                    c.insns.push(Insn::Loop { count: 1 });
                } else if code == "}" {
                    c.loops.pop();
                }
                continue;
            }
        };
        if toks.is_empty() {
            continue;
        }
        let eol = toks.last().map_or(1, |t| t.end);
        let mut line = Line { toks: &toks, pos: 0, eol };
        if let Err(d) = c.statement(&mut line) {
            c.diags.push(d);
        }
        c.check_limits();
        if c.diags.len() >= 200 {
            break;
        }
    }
    for f in std::mem::take(&mut c.loops) {
        c.diags.push(Diagnostic::new(f.line, f.col, "loop is never closed: end its body with a line holding only \"}\"".to_string()));
    }
    c.insns.push(Insn::End);
    if !c.diags.is_empty() {
        c.diags.sort_by_key(|d| (d.line, d.col));
        return Err(c.diags);
    }
    let buffer_len = c.dmas.iter().map(DmaDescriptor::buffer_end).max().unwrap_or(0);
    Ok(Program {
        map_hash: tlpx_regs::MAP_HASH,
        clock_hz: opts.clock_hz,
        buffer_len: u32::try_from(buffer_len).unwrap_or(u32::MAX),
        max_loop_depth: c.max_depth as u16,
        insns: c.insns,
        dmas: c.dmas,
        events: c.events,
        slots: c.slots,
    })
}

impl Compiler<'_> {
    fn err<T>(&self, col: usize, msg: String) -> R<T> {
        Err(Diagnostic::new(self.line, col, msg))
    }

    fn check_limits(&mut self) {
        if self.limit_reported {
            return;
        }
        let over = [
            ("instructions", self.insns.len() + 1, image::MAX_INSNS),
            ("DMA runs", self.dmas.len(), image::MAX_DMAS),
            ("results (marks, peeks, checks, named DMA runs and waits)", self.slots.len(), image::MAX_SLOTS),
            ("distinct events", self.events.len(), image::MAX_EVENTS),
        ]
        .into_iter()
        .find(|(_, n, max)| n > max);
        if let Some((what, _, max)) = over {
            self.limit_reported = true;
            self.diags.push(Diagnostic::new(self.line, 1, format!("the script needs more than {max} {what}, the most a program holds")));
        }
    }

    fn statement(&mut self, l: &mut Line) -> R<()> {
        let first = l.next().ok_or_else(|| Diagnostic::new(self.line, 1, "empty statement".to_string()))?;
        let kw = match &first.tok {
            Tok::Word(w) => w.as_str(),
            Tok::Sym("}") => {
                self.end_loop(first.col)?;
                return self.end(l, "\"}\"");
            }
            _ => {
                return self
                    .err(first.col, format!("a statement starts with a keyword ({}), not {}", KEYWORDS.join(", "), describe(Some(first))));
            }
        };
        match kw {
            "let" => self.let_(l),
            "dma" => self.dma(l, first.col),
            "poke" => self.poke(l),
            "peek" => self.peek_(l),
            "wait" => self.wait(l),
            "loop" => self.loop_(l, first.col),
            "mark" => self.mark(l),
            "assert" => self.check(l, true),
            "compare" => self.check(l, false),
            other => self.err(
                first.col,
                format!("unknown statement \"{other}\"{} (statements: {})", names::did_you_mean(other, KEYWORDS), KEYWORDS.join(", ")),
            ),
        }
    }

    fn end(&self, l: &mut Line, what: &str) -> R<()> {
        match l.next() {
            None => Ok(()),
            Some(t) => self.err(t.col, format!("unexpected {} after {what}: one statement per line", describe(Some(t)))),
        }
    }

    fn expect_sym(&self, l: &mut Line, sym: &str, context: &str) -> R<()> {
        if l.at_sym(sym) {
            l.next();
            Ok(())
        } else {
            self.err(l.col(), format!("expected \"{sym}\" {context}, found {}", describe(l.peek())))
        }
    }

    /// A new name for a result or constant: an identifier not yet used.
    fn fresh_name(&self, l: &mut Line, what: &str) -> R<(String, usize)> {
        let t = l.next();
        let Some(Token { tok: Tok::Word(w), col, .. }) = t else {
            return self.err(t.map_or(l.eol, |t| t.col), format!("expected a name for {what}, found {}", describe(t)));
        };
        if !is_ident(w) {
            return self.err(*col, format!("\"{w}\" is not a name for {what}: letters, digits and _ (no dots)"));
        }
        if let Some((_, line)) = self.names.get(w) {
            return self.err(*col, format!("\"{w}\" is already defined (line {line})"));
        }
        if KEYWORDS.contains(&w.as_str()) {
            return self.err(*col, format!("\"{w}\" is a keyword, not a name for {what}"));
        }
        Ok((w.clone(), *col))
    }

    /// An optional `-> name` at the end of a statement.
    fn arrow_name(&mut self, l: &mut Line, what: &str) -> R<Option<(String, usize)>> {
        if !l.at_sym("->") {
            return Ok(None);
        }
        l.next();
        self.fresh_name(l, what).map(Some)
    }

    fn new_slot(&mut self, kind: SlotKind, name: String, define: bool) -> u16 {
        let slot = self.slots.len().min(usize::from(u16::MAX - 1)) as u16;
        if define {
            self.names.insert(name.clone(), (Name::Result { slot, kind }, self.line));
        }
        self.slots.push(Slot { kind, line: self.line.min(usize::from(u16::MAX)) as u16, name });
        slot
    }

    /// A value: a number (with an optional separate unit word) or a `let` constant.
    fn value(&self, l: &mut Line, what: &str) -> R<(Qty, usize)> {
        let t = l.next();
        match t {
            Some(Token { tok: Tok::Num(n), col, .. }) => {
                let unit = match l.peek() {
                    Some(Token { tok: Tok::Word(w), .. }) if lex::is_unit(w) => {
                        l.next();
                        Some(w.as_str())
                    }
                    _ => None,
                };
                match lex::quantity(n, unit) {
                    Ok(q) => Ok((q, *col)),
                    Err(m) => self.err(*col, m),
                }
            }
            Some(Token { tok: Tok::Word(w), col, .. }) => match self.names.get(w) {
                Some((Name::Const(q), _)) => Ok((*q, *col)),
                Some((Name::Result { .. }, line)) => {
                    self.err(*col, format!("\"{w}\" is a result (line {line}), not a constant: {what} takes a number or a let constant"))
                }
                None => {
                    let consts = self.names.iter().filter(|(_, (n, _))| matches!(n, Name::Const(_))).map(|(k, _)| k.as_str());
                    self.err(
                        *col,
                        format!("expected {what}, found \"{w}\" (not a number nor a let constant){}", names::did_you_mean(w, consts)),
                    )
                }
            },
            _ => self.err(t.map_or(l.eol, |t| t.col), format!("expected {what} (a number or a let constant), found {}", describe(t))),
        }
    }

    /// A plain number in `range`.
    fn int(&self, l: &mut Line, what: &str, min: u64, max: u64) -> R<(u64, usize)> {
        let (q, col) = self.value(l, what)?;
        self.int_of(q, col, what, min, max).map(|v| (v, col))
    }

    fn int_of(&self, q: Qty, col: usize, what: &str, min: u64, max: u64) -> R<u64> {
        match q {
            Qty::Int(v) if (min..=max).contains(&v) => Ok(v),
            Qty::Int(v) => self.err(col, format!("{what} must be {min}..={max}, not {v}")),
            _ => self.err(col, format!("{what} is a number or a size (4096, 0x1000, 4KiB), not a time or a cycle count")),
        }
    }

    /// A time or cycle count, in card cycles, at most `max`.
    fn cycles_of(&self, q: Qty, col: usize, what: &str, max: u64) -> R<u64> {
        match q.cycles(self.opts.clock_hz) {
            None => self.err(col, format!("{what} needs a unit: cycles, ns, us, ms or s (e.g. 100 cycles, 10us)")),
            Some(c) if c <= u128::from(max) => Ok(c as u64),
            Some(c) => self.err(col, format!("{what} is {c} cycles at {} Hz, more than the {max} allowed", self.opts.clock_hz)),
        }
    }

    fn let_(&mut self, l: &mut Line) -> R<()> {
        let (name, _) = self.fresh_name(l, "a constant")?;
        self.expect_sym(l, "=", "after the constant's name")?;
        let (q, _) = self.value(l, "the constant's value")?;
        self.end(l, "the constant's value")?;
        self.names.insert(name, (Name::Const(q), self.line));
        Ok(())
    }

    fn mark(&mut self, l: &mut Line) -> R<()> {
        let (name, _) = self.fresh_name(l, "the mark")?;
        self.end(l, "the mark's name")?;
        let slot = self.new_slot(SlotKind::Mark, name, true);
        self.insns.push(Insn::Mark { slot });
        Ok(())
    }

    fn loop_(&mut self, l: &mut Line, col: usize) -> R<()> {
        let counted = self.int(l, "the loop count", 1, u64::from(u32::MAX));
        let brace = self.expect_sym(l, "{", "after the loop count (the body follows on the next lines, closed by \"}\")");
        let depth_ok = self.loops.len() < image::MAX_LOOP_DEPTH;
        // Keep the structure even with a bad count, so the closing brace matches.
        let opens = l.toks.last().is_some_and(|t| t.tok == Tok::Sym("{"));
        if opens {
            self.insns.push(Insn::Loop { count: counted.as_ref().map_or(1, |(c, _)| *c as u32) });
            self.loops.push(Frame { insn: self.insns.len() - 1, line: self.line, col });
            self.max_depth = self.max_depth.max(self.loops.len());
        }
        counted?;
        brace?;
        if !depth_ok {
            return self.err(col, format!("loops nest at most {} deep (the firmware's counter stack)", image::MAX_LOOP_DEPTH));
        }
        self.end(l, "\"{\"")
    }

    fn end_loop(&mut self, col: usize) -> R<()> {
        let Some(f) = self.loops.pop() else {
            return self.err(col, "\"}\" without an open loop".to_string());
        };
        self.insns.push(Insn::EndLoop { target: (f.insn + 1) as u32 });
        Ok(())
    }

    /// A register operand: `region.name` or a raw BAR0 offset. Returns (offset, words, name).
    fn register(&self, l: &mut Line, access: &str, write: bool) -> R<(u32, u8, String, u32)> {
        let t = l.next();
        match t {
            Some(Token { tok: Tok::Word(w), col, .. }) => {
                let Some(reg) = names::register(w) else {
                    let hint = match names::suggest(w, names::register_names()) {
                        Some(s) => format!(": did you mean \"{s}\"?"),
                        None => {
                            ": registers are named region.name as in docs/registers.md (e.g. spy.control), or give a BAR0 offset (0x3800)"
                                .to_string()
                        }
                    };
                    return self.err(*col, format!("unknown register \"{w}\"{hint}"));
                };
                let Some(words) = names::words(reg) else {
                    return self.err(
                        *col,
                        format!(
                            "register \"{w}\" is {} bits wide; {access} moves registers of up to 64 bits (use raw offsets for its words)",
                            reg.size_bits
                        ),
                    );
                };
                if write && !reg.writable {
                    return self.err(*col, format!("register \"{w}\" is read-only: poke writes writable registers"));
                }
                Ok((reg.offset as u32, words, w.clone(), reg.size_bits))
            }
            Some(Token { tok: Tok::Num(_), col, .. }) => {
                l.pos -= 1;
                let (off, _) = self.int(l, "a BAR0 offset", 0, tlpx_regs::BAR_SIZE - 4)?;
                let off = off as u32;
                if let Err(m) = image::check_offset(off, 1) {
                    return self.err(*col, m);
                }
                let name = match names::register_at(u64::from(off)) {
                    Some(r) => format!("{}.{}", r.region, r.name),
                    None => format!("0x{off:x}"),
                };
                Ok((off, 1, name, 32))
            }
            _ => self.err(
                t.map_or(l.eol, |t| t.col),
                format!("expected a register (region.name) or a BAR0 offset to {access}, found {}", describe(t)),
            ),
        }
    }

    fn poke(&mut self, l: &mut Line) -> R<()> {
        let (offset, words, name, bits) = self.register(l, "poke", true)?;
        let (q, col) = self.value(l, "the value to write")?;
        let value = match q {
            Qty::Int(v) => v,
            _ => self.cycles_of(q, col, "the value", u64::MAX)?,
        };
        let max = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        if value > max {
            return self.err(col, format!("value 0x{value:x} does not fit {name} ({bits} bits: at most 0x{max:x})"));
        }
        self.end(l, "the value")?;
        self.insns.push(Insn::Poke { offset, words, value });
        Ok(())
    }

    fn peek_(&mut self, l: &mut Line) -> R<()> {
        let (offset, words, reg_name, _) = self.register(l, "peek", false)?;
        let named = self.arrow_name(l, "the peeked value")?;
        self.end(l, "the peek")?;
        let slot = match named {
            Some((n, _)) => self.new_slot(SlotKind::Peek, n, true),
            None => self.new_slot(SlotKind::Peek, reg_name, false),
        };
        self.insns.push(Insn::Peek { offset, words, slot });
        Ok(())
    }

    fn wait(&mut self, l: &mut Line) -> R<()> {
        if l.at_word("event") {
            l.next();
            return self.wait_event(l);
        }
        if l.peek().is_none() {
            return self.err(l.eol, "expected a time (wait 10us, wait 100 cycles) or \"event\" after wait".to_string());
        }
        let (q, col) = self.value(l, "a time to wait")?;
        let cycles = self.cycles_of(q, col, "the wait", u64::MAX)?;
        self.end(l, "the time")?;
        self.insns.push(Insn::Wait { cycles });
        Ok(())
    }

    fn event(&mut self, l: &mut Line) -> R<u32> {
        let t = l.next();
        let (offset, bit, col) = match t {
            Some(Token { tok: Tok::Word(w), col, .. }) if !l.at_sym("[") => {
                let Some(e) = names::events().into_iter().find(|e| e.name == w) else {
                    let known: Vec<&str> = names::events().iter().map(|e| e.name).collect();
                    return self.err(
                        *col,
                        format!(
                            "unknown event \"{w}\"{} (events: {}, or a register bit as region.name[BIT])",
                            names::did_you_mean(w, &known),
                            known.join(", ")
                        ),
                    );
                };
                (e.register.offset as u32, e.field.shift, *col)
            }
            Some(tok @ Token { tok: Tok::Word(_) | Tok::Num(_), col, .. }) => {
                l.pos -= 1;
                let (offset, _, name, bits) = self.register(l, "wait on", false)?;
                self.expect_sym(l, "[", &format!("after {name} (region.name[BIT])"))?;
                let bits = u64::from(bits.min(32));
                let (bit, _) = self.int(l, &format!("the bit of {}", tok.text()), 0, bits - 1)?;
                self.expect_sym(l, "]", "after the bit number")?;
                (offset, bit as u32, *col)
            }
            _ => {
                return self.err(
                    t.map_or(l.eol, |t| t.col),
                    format!("expected an event (e.g. generator.done) or region.name[BIT], found {}", describe(t)),
                );
            }
        };
        let event = Event { offset, bit: bit as u8 };
        let index = match self.events.iter().position(|e| *e == event) {
            Some(i) => i,
            None => {
                if self.events.len() >= image::MAX_EVENTS {
                    return self.err(col, format!("more than {} distinct events in the script", image::MAX_EVENTS));
                }
                self.events.push(event);
                self.events.len() - 1
            }
        };
        Ok(1 << index)
    }

    fn wait_event(&mut self, l: &mut Line) -> R<()> {
        let mut mask = self.event(l)?;
        while l.at_sym("|") {
            l.next();
            mask |= self.event(l)?;
        }
        let mut timeout = Qty::Time(DEFAULT_EVENT_TIMEOUT_PS);
        let mut tcol = l.col();
        if l.at_word("timeout") {
            l.next();
            (timeout, tcol) = self.value(l, "the timeout")?;
        }
        let timeout_cycles = self.cycles_of(timeout, tcol, "the timeout", u64::MAX)?;
        if timeout_cycles == 0 {
            return self.err(tcol, "the timeout must be at least one cycle".to_string());
        }
        let named = self.arrow_name(l, "the event's time")?;
        self.end(l, "the events (\"| EVENT\", \"timeout TIME\" and \"-> NAME\" may follow them)")?;
        let slot = named.map(|(n, _)| self.new_slot(SlotKind::Event, n, true));
        self.insns.push(Insn::WaitEvent { mask, timeout_cycles, slot });
        Ok(())
    }

    fn check(&mut self, l: &mut Line, stop: bool) -> R<()> {
        let what = if stop { "assert" } else { "compare" };
        let start = l.col();
        let t = l.peek();
        // the left side: a result name, or a register / offset (peeked just before)
        let (source, left_name) = match t {
            Some(Token { tok: Tok::Word(w), col, .. }) if self.names.contains_key(w) => {
                l.next();
                match self.names.get(w) {
                    Some((Name::Result { kind: SlotKind::Check, .. }, line)) => {
                        return self.err(
                            *col,
                            format!(
                                "\"{w}\" is the outcome of a check (line {line}); {what} compares peeks, marks, dma runs and wait events"
                            ),
                        );
                    }
                    Some((Name::Result { slot, .. }, _)) => (*slot, w.clone()),
                    _ => {
                        return self.err(
                            *col,
                            format!("\"{w}\" is a constant; {what} compares a result (peek, mark, dma or wait event name) or a register"),
                        )
                    }
                }
            }
            Some(Token { tok: Tok::Word(w), col, .. }) if names::register(w).is_none() => {
                let results = self.names.iter().filter(|(_, (n, _))| matches!(n, Name::Result { .. })).map(|(k, _)| k.clone());
                let candidates: Vec<String> = results.chain(names::register_names()).collect();
                return self.err(
                    *col,
                    format!(
                        "unknown result or register \"{w}\"{} ({what} compares a named result or a register)",
                        names::did_you_mean(w, &candidates)
                    ),
                );
            }
            Some(_) => {
                let (offset, words, name, _) = self.register(l, what, false)?;
                let slot = self.new_slot(SlotKind::Peek, name.clone(), false);
                self.insns.push(Insn::Peek { offset, words, slot });
                (slot, name)
            }
            None => return self.err(l.eol, format!("expected what to {what}: a result name or a register")),
        };
        let mut mask = u64::MAX;
        if l.at_sym("&") {
            l.next();
            mask = self.int(l, "the mask", 0, u64::MAX)?.0;
        }
        let t = l.next();
        let op = match t {
            Some(Token { tok: Tok::Sym(s), .. }) if cmp_op(s).is_some() => cmp_op(s).unwrap_or(CmpOp::Eq),
            _ => {
                return self.err(
                    t.map_or(l.eol, |t| t.col),
                    format!("expected a comparison (==, !=, <, <=, >, >=) after {left_name}, found {}", describe(t)),
                );
            }
        };
        let (q, col) = self.value(l, "the value to compare with")?;
        let constant = match q {
            Qty::Int(v) => v,
            _ => self.cycles_of(q, col, "the value", u64::MAX)?,
        };
        let end_col = l.peek().map_or(l.eol, |t| t.col);
        let named = self.arrow_name(l, "the check")?;
        self.end(l, "the comparison")?;
        let (name, define) = match named {
            Some((n, _)) => (n, true),
            None => (l.toks.iter().filter(|t| t.col >= start && t.col < end_col).map(Token::text).collect::<Vec<_>>().join(" "), false),
        };
        let slot = self.new_slot(SlotKind::Check, name, define);
        self.insns.push(Insn::Check { op, stop, slot, source, constant, mask });
        Ok(())
    }

    fn dma(&mut self, l: &mut Line, dma_col: usize) -> R<()> {
        let t = l.next();
        let operation = match t {
            Some(Token { tok: Tok::Word(w), .. }) if DMA_OPS.contains(&w.as_str()) => w.clone(),
            Some(Token { tok: Tok::Word(w), col, .. }) => {
                return self.err(
                    *col,
                    format!("unknown DMA operation \"{w}\"{} (operations: {})", names::did_you_mean(w, DMA_OPS), DMA_OPS.join(", ")),
                );
            }
            _ => {
                return self.err(
                    t.map_or(l.eol, |t| t.col),
                    format!("expected a DMA operation ({}) after dma, found {}", DMA_OPS.join(", "), describe(t)),
                )
            }
        };
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut errors: Vec<Diagnostic> = Vec::new();
        let mut p = DmaParams::default();
        let mut named = None;
        while let Some(t) = l.peek() {
            if l.at_sym("->") {
                match self.arrow_name(l, "the DMA run's cycles") {
                    Ok(n) => named = n,
                    Err(d) => errors.push(d),
                }
                if let Some(t) = l.peek() {
                    errors.push(Diagnostic::new(
                        self.line,
                        t.col,
                        format!("unexpected {} after the result name: \"-> NAME\" ends the dma line", describe(Some(t))),
                    ));
                }
                break;
            }
            let Tok::Word(key) = &t.tok else {
                errors.push(Diagnostic::new(
                    self.line,
                    t.col,
                    format!("expected a DMA parameter (key=value), found {}", describe(Some(t))),
                ));
                break;
            };
            l.next();
            let kcol = t.col;
            if let Some(prev) = seen.insert(key.clone(), kcol) {
                errors.push(Diagnostic::new(self.line, kcol, format!("parameter \"{key}\" given twice (first at column {prev})")));
            }
            if let Err(d) = self.dma_param(l, key, kcol, &mut p) {
                errors.push(d);
                // skip to the next key=value
                while let Some(t) = l.peek() {
                    if matches!(t.tok, Tok::Word(_)) && l.toks.get(l.pos + 1).is_some_and(|n| n.tok == Tok::Sym("=")) || l.at_sym("->") {
                        break;
                    }
                    l.next();
                }
            }
        }
        // checks across parameters
        let Some((size, size_col)) = p.size else {
            if seen.contains_key("size") {
                return self.dma_errors(errors);
            }
            errors.push(Diagnostic::new(self.line, dma_col, format!("dma needs size= (bytes per transfer, 1..={MAX_TRANSFER_BYTES})")));
            return self.dma_errors(errors);
        };
        if p.count == 0 && p.duration == 0 {
            errors.push(Diagnostic::new(self.line, dma_col, "dma needs count= (transfers) or duration= (a time): both are 0".to_string()));
        }
        let (window, window_col) = p.window.unwrap_or((1 << 20, dma_col));
        let op = DMA_OPS.iter().position(|o| *o == operation).map_or(gcfg::Operation::WriteThenRead, |i| DMA_OP_VALUES[i]);
        // The run as tlpx bw would ask for it.
        let run = GenConfig {
            operation: op,
            transfer_size: size as u32,
            count: p.count,
            duration_cycles: p.duration,
            request_size: p.request as u32,
            payload_size: p.payload as u32,
            idle_cycles: p.idle as u32,
            max_outstanding: p.outstanding as u32,
            address_pattern: p.address,
            window,
            offset: p.offset as u32,
            addr64: p.addr64,
            data_pattern: p.pattern,
            check_data: p.check,
            relaxed_ordering: p.relaxed,
            no_snoop: p.nosnoop,
            seed: p.seed as u32,
            flush_writes: p.flush,
        };
        let stride = run.stride();
        if window < stride {
            errors.push(Diagnostic::new(
                self.line,
                window_col,
                format!("window {window} is smaller than one transfer slot: offset + size rounded up to a power of two (>= 64) is {stride} bytes"),
            ));
        }
        let base = p.base.map_or(0, |(b, _)| b);
        if base + window > MAX_WINDOW {
            errors.push(Diagnostic::new(
                self.line,
                p.base.map_or(size_col, |(_, c)| c),
                format!("base {base} + window {window} is past the 2 GiB a script's host buffer may have"),
            ));
        }
        if p.nowait && named.is_some() {
            errors.push(Diagnostic::new(
                self.line,
                dma_col,
                "a nowait dma records no cycles: drop \"-> NAME\", or wait event generator.done and peek generator.cycles".to_string(),
            ));
        }
        if !errors.is_empty() {
            return self.dma_errors(errors);
        }
        let clock = self.opts.clock_hz;
        let cyc = |q: Option<Qty>, default_ps: u128| -> u64 {
            let c = q.unwrap_or(Qty::Time(default_ps)).cycles(clock).unwrap_or(0);
            c.min(u128::from(u64::MAX)) as u64
        };
        // Validated and encoded by the block crate: the checks above name the script's columns;
        // this one cannot fail after them (the card's own limits, against the largest link: the
        // card caps sizes at the link's at run time).
        let run = match run.validate(LinkLimits::LARGEST, MAX_WINDOW) {
            Ok(run) => run,
            Err(e) => return self.err(dma_col, format!("this dma cannot run: {e}")),
        };
        let timeout = cyc(p.timeout, DEFAULT_COMPLETION_TIMEOUT_PS).min(u64::from(u32::MAX)) as u32;
        let desc = DmaDescriptor::of(&run, base as u32, timeout);
        let limit_cycles = cyc(p.limit, DEFAULT_DMA_LIMIT_PS);
        let index = match self.dmas.iter().position(|d| *d == desc) {
            Some(i) => i,
            None => {
                self.dmas.push(desc);
                self.dmas.len() - 1
            }
        };
        let slot = named.map(|(n, _)| self.new_slot(SlotKind::Dma, n, true));
        self.insns.push(Insn::Dma { desc: index.min(usize::from(u16::MAX)) as u16, slot, nowait: p.nowait, limit_cycles });
        Ok(())
    }

    fn dma_errors(&mut self, mut errors: Vec<Diagnostic>) -> R<()> {
        let last = errors.pop();
        self.diags.extend(errors);
        match last {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }

    fn dma_param(&self, l: &mut Line, key: &str, kcol: usize, p: &mut DmaParams) -> R<()> {
        let flag = |l: &mut Line, this: &Self| -> R<bool> {
            if !l.at_sym("=") {
                return Ok(true);
            }
            l.next();
            let t = l.next();
            match t {
                Some(Token { tok: Tok::Word(w) | Tok::Num(w), .. }) if ["on", "yes", "true", "1"].contains(&w.as_str()) => Ok(true),
                Some(Token { tok: Tok::Word(w) | Tok::Num(w), .. }) if ["off", "no", "false", "0"].contains(&w.as_str()) => Ok(false),
                _ => {
                    this.err(t.map_or(l.eol, |t| t.col), format!("{key} is on or off (also yes/no, true/false, 1/0), not {}", describe(t)))
                }
            }
        };
        let choice = |l: &mut Line, this: &Self, options: &[&str]| -> R<usize> {
            this.expect_sym(l, "=", &format!("after {key} ({key}={})", options.join("|")))?;
            let t = l.next();
            match t {
                Some(Token { tok: Tok::Word(w), col, .. }) => match options.iter().position(|o| o == w) {
                    Some(i) => Ok(i),
                    None => this.err(*col, format!("{key} is {}, not \"{w}\"{}", options.join(", "), names::did_you_mean(w, options))),
                },
                _ => this.err(t.map_or(l.eol, |t| t.col), format!("{key} is {}, not {}", options.join(", "), describe(t))),
            }
        };
        let is_bool = matches!(key, "check" | "addr64" | "relaxed" | "nosnoop" | "flush" | "nowait");
        if !is_bool && !matches!(key, "address" | "pattern") && DMA_PARAMS.iter().chain(DMA_RUN_PARAMS.iter()).any(|k| *k == key) {
            self.expect_sym(l, "=", &format!("after {key} ({key}=VALUE)"))?;
        }
        match key {
            "size" => p.size = Some(self.int(l, "size (bytes per transfer)", 1, MAX_TRANSFER_BYTES).map(|(v, _)| (v, kcol))?),
            "count" => p.count = self.int(l, "count (transfers; 0 = until the duration)", 0, u64::MAX)?.0,
            "duration" => {
                let (q, col) = self.value(l, "duration")?;
                p.duration = self.cycles_of(q, col, "duration", u64::MAX)?;
            }
            "request" | "payload" => {
                let (v, col) = self.int(l, &format!("{key} size (bytes)"), 4, 4096)?;
                if !v.is_power_of_two() {
                    return self.err(
                        col,
                        format!(
                            "{key} size must be a power of two in 4..=4096, not {v} (the card also caps it at the link's {})",
                            if key == "request" { "MRRS" } else { "MPS" }
                        ),
                    );
                }
                if key == "request" {
                    p.request = v
                } else {
                    p.payload = v
                }
            }
            "idle" => {
                let (q, col) = self.value(l, "idle")?;
                p.idle = self.cycles_of(q, col, "idle (after each request)", u64::from(u32::MAX))?;
            }
            "outstanding" => p.outstanding = self.int(l, "outstanding (reads in flight)", 1, TAGS)?.0,
            "address" => {
                p.address = gcfg::AddressPattern::ALL[choice(l, self, &gcfg::AddressPattern::ALL.map(gcfg::AddressPattern::name))?]
            }
            "pattern" => p.pattern = gcfg::DataPattern::ALL[choice(l, self, &gcfg::DataPattern::ALL.map(gcfg::DataPattern::name))?],
            "window" => {
                let (v, col) = self.int(l, "window (bytes)", 64, MAX_WINDOW)?;
                if !v.is_power_of_two() {
                    return self.err(col, format!("window must be a power of two (64..=2GiB), not {v}"));
                }
                p.window = Some((v, col));
            }
            "offset" => p.offset = self.int(l, "offset (bytes into each transfer slot)", 0, 63)?.0,
            "base" => {
                let (v, col) = self.int(l, "base (offset of the window in the host buffer)", 0, MAX_WINDOW)?;
                if v % 4 != 0 {
                    return self.err(col, format!("base must be a multiple of 4 bytes, not {v}"));
                }
                p.base = Some((v, col));
            }
            "seed" => p.seed = self.int(l, "seed", 0, u64::from(u32::MAX))?.0,
            "timeout" => {
                let (q, col) = self.value(l, "timeout")?;
                let c = self.cycles_of(q, col, "timeout (completion timeout)", u64::from(u32::MAX))?;
                if c == 0 {
                    return self.err(col, "timeout must be at least one cycle".to_string());
                }
                p.timeout = Some(Qty::Cycles(c));
            }
            "limit" => {
                let (q, col) = self.value(l, "limit")?;
                let c = self.cycles_of(q, col, "limit (the run's longest time)", u64::MAX)?;
                if c == 0 {
                    return self.err(col, "limit must be at least one cycle".to_string());
                }
                p.limit = Some(Qty::Cycles(c));
            }
            "check" => p.check = flag(l, self)?,
            "addr64" => p.addr64 = flag(l, self)?,
            "relaxed" => p.relaxed = flag(l, self)?,
            "nosnoop" => p.nosnoop = flag(l, self)?,
            "flush" => p.flush = flag(l, self)?,
            "nowait" => p.nowait = flag(l, self)?,
            other => {
                let all: Vec<&str> = DMA_PARAMS.iter().chain(DMA_RUN_PARAMS.iter()).copied().collect();
                return self.err(
                    kcol,
                    format!("unknown DMA parameter \"{other}\"{} (parameters: {})", names::did_you_mean(other, &all), all.join(", ")),
                );
            }
        }
        Ok(())
    }
}

struct DmaParams {
    size: Option<(u64, usize)>,
    count: u64,
    duration: u64,
    request: u64,
    payload: u64,
    idle: u64,
    outstanding: u64,
    address: gcfg::AddressPattern,
    window: Option<(u64, usize)>,
    offset: u64,
    base: Option<(u64, usize)>,
    pattern: gcfg::DataPattern,
    seed: u64,
    check: bool,
    addr64: bool,
    relaxed: bool,
    nosnoop: bool,
    flush: bool,
    timeout: Option<Qty>,
    limit: Option<Qty>,
    nowait: bool,
}

impl Default for DmaParams {
    /// GenConfig::new's defaults (tlpx_blocks::generator).
    fn default() -> Self {
        DmaParams {
            size: None,
            count: 0,
            duration: 0,
            request: 512,
            payload: 256,
            idle: 0,
            outstanding: 32,
            address: gcfg::AddressPattern::Sequential,
            window: None,
            offset: 0,
            base: None,
            pattern: gcfg::DataPattern::Counter,
            seed: 1,
            check: true,
            addr64: false,
            relaxed: false,
            nosnoop: false,
            flush: true,
            timeout: None,
            limit: None,
            nowait: false,
        }
    }
}
