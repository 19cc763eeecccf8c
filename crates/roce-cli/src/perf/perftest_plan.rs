//! What a perftest-mode run does (the [`Plan`] from the flags), and the
//! pieces of perftest's exchange and output both of its control planes
//! (TCP: [`super::perftest`], rdma_cm: [`super::perftest_cm`]) and its
//! session share.

use super::args::PerfArgs;
use super::error::PerfError;
use super::messages::Test;
use super::perftest_wire::Dest;

/// Outstanding RDMA READs / atomics this side accepts as responder.
pub(crate) const OUT_READS: u16 = 16;

/// perftest's ibv_mtu enum for a path MTU.
pub(crate) fn mtu_enum(mtu: u32) -> u8 {
    roce_core::qp::mtu_to_enum(mtu)
}

/// The MTU message: the enum as a digit and a NUL.
pub(crate) fn mtu_msg(mtu: u32) -> Vec<u8> {
    vec![b'0' + mtu_enum(mtu), 0]
}

/// What a perftest-mode run does, from the flags: the sizes (one, or
/// 2..8 MiB with `-a`), the QPs, one or both directions; SEND tests post
/// receives; every test but ib_write_lat closes with a key round (and
/// "done" over TCP), as the captures of each tool show.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) test: Test,
    pub(crate) is_send: bool,
    pub(crate) lat: bool,
    pub(crate) sizes: Vec<u64>,
    pub(crate) iters: u64,
    pub(crate) tx_depth: u64,
    pub(crate) qps: usize,
    pub(crate) bidir: bool,
    /// `-D`: seconds per run instead of `iters` messages.
    pub(crate) duration: Option<f64>,
    /// Progress lines while a size runs ([`super::progress::interval`]).
    pub(crate) progress_every: Option<std::time::Duration>,
}

impl Plan {
    pub(crate) fn from_args(args: &PerfArgs) -> Result<Plan, PerfError> {
        let test = args.test;
        let lat = matches!(
            test,
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat
        );
        let atomic = matches!(test, Test::AtomicBw | Test::AtomicLat);
        if args.duration.is_some() && args.all {
            return Err(PerfError::Args("-D and -a cannot be combined".into()));
        }
        // perftest's own rules (force_dependecies).
        if lat && args.qps != 1 {
            return Err(PerfError::Args(
                "multiple QPs are only available in BW tests".into(),
            ));
        }
        if lat && args.bidir {
            return Err(PerfError::Args("-b is only available in BW tests".into()));
        }
        if atomic && (args.all || args.size.is_some_and(|s| s != 8)) {
            return Err(PerfError::Args(
                "atomic tests move 8 bytes (no -a, no -s)".into(),
            ));
        }
        let sizes = if args.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else if atomic {
            vec![8]
        } else {
            vec![args
                .size
                .unwrap_or(if lat { 2 } else { 65536 })
                .clamp(1, 1 << 26)]
        };
        Ok(Plan {
            test,
            is_send: matches!(test, Test::SendBw | Test::SendLat),
            lat,
            sizes,
            iters: args.iters.unwrap_or(if lat { 1000 } else { 5000 }).max(1),
            tx_depth: args.tx_depth.unwrap_or(128).clamp(1, 1024) as u64,
            qps: args.qps as usize,
            bidir: args.bidir,
            duration: args.duration,
            progress_every: super::progress::interval(args),
        })
    }

    /// The largest message (what each QP's buffers are sized for).
    pub(crate) fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(1)
    }

    /// Outstanding READs/atomics advertised in the keys.
    pub(crate) fn out_reads(&self) -> u16 {
        if matches!(
            self.test,
            Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
        ) {
            OUT_READS
        } else {
            1
        }
    }
}

pub(crate) fn print_dest(what: &str, d: &Dest, test: Test) {
    let out = if test == Test::ReadBw {
        format!(" OUT {:#04x}", d.out_reads)
    } else {
        String::new()
    };
    println!(
        "{what}: LID {:#06x} QPN {:#06x} PSN {:#08x}{out} RKey {:#08x} VAddr {:#016x}",
        d.lid, d.qpn, d.psn, d.rkey, d.vaddr
    );
    let g: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    println!(" GID: {}", g.join(":"));
}
