//! The liveness matrix: every workload × every backend this process can
//! open × every way a program waits, 20,000 iterations each, bounded in
//! time and required to finish with every byte checked.
//!
//! Workloads: SEND ping-pong, WRITE-with-immediate ping-pong, READ
//! ping-pong, FETCH_ADD ping-pong, a WRITE stream ended by a SEND, and a
//! request/response mix (SEND request; WRITE + SEND answer). Backends: the
//! in-memory fabric and UDP on loopback (the packet backend between two
//! namespaces is the CLI's `perf_netns` suite). Waits: busy-polling on one
//! thread, the progress thread alone (no inline progress), blocking on a
//! completion channel, and two application threads on one context (each
//! with its own QP). ACK deferral is on (`OpenOptions`' default), the
//! policy that a driver could most easily get wrong; one row runs it off.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use roce_verbs::*;

const ITERS: u64 = 20_000;
/// Longest one cell may take (a hang fails here, not in CI's timeout).
const CELL: Duration = Duration::from_secs(120);
/// Longest one completion may take.
const ONE: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    SendPingPong,
    WriteImmPingPong,
    ReadPingPong,
    FetchAddPingPong,
    Stream,
    Mix,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    BusyPoll,
    ThreadOnly,
    Channel,
    TwoThreads,
    /// Blocking in `CompletionChannel::wait_io` on an eventfd the
    /// channel's notifier counts on (the drop-in's `ibv_get_cq_event`):
    /// the waiting thread takes the datagrams itself.
    ChannelIo,
    /// Two application threads on one context, each waiting so on its
    /// own channel: one thread's wait goes on while the other posts.
    TwoThreadsIo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Io {
    Fabric,
    Udp,
}

const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);
const LEN: usize = 256;

/// One side of a connection: a QP with its CQ (and channel) and memory.
struct End {
    cq: CompletionQueue,
    ch: Option<CompletionChannel>,
    /// The channel's eventfd (`ChannelIo`, `TwoThreadsIo`).
    efd: Option<std::sync::Arc<nix::sys::eventfd::EventFd>>,
    qp: QueuePair,
    mr: MemoryRegion,
    wait: Wait,
    deadline: Instant,
}

impl End {
    /// The next completion, waited for as this cell's programs wait.
    fn next(&self) -> Completion {
        let end = Instant::now() + ONE;
        loop {
            assert!(
                Instant::now() < self.deadline,
                "the cell took over {CELL:?}"
            );
            match self.wait {
                Wait::Channel => {
                    if let Some(c) = self.cq.poll_one().unwrap() {
                        return ok(c);
                    }
                    self.cq.req_notify(false).unwrap();
                    // A completion may have come before the arm.
                    if let Some(c) = self.cq.poll_one().unwrap() {
                        return ok(c);
                    }
                    let ch = self.ch.as_ref().unwrap();
                    let left = end.saturating_duration_since(Instant::now());
                    let got = ch.get_event(Some(left));
                    assert!(got.is_some(), "no completion event within {ONE:?}");
                    self.cq.ack_events(1);
                }
                Wait::ChannelIo | Wait::TwoThreadsIo => {
                    if let Some(c) = self.cq.poll_one().unwrap() {
                        return ok(c);
                    }
                    self.cq.req_notify(false).unwrap();
                    if let Some(c) = self.cq.poll_one().unwrap() {
                        return ok(c);
                    }
                    self.wait_io(end);
                }
                _ => {
                    for spin in 0..64 {
                        if let Some(c) = self.cq.poll_one().unwrap() {
                            return ok(c);
                        }
                        // The progress thread does the work: leave it the
                        // CPU. A busy-poller yields now and then too (as
                        // rc_pingpong does): on a machine with fewer cores
                        // than busy threads, the peer may need this one.
                        if self.wait == Wait::ThreadOnly || spin == 63 {
                            std::thread::yield_now();
                        }
                    }
                    assert!(Instant::now() < end, "no completion within {ONE:?}");
                }
            }
        }
    }

    /// Waits as the drop-in's `ibv_get_cq_event` does: `wait_io`, then
    /// the event with its count (or, handed over, the count first).
    fn wait_io(&self, end: Instant) {
        use std::os::fd::AsFd;
        let (ch, efd) = (self.ch.as_ref().unwrap(), self.efd.as_ref().unwrap());
        loop {
            assert!(Instant::now() < end, "no completion event within {ONE:?}");
            if ch.take_event().is_some() {
                // Counted under the channel's lock before it was queued.
                efd.read().unwrap();
                self.cq.ack_events(1);
                return;
            }
            if ch.wait_io(efd.as_fd()) == ChannelWait::HandedOver {
                // Waits on the eventfd alone (bounded; the count is taken
                // with the event above).
                let mut fds = [nix::poll::PollFd::new(
                    efd.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16));
            }
        }
    }

    fn recv(&self, off: u64) {
        self.qp
            .post_recv(RecvWr {
                wr_id: RECV,
                sgl: vec![self.mr.sge(off, LEN as u32)].into(),
            })
            .unwrap();
    }

    fn post(&self, wr: SendWr) {
        self.qp.post_send(wr).unwrap();
    }
}

const RECV: u64 = 1 << 40;

fn ok(c: Completion) -> Completion {
    assert!(c.is_success(), "{c:?}");
    c
}

fn signaled(mut wr: SendWr) -> SendWr {
    wr.flags = SendFlags(wr.flags.0 | SendFlags::SIGNALED.0);
    wr
}

/// Waits for `n` completions of the given kinds in any order (a SEND's
/// completion may come before or after the answer it provoked); returns
/// the receive completions.
fn expect(e: &End, sends: usize, recvs: usize) -> Vec<Completion> {
    let (mut s, mut r) = (0, Vec::new());
    while s < sends || r.len() < recvs {
        let c = e.next();
        if c.wr_id() == RECV {
            r.push(c);
        } else {
            s += 1;
        }
    }
    assert_eq!((s, r.len()), (sends, recvs), "more completions than posts");
    r
}

fn stamp(i: u64) -> [u8; 8] {
    i.to_le_bytes()
}

/// Runs `work` for `iters` iterations between `a` (active) and `b`.
fn run(work: Work, a: &End, b: &End, iters: u64) {
    let ra = a.mr.remote();
    let rb = b.mr.remote();
    match work {
        Work::SendPingPong => {
            a.recv(0);
            b.recv(0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..iters {
                        let got = expect(b, usize::from(i > 0), 1);
                        assert_eq!(got[0].byte_len(), 8);
                        assert_eq!(b.mr.to_vec().unwrap()[..8], stamp(i));
                        b.recv(0);
                        b.mr.write(LEN as u64, &stamp(i)).unwrap();
                        b.post(signaled(SendWr::send(i, [b.mr.sge(LEN as u64, 8)])));
                    }
                    expect(b, 1, 0);
                });
                for i in 0..iters {
                    a.mr.write(LEN as u64, &stamp(i)).unwrap();
                    a.post(signaled(SendWr::send(i, [a.mr.sge(LEN as u64, 8)])));
                    expect(a, 1, 1);
                    assert_eq!(a.mr.to_vec().unwrap()[..8], stamp(i));
                    a.recv(0);
                }
            });
        }
        Work::WriteImmPingPong => {
            a.recv(0);
            b.recv(0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..iters {
                        let got = expect(b, usize::from(i > 0), 1);
                        assert_eq!(got[0].imm_data(), i as u32, "{:?}", got[0]);
                        assert_eq!(b.mr.to_vec().unwrap()[..8], stamp(i));
                        b.recv(0);
                        b.mr.write(LEN as u64, &stamp(i)).unwrap();
                        let mut wr = SendWr::write_with_imm(
                            i,
                            [b.mr.sge(LEN as u64, 8)],
                            ra.at(0),
                            i as u32,
                        );
                        wr = signaled(wr);
                        b.post(wr);
                    }
                    expect(b, 1, 0);
                });
                for i in 0..iters {
                    a.mr.write(LEN as u64, &stamp(i)).unwrap();
                    let wr =
                        SendWr::write_with_imm(i, [a.mr.sge(LEN as u64, 8)], rb.at(0), i as u32);
                    a.post(signaled(wr));
                    let got = expect(a, 1, 1);
                    assert_eq!(got[0].imm_data(), i as u32);
                    assert_eq!(a.mr.to_vec().unwrap()[..8], stamp(i));
                    a.recv(0);
                }
            });
        }
        Work::ReadPingPong => {
            // B's memory changes under the reads only through B's own
            // writes between them: A reads what B last stamped.
            for i in 0..iters {
                b.mr.write(0, &stamp(i)).unwrap();
                let wr = SendWr::read(i, [a.mr.sge(LEN as u64, 8)], rb.at(0));
                a.post(signaled(wr));
                expect(a, 1, 0);
                assert_eq!(a.mr.to_vec().unwrap()[LEN..LEN + 8], stamp(i));
            }
        }
        Work::FetchAddPingPong => {
            b.mr.write(0, &0u64.to_ne_bytes()).unwrap();
            for i in 0..iters {
                let wr = SendWr::fetch_add(i, [a.mr.sge(LEN as u64, 8)], rb.at(0), 3);
                a.post(signaled(wr));
                expect(a, 1, 0);
                let old = a.mr.to_vec().unwrap()[LEN..LEN + 8].to_vec();
                assert_eq!(old, (3 * i).to_ne_bytes());
            }
            assert_eq!(b.mr.to_vec().unwrap()[..8], (3 * iters).to_ne_bytes());
        }
        Work::Stream => {
            // Windows of 16 WRITEs, one signaled, then a SEND that B
            // receives once all of them landed (RC delivers in order).
            b.recv(LEN as u64);
            for w in 0..iters / 16 {
                for k in 0..16 {
                    let i = w * 16 + k;
                    let off = (i % 32) * 8;
                    a.mr.write(off, &stamp(i)).unwrap();
                    let mut wr = SendWr::write(i, [a.mr.sge(off, 8)], rb.at(off));
                    // Unsignaled but the last: its completion retires
                    // the window.
                    wr.flags = if k == 15 {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags(0)
                    };
                    a.post(wr);
                }
                expect(a, 1, 0);
            }
            a.mr.write(LEN as u64, b"done").unwrap();
            a.post(signaled(SendWr::send(0, [a.mr.sge(LEN as u64, 4)])));
            expect(a, 1, 0);
            expect(b, 0, 1);
            let last = iters / 16 * 16;
            let mem = b.mr.to_vec().unwrap();
            for i in last.saturating_sub(32)..last {
                let off = ((i % 32) * 8) as usize;
                assert_eq!(mem[off..off + 8], stamp(i), "write {i}");
            }
        }
        Work::Mix => {
            a.recv(0);
            b.recv(0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..iters {
                        // A's request; answered by a WRITE of the data and
                        // a SEND saying it is there.
                        let got = expect(b, if i > 0 { 2 } else { 0 }, 1);
                        assert_eq!(got[0].byte_len(), 8);
                        let req = b.mr.to_vec().unwrap()[..8].to_vec();
                        assert_eq!(req, stamp(i));
                        b.recv(0);
                        b.mr.write(LEN as u64, &stamp(!i)).unwrap();
                        let wr = SendWr::write(i, [b.mr.sge(LEN as u64, 8)], ra.at(64));
                        b.post(signaled(wr));
                        b.post(signaled(SendWr::send(i, [b.mr.sge(LEN as u64, 8)])));
                    }
                    expect(b, 2, 0);
                });
                for i in 0..iters {
                    a.mr.write(LEN as u64, &stamp(i)).unwrap();
                    a.post(signaled(SendWr::send(i, [a.mr.sge(LEN as u64, 8)])));
                    expect(a, 1, 1);
                    let mem = a.mr.to_vec().unwrap();
                    assert_eq!(mem[64..72], stamp(!i), "the answer's WRITE");
                    assert_eq!(mem[..8], stamp(!i), "the answer's SEND");
                    a.recv(0);
                }
            });
        }
    }
}

/// Distinct loopback addresses and UDP ports per cell, so cells (and
/// other tests) running at once never share a socket; below the kernel's
/// ephemeral range (32768 and up), where port-0 sockets take theirs.
fn next_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let pid = std::process::id() as u16;
    11_000
        + (pid
            .wrapping_mul(97)
            .wrapping_add(NEXT.fetch_add(2, Ordering::Relaxed)))
            % 20_000
}

fn open(
    io: Io,
    fabric: &roce_io::Fabric,
    addr: IpAddr,
    port: u16,
    wait: Wait,
    defer: bool,
) -> Context {
    let kind = match io {
        Io::Fabric => BackendKind::Fabric(fabric.clone()),
        Io::Udp => BackendKind::Udp,
    };
    let mut o = OpenOptions::new(kind, addr).roce_port(port, port);
    if wait == Wait::ThreadOnly {
        o = o.progress(ProgressConfig {
            inline_progress: false,
            ..ProgressConfig::default()
        });
    }
    if !defer {
        o.config.ack_delay = AckDelay::OFF;
    }
    o.open().expect("open")
}

fn end(ctx: &Context, wait: Wait, deadline: Instant) -> End {
    let pd = ctx.alloc_pd();
    let io = matches!(wait, Wait::ChannelIo | Wait::TwoThreadsIo);
    let ch = (wait == Wait::Channel || io).then(|| ctx.create_comp_channel());
    let efd = io.then(|| {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let flags = EfdFlags::EFD_SEMAPHORE | EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC;
        let e = std::sync::Arc::new(EventFd::from_flags(flags).unwrap());
        let counter = e.clone();
        let notifier: Notifier = Box::new(move || {
            let _ = counter.write(1);
        });
        assert!(ch.as_ref().unwrap().set_notifier(notifier));
        e
    });
    let cq = ctx.create_cq(256, ch.as_ref()).unwrap();
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap.max_send_wr = 64;
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.reg_mr(vec![0u8; 2 * LEN], ALL).unwrap();
    End {
        cq,
        ch,
        efd,
        qp,
        mr,
        wait,
        deadline,
    }
}

fn connect(a: &End, b: &End) {
    let (ea, eb) = (
        a.qp.endpoint(Psn::new(0x1234)),
        b.qp.endpoint(Psn::new(0xabcdef)),
    );
    let opts = ConnectOptions::default();
    a.qp.connect(ea.psn, &eb, &opts).unwrap();
    b.qp.connect(eb.psn, &ea, &opts).unwrap();
}

/// Cells run one at a time: each has four to eight threads of its own,
/// and the machine may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One cell of the matrix.
fn cell(work: Work, io: Io, wait: Wait, defer: bool) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let start = Instant::now();
    let deadline = start + CELL;
    let fabric = roce_io::Fabric::new();
    let port = next_port();
    let (aa, ab): (IpAddr, IpAddr) = match io {
        Io::Fabric => ("10.1.0.1".parse().unwrap(), "10.1.0.2".parse().unwrap()),
        Io::Udp => ("127.0.41.1".parse().unwrap(), "127.0.41.2".parse().unwrap()),
    };
    let ca = open(io, &fabric, aa, port, wait, defer);
    let cb = open(io, &fabric, ab, port, wait, defer);
    let pairs = if matches!(wait, Wait::TwoThreads | Wait::TwoThreadsIo) {
        2
    } else {
        1
    };
    let ends: Vec<(End, End)> = (0..pairs)
        .map(|_| {
            let (a, b) = (end(&ca, wait, deadline), end(&cb, wait, deadline));
            connect(&a, &b);
            (a, b)
        })
        .collect();
    std::thread::scope(|s| {
        for (a, b) in &ends {
            s.spawn(move || run(work, a, b, ITERS));
        }
    });
    for (a, b) in &ends {
        // Loopback and the fabric lose nothing, but an oversubscribed CPU
        // can keep a responder's progress thread off it for longer than
        // the ACK timeout (67 ms): a retransmission then recovers. More
        // than 1 % of the iterations would be a stall, not bad luck.
        let (ca, cb) = (a.qp.counters(), b.qp.counters());
        assert!(
            (ca.timeouts + cb.timeouts) * 100 <= ITERS,
            "{work:?} {io:?} {wait:?}: A {ca:?}\nB {cb:?}"
        );
    }
    // In a ping-pong every iteration waits for the peer's answer, so a
    // waiting thread is there when it comes; a stream (or a mix with one)
    // may find every event raised before it waits, on a loaded host.
    let ping_pong = !matches!(work, Work::Stream | Work::Mix);
    if io == Io::Udp && ping_pong && matches!(wait, Wait::ChannelIo | Wait::TwoThreadsIo) {
        // The waiting threads took datagrams themselves (a count, not a
        // share: on a loaded host the progress thread may raise many).
        let (wa, wb) = (ca.wait_counters(), cb.wait_counters());
        assert!(
            wa.events_own_step + wb.events_own_step > 0,
            "{work:?} {wait:?}: {wa:?} {wb:?}"
        );
    }
    eprintln!(
        "{work:?} {io:?} {wait:?} defer={defer}: {ITERS} iterations in {:.2?}",
        start.elapsed()
    );
}

macro_rules! matrix {
    ($($name:ident: $work:ident;)*) => {
        $(
            mod $name {
                use super::*;
                #[test]
                fn fabric_busy_poll() { cell(Work::$work, Io::Fabric, Wait::BusyPoll, true) }
                #[test]
                fn fabric_thread_only() { cell(Work::$work, Io::Fabric, Wait::ThreadOnly, true) }
                #[test]
                fn fabric_channel() { cell(Work::$work, Io::Fabric, Wait::Channel, true) }
                #[test]
                fn fabric_two_threads() { cell(Work::$work, Io::Fabric, Wait::TwoThreads, true) }
                #[test]
                fn udp_busy_poll() { cell(Work::$work, Io::Udp, Wait::BusyPoll, true) }
                #[test]
                fn udp_thread_only() { cell(Work::$work, Io::Udp, Wait::ThreadOnly, true) }
                #[test]
                fn udp_channel() { cell(Work::$work, Io::Udp, Wait::Channel, true) }
                #[test]
                fn udp_two_threads() { cell(Work::$work, Io::Udp, Wait::TwoThreads, true) }
                #[test]
                fn fabric_channel_io() { cell(Work::$work, Io::Fabric, Wait::ChannelIo, true) }
                #[test]
                fn udp_channel_io() { cell(Work::$work, Io::Udp, Wait::ChannelIo, true) }
                #[test]
                fn udp_two_threads_io() { cell(Work::$work, Io::Udp, Wait::TwoThreadsIo, true) }
                #[test]
                fn udp_busy_poll_no_ack_delay() { cell(Work::$work, Io::Udp, Wait::BusyPoll, false) }
            }
        )*
    };
}

matrix! {
    send_ping_pong: SendPingPong;
    write_imm_ping_pong: WriteImmPingPong;
    read_ping_pong: ReadPingPong;
    fetch_add_ping_pong: FetchAddPingPong;
    stream: Stream;
    request_response_mix: Mix;
}
