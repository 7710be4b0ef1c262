//! The shared-memory region: the one module that touches raw shared memory.
//!
//! A region is an anonymous `memfd` (no name in `/dev/shm` that a crash could leak),
//! mapped with [`memmap2::MmapRaw`] because other processes write the same bytes and a
//! `&mut [u8]` over them would be unsound. The trainer creates it; workers inherit the fd.
//!
//! # Safety contract (written once, here)
//! Every accessor takes an offset and a length and checks both against the mapping, so no
//! access can leave the mapping whatever the offsets. What the compiler cannot see is the
//! other processes, so every accessor of plain (non-atomic) bytes is `unsafe` and states
//! who may touch those bytes meanwhile:
//! - `read_bytes`, `read_pod` and `slice` copy or borrow bytes that, by the protocol in
//!   `docs/architecture.md`, no process writes while they run or live: their writer
//!   finished and published them (a Release store this process's Acquire load saw, or
//!   before this process started). `slice_mut` also needs that nobody reads them.
//! - `write_bytes` and `write_pod` store bytes that no thread of this process reads or
//!   writes meanwhile and that no other process reads until the protocol publishes them
//!   (a Release store or a semaphore post after the write).
//! - `snapshot_bytes` and `snapshot_pod` copy bytes another process may be writing meanwhile
//!   (a live pool's header seen by `shmenv top`, a worker's report): they load each word
//!   atomically, so the copy may mix old and new words, which the caller validates, but is
//!   never a data race. They ask only that no thread of this process writes those bytes.
//!
//! Atomic words (`atomic_u32`, `atomic_u64`) are the only bytes two processes write and
//! read concurrently by design.

use crate::protocol;
use memmap2::{Advice, MmapOptions, MmapRaw};
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Words of the node mask [`Region::prefer_node`] passes: nodes 0 to 1023.
const NODE_WORDS: usize = 16;

/// A mapped shared-memory region backed by a memfd.
#[derive(Debug)]
pub struct Region {
    /// The memfd; `None` once [`Region::take_file`] took it (the mapping stays valid: a
    /// mapping holds its own reference to the file).
    file: Option<File>,
    map: MmapRaw,
    /// False for a read-only attachment (`shmenv top`): writes are refused.
    writable: bool,
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

impl Region {
    /// Creates an anonymous memfd of `len` bytes, sealed against shrinking, and maps it.
    /// The fd is close-on-exec in this process; [`crate::launch`] hands it to workers.
    pub fn create(name: &str, len: usize) -> io::Result<Region> {
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        // SAFETY: `cname` is a valid NUL-terminated string; the flags are valid for memfd_create.
        let fd =
            cvt(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) })?;
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64)?;
        add_seals(&file, libc::F_SEAL_SHRINK)?;
        let map = map_file(&file, len)?;
        Ok(Region { file: Some(file), map, writable: true })
    }

    /// Maps another process's region read-only, from `path` (such as `/proc/<pid>/fd/<n>`,
    /// readable for processes of the same user). Refuses files that are not a memfd sealed
    /// against shrinking (a truncation would turn our reads into SIGBUS). Only loads are
    /// allowed on the result: the write methods panic, and the page protection turns any
    /// store through an atomic into a fault, never into a change of the other process's data.
    pub fn open_read_only(path: &std::path::Path) -> io::Result<Region> {
        let file = File::open(path)?;
        let seals = get_seals(&file)?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::other("not a sealed shmenv region (the memfd can shrink)"));
        }
        let len = file.metadata()?.len() as usize;
        let map = MmapOptions::new().len(len).map_raw_read_only(&file)?;
        Ok(Region { file: Some(file), map, writable: false })
    }

    /// Opens a region from an fd inherited from the trainer, mapping the whole file.
    ///
    /// The fd is taken over (closed when the region drops). Checks that it is a memfd
    /// sealed against shrinking, so nobody can truncate it under our feet (SIGBUS), then
    /// makes it close-on-exec again: the trainer cleared the flag so that it survives the
    /// worker's exec, and a program an env starts (`os.system`, a plugin's fork and exec)
    /// must not inherit a writable fd of the shared region that outlives the pool.
    pub fn from_inherited_fd(fd: RawFd) -> io::Result<Region> {
        // SAFETY: F_GETFD only queries the fd table; a bad fd yields EBADF.
        let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
        // SAFETY: the fd is valid (checked above) and was handed to this process to own.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let seals = get_seals(&file)?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::other("the region fd is not sealed against shrinking"));
        }
        // SAFETY: F_SETFD on the fd `file` owns (valid, checked above), setting only the
        // close-on-exec flag on top of the flags F_GETFD returned.
        cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
        let len = file.metadata()?.len() as usize;
        let map = map_file(&file, len)?;
        Ok(Region { file: Some(file), map, writable: true })
    }

    /// Grows the region to `len` bytes once, then seals it against any further size change
    /// and pre-faults every page, so no step pays a page fault. Each `(bytes, node)` of
    /// `placement` (page-aligned ranges inside `len`, see `launch::numa`) asks the kernel,
    /// before the pre-fault, to put those pages on memory node `node`.
    pub(crate) fn grow_and_seal(
        &mut self,
        len: usize,
        placement: &[(Range<usize>, usize)],
    ) -> io::Result<()> {
        let file = self.file()?;
        file.set_len(len as u64)?;
        add_seals(file, libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL)?;
        self.map = map_file(file, len)?;
        for (bytes, node) in placement {
            // A hint: a kernel without NUMA (ENOSYS) or a node it refuses leaves the pages
            // where the pre-fault puts them, which is only slower.
            let _ = self.prefer_node(bytes.clone(), *node);
        }
        match self.map.advise(Advice::PopulateWrite) {
            Ok(()) => return Ok(()),
            // Kernels before 5.14 do not know the advice: touch each page instead.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            // Out of memory (ENOMEM), or the pages could not be allocated (EFAULT, EIO):
            // an error for the caller, not a SIGBUS or an OOM kill later.
            Err(e) => return Err(io::Error::new(e.kind(), format!("pre-faulting {len} bytes failed: {e}"))),
        }
        for off in (0..len).step_by(4096) {
            // SAFETY: `off < len`, inside the mapping; a volatile read of a byte that no
            // other process writes yet (workers wait until the region is Ready).
            unsafe { std::ptr::read_volatile(self.map.as_ptr().add(off)) };
        }
        Ok(())
    }

    /// Sets the memory policy of the pages of `bytes` (page-aligned, inside the mapping)
    /// to "preferably node `node`": the region's shared policy, which every process's
    /// faults on those pages follow.
    fn prefer_node(&self, bytes: Range<usize>, node: usize) -> io::Result<()> {
        let aligned = bytes.start % protocol::PAGE == 0 && bytes.end % protocol::PAGE == 0;
        if !aligned || bytes.start >= bytes.end || bytes.end > self.map.len() || node >= 64 * NODE_WORDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot place {bytes:?} on node {node}"),
            ));
        }
        let mut mask = [0u64; NODE_WORDS];
        mask[node / 64] |= 1 << (node % 64);
        // SAFETY: mbind changes only the kernel's placement policy of pages of this
        // mapping (`bytes` is page-aligned and inside it, checked above); it reads `mask`
        // (NODE_WORDS words, the bit count passed plus the one the kernel drops) and
        // neither reads nor writes the region's bytes.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.map.as_mut_ptr().add(bytes.start),
                bytes.end - bytes.start,
                libc::MPOL_PREFERRED,
                mask.as_ptr(),
                64 * NODE_WORDS + 1,
                0,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Re-maps the whole file after the trainer grew it (worker side).
    pub fn remap(&mut self) -> io::Result<()> {
        let file = self.file()?;
        let len = file.metadata()?.len() as usize;
        self.map = map_file(file, len)?;
        Ok(())
    }

    /// Seals currently set on the memfd.
    #[cfg(test)]
    pub(crate) fn seals(&self) -> io::Result<i32> {
        get_seals(self.file()?)
    }

    /// The memfd (`None` once taken).
    pub fn fd(&self) -> Option<RawFd> {
        self.file.as_ref().map(File::as_raw_fd)
    }

    /// Takes the memfd out of the region, which keeps its mapping: the trainer's pool
    /// holds the file only while it may spawn workers, so views that outlive the pool
    /// keep the memory mapped but no fd open.
    pub(crate) fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }

    fn file(&self) -> io::Result<&File> {
        self.file.as_ref().ok_or_else(|| io::Error::other("the region's memfd was taken out of it"))
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Address of the first byte (for diagnostics and zero-copy checks).
    pub fn base_addr(&self) -> usize {
        self.map.as_ptr() as usize
    }

    fn check(&self, offset: usize, len: usize, align: usize) -> *mut u8 {
        let end = offset.checked_add(len).expect("region access overflows usize");
        assert!(end <= self.map.len(), "region access {offset}..{end} outside {} bytes", self.map.len());
        assert!(offset % align == 0, "region access at {offset} is not {align}-aligned");
        // SAFETY: `offset + len <= map.len()`, so the pointer stays inside the mapping.
        unsafe { self.map.as_mut_ptr().add(offset) }
    }

    /// The atomic word at `offset` (4-byte aligned, inside the mapping).
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        let ptr = self.check(offset, 4, 4);
        // SAFETY:
        // - `ptr` is in bounds and 4-aligned (checked), and the mapping lives as long as `&self`;
        // - every process accesses this word only through atomics, so there is no data race;
        // - `AtomicU32` has the same size and alignment as `u32`, and any bit pattern is valid.
        unsafe { &*ptr.cast::<AtomicU32>() }
    }

    /// The atomic 64-bit word at `offset` (8-byte aligned, inside the mapping).
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        let ptr = self.check(offset, 8, 8);
        // SAFETY: as for `atomic_u32`: in bounds, aligned, only ever accessed atomically,
        // and `AtomicU64` has the size and alignment of `u64` (x86_64 and aarch64).
        unsafe { &*ptr.cast::<AtomicU64>() }
    }

    /// Copies `len` bytes out of the region.
    ///
    /// # Safety
    /// No process writes these bytes while the copy runs (see the module contract). For
    /// bytes another process may be writing, use [`Region::snapshot_bytes`].
    pub unsafe fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let ptr = self.check(offset, len, 1);
        let mut out = vec![0u8; len];
        // SAFETY: `ptr..ptr+len` is inside the mapping; `out` is a distinct allocation of `len`
        // bytes; no concurrent writer by the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(ptr, out.as_mut_ptr(), len) };
        out
    }

    /// Copies `len` bytes that another process may be writing meanwhile: each aligned
    /// 8-byte word (and each byte at the ends) is one relaxed atomic load, so the copy may
    /// mix words from before and after a write, but reading is never a data race. For
    /// readers that are not ordered after the writer: validate what comes back.
    ///
    /// # Safety
    /// No thread of this process writes these bytes, or stores to an atomic word among
    /// them, while the copy runs (other processes may; see the module contract). A
    /// read-only region ([`Region::open_read_only`]) meets this by construction.
    pub unsafe fn snapshot_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let ptr = self.check(offset, len, 1);
        let mut out = vec![0u8; len];
        let head = ptr.align_offset(8).min(len);
        let words = (len - head) / 8;
        let load_byte = |i: usize| {
            // SAFETY: `i < len`, inside the mapping; `AtomicU8` has the size and alignment of
            // `u8`; this process does not write the byte (the caller's promise) and other
            // processes' writes are not accesses of this program, so the load does not race.
            unsafe { (*ptr.add(i).cast::<std::sync::atomic::AtomicU8>()).load(Ordering::Relaxed) }
        };
        for (i, byte) in out.iter_mut().enumerate().take(head) {
            *byte = load_byte(i);
        }
        for w in 0..words {
            let i = head + w * 8;
            // SAFETY: `ptr + i` is 8-aligned (`head` aligned it) and `i + 8 <= len`, inside the
            // mapping; loaded atomically as for `load_byte`.
            let word = unsafe { (*ptr.add(i).cast::<AtomicU64>()).load(Ordering::Relaxed) };
            out[i..i + 8].copy_from_slice(&word.to_ne_bytes());
        }
        for (i, byte) in out.iter_mut().enumerate().skip(head + words * 8) {
            *byte = load_byte(i);
        }
        out
    }

    /// A plain-data value at `offset` that another process may be writing meanwhile: a
    /// [`Region::snapshot_bytes`] copy, so possibly torn (any bit pattern is a valid `T`).
    ///
    /// # Safety
    /// As for [`Region::snapshot_bytes`].
    pub unsafe fn snapshot_pod<T: bytemuck::Pod>(&self, offset: usize) -> T {
        // SAFETY: the caller's promise, passed on.
        let bytes = unsafe { self.snapshot_bytes(offset, std::mem::size_of::<T>()) };
        bytemuck::pod_read_unaligned(&bytes)
    }

    /// Copies `bytes` into the region at `offset`.
    ///
    /// # Safety
    /// No thread of this process reads or writes these bytes meanwhile, and no other
    /// process reads them before the protocol publishes them (see the module contract).
    pub unsafe fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        assert!(self.writable, "write to a read-only region");
        let ptr = self.check(offset, bytes.len(), 1);
        // SAFETY: the destination is inside the mapping and cannot overlap the caller's slice
        // (which is ordinary process memory, or a disjoint part of the region by protocol);
        // nobody reads or writes it meanwhile by the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
    }

    /// Reads a plain-data value (copied, so later writes by others cannot change it).
    ///
    /// # Safety
    /// No process writes these bytes while the copy runs (see the module contract). For
    /// bytes another process may be writing, use [`Region::snapshot_pod`].
    pub unsafe fn read_pod<T: bytemuck::Pod>(&self, offset: usize) -> T {
        let ptr = self.check(offset, std::mem::size_of::<T>(), 1);
        // SAFETY: in bounds (checked); `T: Pod` accepts any bit pattern; unaligned read is
        // allowed; no concurrent writer by the caller's promise.
        unsafe { std::ptr::read_unaligned(ptr.cast::<T>()) }
    }

    /// Writes a plain-data value.
    ///
    /// # Safety
    /// As for [`Region::write_bytes`].
    pub unsafe fn write_pod<T: bytemuck::Pod>(&self, offset: usize, value: &T) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.write_bytes(offset, bytemuck::bytes_of(value)) }
    }

    /// A shared slice of `count` elements of `T` at `offset`.
    ///
    /// # Safety
    /// No process may write these bytes while the slice lives (see the module contract).
    pub unsafe fn slice<T: bytemuck::Pod>(&self, offset: usize, count: usize) -> &[T] {
        let bytes = count.checked_mul(std::mem::size_of::<T>()).expect("slice length overflows");
        let ptr = self.check(offset, bytes, std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned (checked); `T: Pod` so any bytes are a valid `T`;
        // no concurrent writer by the caller's promise; lifetime tied to the mapping.
        unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), count) }
    }

    /// An exclusive slice of `count` elements of `T` at `offset`.
    ///
    /// # Safety
    /// No process (this one included) may read or write these bytes while the slice lives
    /// (see the module contract).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut<T: bytemuck::Pod>(&self, offset: usize, count: usize) -> &mut [T] {
        assert!(self.writable, "write to a read-only region");
        let bytes = count.checked_mul(std::mem::size_of::<T>()).expect("slice length overflows");
        let ptr = self.check(offset, bytes, std::mem::align_of::<T>());
        // SAFETY: as for `slice`, plus exclusivity by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>(), count) }
    }
}

fn map_file(file: &File, len: usize) -> io::Result<MmapRaw> {
    MmapOptions::new().len(len).map_raw(file)
}

fn add_seals(file: &File, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: F_ADD_SEALS on an fd we own; the kernel validates the flags.
    cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) }).map(|_| ())
}

fn get_seals(file: &File) -> io::Result<i32> {
    // SAFETY: F_GET_SEALS only queries; fails with EINVAL for a non-memfd.
    cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_grow_seal_and_share_between_two_mappings() {
        let mut r = Region::create("test", 4096).unwrap();
        // SAFETY: `dup` of a valid fd.
        let dup = unsafe { libc::dup(r.fd().unwrap()) };
        // SAFETY: a fresh region of this test's only.
        unsafe { r.write_bytes(0, b"hello") };
        r.grow_and_seal(3 * 4096, &[]).unwrap();
        let mut other = Region::from_inherited_fd(dup).unwrap();
        assert_eq!(other.len(), 3 * 4096);
        // SAFETY: no thread or process writes the region while this test reads it.
        assert_eq!(unsafe { other.read_bytes(0, 5) }, b"hello");
        other.atomic_u32(8192).store(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(r.atomic_u32(8192).load(std::sync::atomic::Ordering::SeqCst), 7);
        // Sealed: neither side can resize it any more.
        assert!(r.file().unwrap().set_len(4096).is_err());
        assert!(other.file().unwrap().set_len(8 * 4096).is_err());
        other.remap().unwrap();
        assert_eq!(r.seals().unwrap() & libc::F_SEAL_GROW, libc::F_SEAL_GROW);
    }

    /// `get_mempolicy`'s flag: the policy of the page at an address (`numaif.h`).
    const MPOL_F_ADDR: libc::c_ulong = 1 << 1;

    /// The policy of the page at `offset` of `r`: (mode, node mask's first word).
    fn policy_at(r: &Region, offset: usize) -> io::Result<(i32, u64)> {
        let (mut mode, mut mask) = (0i32, [0u64; NODE_WORDS]);
        // SAFETY: get_mempolicy writes `mode` and at most NODE_WORDS words of `mask`; with
        // MPOL_F_ADDR it only looks up the policy of the page at that address, which lies
        // inside `r`'s mapping.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode as *mut i32,
                mask.as_mut_ptr(),
                64 * NODE_WORDS + 1,
                r.map.as_ptr().add(offset),
                MPOL_F_ADDR,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((mode, mask[0]))
    }

    #[test]
    fn placed_pages_prefer_their_node_and_the_others_keep_the_default() {
        let mut r = Region::create("test", 4096).unwrap();
        r.grow_and_seal(4 * 4096, &[(4096..3 * 4096, 0)]).unwrap();
        match policy_at(&r, 4096) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                eprintln!("this kernel has no NUMA policies: placement is a no-op here");
                return;
            }
            placed => assert_eq!(placed.unwrap(), (libc::MPOL_PREFERRED, 1)),
        }
        assert_eq!(policy_at(&r, 2 * 4096 + 100).unwrap(), (libc::MPOL_PREFERRED, 1));
        assert_eq!(policy_at(&r, 0).unwrap().0, libc::MPOL_DEFAULT);
        assert_eq!(policy_at(&r, 3 * 4096).unwrap().0, libc::MPOL_DEFAULT);
        // Ranges that are not whole pages inside the mapping are refused, not half-applied.
        for bad in [(100..4096, 0), (0..5 * 4096, 0), (4096..4096, 0), (0..4096, 4096)] {
            let err = r.prefer_node(bad.0.clone(), bad.1).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn an_inherited_fd_is_close_on_exec_again() {
        let r = Region::create("test", 4096).unwrap();
        // SAFETY: `dup` of a valid fd; the copy has no close-on-exec flag, as a worker
        // inherits it.
        let dup = unsafe { libc::dup(r.fd().unwrap()) };
        assert!(dup >= 0, "{}", io::Error::last_os_error());
        // SAFETY: F_GETFD on the fd just made.
        assert_eq!(unsafe { libc::fcntl(dup, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        let other = Region::from_inherited_fd(dup).unwrap();
        assert_eq!(other.fd(), Some(dup));
        // SAFETY: F_GETFD on the fd `other` owns.
        let flags = unsafe { libc::fcntl(dup, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "the region fd {dup} is inherited at exec");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_access_is_refused() {
        let r = Region::create("test", 4096).unwrap();
        // SAFETY: nobody writes the region (and the access is refused before any read).
        unsafe { r.read_bytes(4090, 8) };
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn an_out_of_bounds_snapshot_is_refused() {
        let r = Region::create("test", 4096).unwrap();
        // SAFETY: nobody writes the region (and the access is refused before any read).
        unsafe { r.snapshot_bytes(4000, 97) };
    }

    #[test]
    fn a_snapshot_copies_every_byte_at_any_offset_and_length() {
        let r = Region::create("test", 4096).unwrap();
        let pattern: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
        // SAFETY: this test's region; nothing reads it meanwhile.
        unsafe { r.write_bytes(0, &pattern) };
        // Every start within a word and lengths with and without whole words, so the
        // leading bytes, the aligned words and the trailing bytes are each copied.
        for offset in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 150] {
                // SAFETY: no thread or process writes the region while this test reads it.
                let copy = unsafe { r.snapshot_bytes(offset, len) };
                assert_eq!(copy, pattern[offset..offset + len], "offset {offset}, len {len}");
            }
        }
        // SAFETY: as above.
        let value: u64 = unsafe { r.snapshot_pod(3) };
        assert_eq!(value, u64::from_ne_bytes(pattern[3..11].try_into().unwrap()));
    }
}
