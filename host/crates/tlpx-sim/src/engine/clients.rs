//! The clients' side of the sim thread: connections, the backpressure on their reader
//! threads ([`Credits`]), their requests' queue and host time, replies (with an outbox for a
//! client that does not read them), blocking and unblocking, and leaving.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tlpx_sim_protocol::{encode_frame, ClientStats, ErrorKind, HostTime, Reply, Request};

use super::{Blocked, Client, Deadline, Event, Sim, CLIENT_REQUESTS_IN_FLIGHT, MAX_QUEUED_REQUESTS};

/// Backpressure between a client's reader thread and the sim thread: the requests of the
/// client read and not yet executed, at most `CLIENT_REQUESTS_IN_FLIGHT`. The reader takes a
/// credit before it reads a frame and the sim gives it back when it executes the request, so a
/// client that sends faster than the sim executes (or that is blocked, or does not read its
/// replies) waits in its own socket: the sim's memory and the other clients are not affected.
pub struct Credits {
    state: Mutex<(usize, bool)>,
    freed: Condvar,
}

impl Credits {
    pub fn new() -> Arc<Credits> {
        Arc::new(Credits { state: Mutex::new((0, false)), freed: Condvar::new() })
    }

    /// Waits for a credit; false once the client was closed (the reader then stops).
    pub fn acquire(&self) -> bool {
        let Ok(mut state) = self.state.lock() else { return false };
        loop {
            if state.1 {
                return false;
            }
            if state.0 < CLIENT_REQUESTS_IN_FLIGHT {
                state.0 += 1;
                return true;
            }
            state = match self.freed.wait(state) {
                Ok(s) => s,
                Err(_) => return false,
            };
        }
    }

    pub(super) fn release(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.0 = state.0.saturating_sub(1);
            self.freed.notify_one();
        }
    }

    fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.1 = true;
            self.freed.notify_all();
        }
    }
}

/// Writes what the socket takes now of `bytes` without waiting (MSG_DONTWAIT: the socket is
/// shared with the client's blocking reader thread, so it stays a blocking socket); the count.
fn send_now(socket: &UnixStream, bytes: &[u8]) -> std::io::Result<usize> {
    use std::os::unix::io::AsRawFd;
    let mut sent = 0;
    while sent < bytes.len() {
        // SAFETY: send reads at most len bytes from the pointer, which points into `bytes`.
        let n = unsafe {
            libc::send(socket.as_raw_fd(), bytes[sent..].as_ptr().cast(), bytes.len() - sent, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => break,
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        sent += n as usize;
    }
    Ok(sent)
}

impl Sim {
    pub(super) fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Connected { id, writer, credits } => {
                self.clients.insert(
                    id,
                    Client {
                        writer,
                        credits,
                        outbox: VecDeque::new(),
                        outbox_frames: 0,
                        hello: false,
                        dead: false,
                        queue: VecDeque::new(),
                        blocked: None,
                        irqs: VecDeque::new(),
                        stats: ClientStats { id, connected: true, ..Default::default() },
                        mark: None,
                        charged: false,
                        live: false,
                    },
                );
            }
            Event::Request { id, request, at } => self.on_request(id, request, at),
            Event::Closed { id, reason } => {
                if self.clients.contains_key(&id) {
                    self.close_client(id, &reason);
                }
            }
            Event::Signal(sig) => {
                self.info(&format!("signal {sig}: shutting down"));
                self.shutdown = true;
            }
        }
    }

    fn on_request(&mut self, id: u64, req: Request, at: Instant) {
        // On the host clock now, while the batch the stamp may fall in is still known.
        let at = self.host_clock(at);
        let Some(c) = self.clients.get_mut(&id) else { return };
        if c.dead {
            return;
        }
        c.stats.requests += 1;
        if c.blocked.is_some() || !c.queue.is_empty() || c.outbox_full() {
            if c.queue.len() >= MAX_QUEUED_REQUESTS {
                self.kill(id, format!("more than {MAX_QUEUED_REQUESTS} requests queued behind a blocking one"));
                return;
            }
            c.queue.push_back((req, at));
            return;
        }
        self.start(id, req, at);
    }

    /// Charges the client's host time (`--host-time real`), then executes `req`.
    ///
    /// The rule: the client's gap is the host-clock time (Sim::host_clock) from its mark to `at` (the request's
    /// arrival), capped at `host_time_cap`, in card cycles at the card clock; the card must
    /// reach the mark's card cycle plus the gap before `req` is processed. If it is already
    /// there (time ran meanwhile, e.g. for another client whose gap overlapped), nothing is
    /// added; otherwise the client blocks (time runs, as for `Advance`) until that cycle and
    /// `req` waits at the front of its queue. So overlapping gaps of two clients advance the
    /// card once, by the larger.
    fn start(&mut self, id: u64, req: Request, at: Duration) {
        if self.p.host_time == HostTime::Real {
            let now = self.now;
            let clock_hz = self.p.clock_hz;
            let cap = self.p.host_time_cap;
            let host = at;
            let Some(c) = self.clients.get_mut(&id) else { return };
            if c.charged {
                c.charged = false;
            } else if let Some((mark, cycle)) = c.mark {
                let gap = host.saturating_sub(mark);
                let capped = gap > cap;
                let cycles = (gap.min(cap).as_secs_f64() * clock_hz).round() as u64;
                let h = &mut self.c.host;
                h.gaps += 1;
                h.capped_gaps += u64::from(capped);
                h.gap_cycles += cycles;
                h.longest_gap_ns = h.longest_gap_ns.max(u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX));
                c.stats.host_gaps += 1;
                c.stats.host_gaps_capped += u64::from(capped);
                c.stats.host_gap_cycles += cycles;
                let target = cycle.saturating_add(cycles);
                if target > now {
                    h.charged_cycles += target - now;
                    c.queue.push_front((req, at));
                    c.charged = true;
                    self.block(id, |serial| Blocked::HostTime { serial }, Some(target));
                    return;
                }
            }
            // The message itself is a mark: the client's next gap starts at its arrival.
            let host = c.mark.map_or(host, |(m, _)| m.max(host));
            c.mark = Some((host, now));
        }
        self.execute(id, req);
    }

    /// Runs queued requests of `id` until one blocks.
    pub(super) fn pump(&mut self, id: u64) {
        loop {
            let Some(c) = self.clients.get_mut(&id) else { return };
            if c.blocked.is_some() || c.dead || c.outbox_full() {
                return;
            }
            let Some((req, at)) = c.queue.pop_front() else { return };
            self.start(id, req, at);
        }
    }

    pub(super) fn reply(&mut self, id: u64, reply: &Reply) {
        let host = if self.p.host_time == HostTime::Real {
            let t = Instant::now();
            if self.batch_start.is_some() {
                self.batch_reply = Some(t);
            }
            Some(self.host_clock(t))
        } else {
            None
        };
        let Some(c) = self.clients.get_mut(&id) else { return };
        if c.dead {
            return;
        }
        if matches!(reply, Reply::Error { .. }) {
            c.stats.errors += 1;
        }
        if let Err(e) = encode_frame(reply, &mut self.frame) {
            self.dead.push((id, format!("cannot encode a reply: {e}")));
            c.dead = true;
            return;
        }
        if c.outbox.is_empty() {
            match send_now(&c.writer, &self.frame) {
                Ok(sent) if sent == self.frame.len() => {}
                Ok(sent) => {
                    c.outbox.extend(&self.frame[sent..]);
                    c.outbox_frames += 1;
                }
                Err(e) => {
                    c.dead = true;
                    self.dead.push((id, format!("write failed: {e}")));
                }
            }
        } else {
            c.outbox.extend(&self.frame);
            c.outbox_frames += 1;
        }
        if let Some(host) = host {
            // The client's host time starts when its answer has left: socket delivery, the
            // OS waking its thread and its own code until its next message.
            c.mark = Some((host, self.now));
        }
    }

    pub(super) fn block(&mut self, id: u64, make: impl FnOnce(u64) -> Blocked, deadline: Option<u64>) {
        self.serial += 1;
        let serial = self.serial;
        if let Some(c) = self.clients.get_mut(&id) {
            c.blocked = Some(make(serial));
            self.waiting += 1;
        }
        if let Some(t) = deadline {
            self.deadlines.push(Reverse((t, Deadline::Client { id, serial })));
        }
    }

    pub(super) fn unblock(&mut self, id: u64, reply: Reply) {
        if let Some(c) = self.clients.get_mut(&id) {
            if c.blocked.take().is_some() {
                self.waiting -= 1;
            }
        }
        self.reply(id, &reply);
        self.pump(id);
    }

    /// Writes what the clients' sockets take of their unsent replies; a client whose outbox
    /// fell below its limit runs its queued requests again.
    pub(super) fn flush_outboxes(&mut self) {
        let pending: Vec<u64> = self.clients.iter().filter(|(_, c)| !c.outbox.is_empty() && !c.dead).map(|(id, _)| *id).collect();
        for id in pending {
            let Some(c) = self.clients.get_mut(&id) else { continue };
            let was_full = c.outbox_full();
            let (head, _) = c.outbox.as_slices();
            match send_now(&c.writer, head) {
                Ok(sent) => {
                    c.outbox.drain(..sent);
                    if c.outbox.is_empty() {
                        c.outbox_frames = 0;
                    }
                }
                Err(e) => {
                    c.dead = true;
                    self.dead.push((id, format!("write failed: {e}")));
                    continue;
                }
            }
            if was_full && !c.outbox_full() {
                self.pump(id);
            }
        }
    }

    /// Marks a client dead; it is removed (and its socket shut) outside the cycle loop.
    pub(super) fn kill(&mut self, id: u64, reason: String) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.dead = true;
        }
        self.dead.push((id, reason));
    }

    pub(super) fn reap_dead(&mut self) {
        while let Some((id, reason)) = self.dead.pop() {
            self.close_client(id, &reason);
        }
    }

    pub(super) fn close_client(&mut self, id: u64, reason: &str) {
        let Some(mut c) = self.clients.remove(&id) else { return };
        if c.blocked.take().is_some() {
            self.waiting -= 1;
        }
        if c.live {
            // A client that disconnects, or dies, gives its claim on live time up.
            c.live = false;
            c.stats.live = false;
            self.live_claim_ended(id, "it left");
        }
        let _ = c.writer.shutdown(std::net::Shutdown::Both);
        if let Some(credits) = &c.credits {
            credits.close();
        }
        for slot in self.tags.iter_mut().flatten() {
            if slot.client == Some(id) {
                slot.client = None;
            }
        }
        let freed = self.mem.alloc.free_client(id);
        self.restore_interrupt_mode(id);
        self.info(&format!(
            "client {id} ({}) left: {reason}; {freed} DMA allocation(s) freed",
            if c.stats.name.is_empty() { "no Hello" } else { &c.stats.name }
        ));
        c.stats.connected = false;
        if self.gone.len() >= 64 {
            self.gone.pop_front();
        }
        self.gone.push_back(c.stats);
        if self.clients.is_empty() {
            // Let traffic the client left behind (posted writes, DMA) drain for a while.
            self.drain_until = self.now.saturating_add(self.p.completion_timeout_cycles);
        }
    }

    pub(super) fn error(&mut self, id: u64, kind: ErrorKind, message: String) {
        self.reply(id, &Reply::Error { kind, message });
    }
}
