//! [`SharedPcap`]: one pcap file that several [`PcapTap`](super::PcapTap)s
//! record into.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use roce_capture::PcapWriter;

use super::PcapStats;
use crate::backend::Nanos;

/// A pcap file shared by taps on several backends (the engines of one
/// process, each with its own thread): each record is written whole under
/// a lock, and a record stamped before the previous one (the threads read
/// the clock before they take the lock) is stamped with the previous
/// one's time instead, so the file's timestamps never go back. A cheap
/// handle: clones name the same file.
#[derive(Clone, Debug)]
pub struct SharedPcap(Arc<Mutex<Inner>>);

#[derive(Debug)]
struct Inner {
    writer: Option<PcapWriter<BufWriter<File>>>,
    last: Nanos,
    stats: PcapStats,
}

impl SharedPcap {
    /// Creates (or truncates) the file at `path`.
    pub fn create(path: impl AsRef<Path>) -> io::Result<SharedPcap> {
        let w = PcapWriter::new(BufWriter::new(File::create(path)?))?;
        Ok(SharedPcap(Arc::new(Mutex::new(Inner {
            writer: Some(w),
            last: 0,
            stats: PcapStats::default(),
        }))))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What every tap recorded into the file.
    pub fn stats(&self) -> PcapStats {
        self.lock().stats
    }

    /// Flushes the file.
    pub fn flush(&self) -> io::Result<()> {
        match self.lock().writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Writes one frame stamped `ts` (or the previous record's time, if
    /// later). A write error stops the file (a half-written record would
    /// corrupt what follows) and is returned to the tap that met it.
    pub(super) fn write_packet(&self, ts: Nanos, frame: &[u8]) -> io::Result<()> {
        let mut g = self.lock();
        let ts = ts.max(g.last);
        let Some(w) = g.writer.as_mut() else {
            return Ok(());
        };
        let r = w.write_packet(ts, frame);
        match &r {
            Ok(()) => {
                g.stats.written += 1;
                g.last = ts;
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => g.stats.skipped += 1,
            Err(_) => {
                g.stats.errors += 1;
                g.writer = None;
            }
        }
        r
    }
}
