//! The tuning of a context's progress engine ([`ProgressConfig`]): what
//! the scheduling rules (`schedule.rs`) and the steps (`progress.rs`) read.

use std::time::Duration;

/// Tuning of a context's progress engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressConfig {
    /// Let application threads drive progress themselves: a post transmits
    /// at once, and polling an empty CQ runs one progress step (when no
    /// other thread is doing so). Lowest latency; on by default.
    pub inline_progress: bool,
    /// How long the progress thread keeps polling (yielding the CPU between
    /// rounds) after the last work before it parks.
    pub spin: Duration,
    /// Longest the parked progress thread sleeps when nothing is scheduled:
    /// the bound on noticing traffic from a backend that cannot wake it.
    pub max_park: Duration,
    /// Longest the progress thread leaves an application thread that
    /// polls a CQ alone: it looks whether the polling goes on after
    /// `max_park`, then at doubling intervals up to this bound, and takes
    /// over when it has stopped. Datagrams that arrive after the
    /// application stopped polling (without blocking on a channel, which
    /// hands over at once) can wait this long. Waking the thread costs the
    /// polling thread a context switch: under an emulated CPU one wake per
    /// millisecond doubled the latency of a ping-pong. Below `max_park`,
    /// every look comes after this long (without doubling): for programs
    /// that poll once between waits of another kind (perftest's
    /// `ib_write_lat` polls its send CQ once per iteration and spins on
    /// memory otherwise), whose datagrams would wait up to a look.
    pub poller_park: Duration,
    /// Datagrams per receive / transmit batch.
    pub batch: usize,
    /// Transmit batches per progress step before receiving again.
    pub tx_batches_per_step: usize,
    /// The largest piece the engine copies payload into and out of memory
    /// regions in (`None`, the default: whole copies). Under an emulated
    /// CPU, copies in pieces are much faster (`roce_io::CpuTuning`, whose
    /// `detect` gives the automatic choice).
    pub copy_piece: Option<usize>,
    /// When a poll of a CQ returns completions, take the application to
    /// have stopped polling: for programs that poll until a completion,
    /// then wait for the next thing by other means, such as spinning on
    /// memory a peer's RDMA WRITE fills (perftest's `ib_write_lat`, and
    /// many an MPI progress loop). The progress thread is not woken for
    /// it at first (that would cost the polling thread a context switch
    /// when CPUs are scarce, and the engine's ACK deferral usually brings
    /// the peer's answer with the completion): at its next look, within
    /// `poller_park`, it finds the application gone, receives, and sleeps
    /// on the backend's descriptor. Once a datagram has waited for it so
    /// (against a peer that acknowledges at once, as rxe and NICs do),
    /// hand-overs wake it, until receives in a row come while the
    /// application polls or posts (`schedule::Signals::received`): perftest's
    /// `ib_write_lat` against such a peer went from about 570 µs to 29 µs
    /// an iteration on two busy CPUs (docs/dropin.md). Off by default (the
    /// drop-in libibverbs, whose programs are unknown, turns it on).
    pub hand_over_on_completion: bool,
    /// Posts of send work that follow the previous one within this long,
    /// with no poll of a CQ in between, leave their packets to the end of
    /// the burst instead of sending
    /// each in a system call of its own: the application's next poll, a
    /// post that finds `batch / 2` waiting, or the progress thread within
    /// this long, whichever comes first. For programs that post one work
    /// request per call in a loop (perftest's bandwidth tests); `ZERO`
    /// (the default) sends at every post.
    pub coalesce_posts: Duration,
    /// A poll of an empty CQ that found nothing to do (or found another
    /// thread driving the I/O) yields the CPU. For a program that may run
    /// on one CPU only, where whoever it waits for (its peer on the same
    /// host, or this context's progress thread) needs that CPU: without
    /// it each round trip waited for the scheduler to end the poller's
    /// time slice (about 1 ms per `ib_read_lat` iteration with both
    /// processes on one CPU, 20 µs with it: docs/dropin.md). The
    /// default: on when the opening thread may run on one CPU only
    /// (`std::thread::available_parallelism`, which follows the CPU
    /// affinity mask and cgroup quota).
    pub yield_when_idle: bool,
    /// Whether `post_send` and `post_recv` refuse a scatter/gather entry
    /// whose lkey names no region, a region of another PD, or bytes
    /// outside its region ([`PostError::UnknownLkey`](crate::PostError::UnknownLkey),
    /// [`PostError::WrongPd`](crate::PostError::WrongPd),
    /// [`PostError::SgeOutOfBounds`](crate::PostError::SgeOutOfBounds)). On (the
    /// default) for the Rust API, which reports such a mistake where it
    /// is made. Off, such a work request is posted and the engine's own
    /// checks, when it runs, complete it with a local protection error
    /// (a receive also NAKs the SEND that meets it, whose sender sees a
    /// remote operational error), as on rxe and RoCE NICs, which check
    /// keys when they use them: the drop-in libibverbs turns it off.
    pub check_sges_at_post: bool,
}

impl Default for ProgressConfig {
    fn default() -> ProgressConfig {
        ProgressConfig {
            inline_progress: true,
            spin: Duration::from_micros(50),
            max_park: Duration::from_millis(1),
            poller_park: Duration::from_millis(16),
            batch: 64,
            tx_batches_per_step: 4,
            copy_piece: None,
            hand_over_on_completion: false,
            coalesce_posts: Duration::ZERO,
            yield_when_idle: std::thread::available_parallelism().is_ok_and(|n| n.get() == 1),
            check_sges_at_post: true,
        }
    }
}
