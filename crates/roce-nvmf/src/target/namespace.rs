//! Namespace storage behind a trait (NVMe base 1.4 §6: the NVM command
//! set reads and writes logical blocks of a namespace).
//!
//! The target core calls these methods synchronously with byte offsets it
//! has already checked against [`Namespace::blocks`]; an implementation
//! never sees a range outside `0..blocks() * block_size()`.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Why a namespace operation failed (answered as Internal Error or Data
/// Transfer Error by the core).
#[derive(Debug)]
pub struct NsError(pub std::io::Error);

impl core::fmt::Display for NsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "namespace I/O failed: {}", self.0)
    }
}

impl std::error::Error for NsError {}

/// A namespace's storage.
pub trait Namespace: Send {
    /// Logical block size in bytes: a power of two, at least 512.
    fn block_size(&self) -> u32;
    /// Size in logical blocks.
    fn blocks(&self) -> u64;
    /// Reads `buf.len()` bytes at byte `offset`.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NsError>;
    /// Writes `data` at byte `offset`; `fua` asks for the data to be on
    /// stable media before returning (NVMe base 1.4 §6.15, CDW12 bit 30).
    fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), NsError>;
    /// Makes all written data durable (Flush, NVMe base 1.4 §6.8).
    fn flush(&mut self) -> Result<(), NsError>;
    /// Zeroes `len` bytes at `offset` (Write Zeroes, §6.16). The default
    /// writes zero blocks in 64 KiB pieces.
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        let zeros = vec![0u8; 64 * 1024];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.write(offset + done, &zeros[..n], false)?;
            done += n as u64;
        }
        Ok(())
    }
    /// Deallocates `len` bytes at `offset` (Dataset Management with the
    /// AD attribute, §6.7). The default keeps the data, which the
    /// specification allows (DLFEAT 0: reads of deallocated blocks return
    /// unspecified values).
    fn deallocate(&mut self, _offset: u64, _len: u64) -> Result<(), NsError> {
        Ok(())
    }
}

/// A namespace held in memory.
#[derive(Debug, Clone)]
pub struct MemNamespace {
    data: Vec<u8>,
    block_size: u32,
}

impl MemNamespace {
    /// `blocks` zeroed blocks of `block_size` bytes (rounded up to a power
    /// of two of at least 512).
    pub fn new(blocks: u64, block_size: u32) -> MemNamespace {
        let bs = block_size.max(512).next_power_of_two();
        MemNamespace {
            data: vec![0; (blocks * bs as u64) as usize],
            block_size: bs,
        }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    fn range(&self, offset: u64, len: usize) -> Result<core::ops::Range<usize>, NsError> {
        let start = usize::try_from(offset).ok();
        match start.and_then(|s| s.checked_add(len).map(|e| s..e)) {
            Some(r) if r.end <= self.data.len() => Ok(r),
            _ => Err(NsError(std::io::Error::other(
                "range outside the namespace",
            ))),
        }
    }
}

impl Namespace for MemNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn blocks(&self) -> u64 {
        self.data.len() as u64 / self.block_size as u64
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NsError> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.data[r]);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8], _fua: bool) -> Result<(), NsError> {
        let r = self.range(offset, data.len())?;
        self.data[r].copy_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), NsError> {
        Ok(())
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        let len = usize::try_from(len).map_err(|e| NsError(std::io::Error::other(e)))?;
        let r = self.range(offset, len)?;
        self.data[r].fill(0);
        Ok(())
    }
}

/// A namespace on a regular file or block device. Flush and FUA writes
/// call `fdatasync` (`File::sync_data`).
#[derive(Debug)]
pub struct FileNamespace {
    file: File,
    blocks: u64,
    block_size: u32,
}

impl FileNamespace {
    /// A namespace of `len / block_size` blocks on `file` (whose length
    /// the caller has determined: `metadata().len()` for a file, the
    /// device size for a block device).
    pub fn new(file: File, len: u64, block_size: u32) -> FileNamespace {
        let bs = block_size.max(512).next_power_of_two();
        FileNamespace {
            file,
            blocks: len / bs as u64,
            block_size: bs,
        }
    }
}

impl Namespace for FileNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NsError> {
        self.file.read_exact_at(buf, offset).map_err(NsError)
    }

    fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), NsError> {
        self.file.write_all_at(data, offset).map_err(NsError)?;
        if fua {
            self.file.sync_data().map_err(NsError)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), NsError> {
        self.file.sync_data().map_err(NsError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_bounds() {
        let mut n = MemNamespace::new(4, 512);
        assert_eq!(n.blocks(), 4);
        n.write(512, &[1; 512], false).unwrap();
        let mut b = [0u8; 512];
        n.read(512, &mut b).unwrap();
        assert_eq!(b, [1; 512]);
        assert!(n.read(1537, &mut b).is_err());
        assert!(n.write(u64::MAX, &[1], false).is_err());
    }

    #[test]
    fn file_roundtrip() {
        let path = std::env::temp_dir().join(format!("roce-nvmf-ns-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(8192).unwrap();
        let mut n = FileNamespace::new(f, 8192, 4096);
        assert_eq!(n.blocks(), 2);
        n.write(4096, &[7; 4096], true).unwrap();
        let mut b = vec![0u8; 4096];
        n.read(4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 7));
        n.flush().unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
