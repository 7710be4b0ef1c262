//! The region header and the bootstrap part's areas: header page, control blocks, params,
//! reports and stats.

use super::{round_up, stats, worker_control, LAYOUT_VERSION, MAGIC, PAGE, PARAMS_CAPACITY, REPORT_CAPACITY};
use bytemuck::{Pod, Zeroable};

/// The region header: plain data, first page of the region. Written by the trainer; a
/// worker validates magic, version, sizes and hash before it touches anything else.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`LAYOUT_VERSION`].
    pub version: u32,
    /// `size_of::<Header>()`, a cheap check that both sides agree on this struct.
    pub header_size: u32,
    /// Bytes of the bootstrap part.
    pub bootstrap_size: u64,
    /// Bytes of the whole region (0 while bootstrapping).
    pub total_size: u64,
    /// [`super::Layout::hash`] of the data part (0 while bootstrapping).
    pub layout_hash: u64,
    /// Number of envs.
    pub num_envs: u32,
    /// Number of workers.
    pub num_workers: u32,
    /// Bytes of JSON in the params area.
    pub params_len: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

impl Header {
    /// A bootstrap header for `num_envs` envs on `num_workers` workers.
    pub fn new(num_envs: u32, num_workers: u32, params_len: u32) -> Header {
        Header {
            magic: MAGIC,
            version: LAYOUT_VERSION,
            header_size: std::mem::size_of::<Header>() as u32,
            bootstrap_size: bootstrap_size(num_workers as usize) as u64,
            total_size: 0,
            layout_hash: 0,
            num_envs,
            num_workers,
            params_len,
            reserved: 0,
        }
    }

    /// Checks a header read from a region of `region_len` bytes.
    pub fn validate(&self, region_len: usize) -> Result<(), HeaderError> {
        if self.magic != MAGIC {
            return Err(HeaderError::BadMagic { found: self.magic });
        }
        if self.version != LAYOUT_VERSION {
            return Err(HeaderError::VersionMismatch { found: self.version, expected: LAYOUT_VERSION });
        }
        if self.header_size as usize != std::mem::size_of::<Header>() {
            return Err(HeaderError::Corrupt(format!(
                "header size {}, expected {} for layout version {LAYOUT_VERSION}",
                self.header_size,
                std::mem::size_of::<Header>()
            )));
        }
        // No worker is a pool whose trainer steps every env (an observer may attach).
        if self.num_envs == 0 || self.num_envs < self.num_workers {
            return Err(HeaderError::Corrupt(format!(
                "{} envs on {} workers",
                self.num_envs, self.num_workers
            )));
        }
        let expected_bootstrap = bootstrap_size(self.num_workers as usize) as u64;
        if self.bootstrap_size != expected_bootstrap || self.bootstrap_size > region_len as u64 {
            return Err(HeaderError::Corrupt(format!(
                "bootstrap size {} (expected {expected_bootstrap}, region {region_len})",
                self.bootstrap_size
            )));
        }
        if self.params_len as usize > PARAMS_CAPACITY {
            return Err(HeaderError::Corrupt(format!("params length {}", self.params_len)));
        }
        Ok(())
    }
}

/// A header that cannot be trusted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a shmenv region.
    #[error("not a shmenv region (magic {found:#018x}): this fd or memfd is not a shmenv pool's region")]
    BadMagic {
        /// What was there instead.
        found: u64,
    },
    /// Written by a different version of shmenv.
    #[error(
        "region layout version {found}, this build of shmenv reads version {expected}: rebuild the \
         worker program (or the shmenv command reading the region) against the trainer's shmenv version"
    )]
    VersionMismatch {
        /// Version in the region.
        found: u32,
        /// Version this build speaks.
        expected: u32,
    },
    /// Sizes or offsets that do not add up.
    #[error("corrupt region header: {0}")]
    Corrupt(String),
    /// The data layout this worker computes differs from the trainer's.
    #[error(
        "layout mismatch (trainer hash {trainer:#x}, worker hash {worker:#x}): trainer and \
         worker were built from different shmenv versions or disagree on the env spec"
    )]
    LayoutMismatch {
        /// Hash in the header.
        trainer: u64,
        /// Hash computed here.
        worker: u64,
    },
}

/// Offset of the params area.
pub fn params_offset(num_workers: usize) -> usize {
    round_up(worker_control(num_workers), PAGE)
}

/// Offset of worker `w`'s report area.
pub fn report_offset(num_workers: usize, w: usize) -> usize {
    params_offset(num_workers) + PARAMS_CAPACITY + w * REPORT_CAPACITY
}

/// Offset of the stats area (after the report areas): the pool's block, then one block
/// per worker (see [`stats`]).
pub(crate) fn stats_offset(num_workers: usize) -> usize {
    report_offset(num_workers, num_workers)
}

/// Offset of worker `w`'s stats block.
pub(crate) fn worker_stats_offset(num_workers: usize, w: usize) -> usize {
    stats_offset(num_workers) + stats::POOL_BYTES + w * stats::WORKER_BYTES
}

/// Offset of worker `w`'s `busy_since` word ([`stats::WorkerBlock::busy_since`]), which
/// the trainer's hang detection reads whether stats are on or not.
pub fn worker_busy_since(num_workers: usize, w: usize) -> usize {
    worker_stats_offset(num_workers, w) + stats::worker::BUSY_SINCE
}

/// Bytes of the bootstrap part.
pub fn bootstrap_size(num_workers: usize) -> usize {
    round_up(worker_stats_offset(num_workers, num_workers), PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_validation_rejects_bad_magic_version_and_sizes() {
        let h = Header::new(4, 2, 10);
        let len = bootstrap_size(2);
        assert_eq!(h.validate(len), Ok(()));
        let bad = Header { magic: 1, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::BadMagic { .. })));
        let bad = Header { version: 99, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::VersionMismatch { found: 99, .. })));
        let bad = Header { num_workers: 5, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::Corrupt(_))));
        let bad = Header { num_envs: 0, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::Corrupt(_))));
        // No worker: the trainer steps every env (its bootstrap part has no worker areas).
        let alone = Header::new(4, 0, 10);
        assert_eq!(alone.validate(bootstrap_size(0)), Ok(()));
        assert!(matches!(h.validate(100), Err(HeaderError::Corrupt(_))));
        let bad = Header { params_len: u32::MAX, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::Corrupt(_))));
    }
}
