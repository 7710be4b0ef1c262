//! Model check of the async ring's claim / commit / receive / release protocol with loom:
//! every interleaving of two workers and the trainer (within loom's preemption bound)
//! delivers every row exactly once, in its batch, and no row is read while written or
//! written while read (loom's `UnsafeCell` reports any access not ordered by the protocol's
//! atomics). The code under test is `shmenv_engine::ring`, built with loom's atomics.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmenv-engine --test loom_ring --release`
//! (`.ci/run` does, in its own target directory).
//!
//! Under loom, a futex is a condition variable (see `sync.rs`), so the sleep/wake handshake
//! (`want`/`sleepers` against the count/value, with SeqCst fences) is checked too: an
//! earlier version that relied on SeqCst loads and stores without fences was reported
//! here as a lost wake-up.
//!
//! The last test checks the restart policy's pause handshake (`shmenv_engine::ring::recovery`):
//! without the SeqCst fence in `ClaimRecord::claim` it reports a claim made behind a closed
//! gate.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use shmenv_engine::ring::RingWords;
use shmenv_engine::sync::atomic::{AtomicU32, AtomicU64};
use shmenv_engine::sync::{Gate, Semaphore, WaitStrategy, Waiter};

const DEPTH: usize = 2;

struct Model {
    words: [AtomicU32; 4 * DEPTH],
    claim: AtomicU64,
    batch: usize,
    /// `DEPTH` blocks of `batch` rows; 0 = never written.
    rows: Vec<UnsafeCell<u32>>,
}

impl Model {
    fn new(batch: usize) -> Arc<Model> {
        Arc::new(Model {
            words: std::array::from_fn(|_| AtomicU32::new(0)),
            claim: AtomicU64::new(0),
            batch,
            rows: (0..DEPTH * batch).map(|_| UnsafeCell::new(0)).collect(),
        })
    }
}

impl RingWords for Model {
    fn claim_counter(&self) -> &AtomicU64 {
        &self.claim
    }
    fn committed(&self, j: usize) -> Semaphore<'_> {
        Semaphore::new(&self.words[2 * j], &self.words[2 * j + 1])
    }
    fn ready_for(&self, j: usize) -> Gate<'_> {
        Gate::new(&self.words[2 * DEPTH + 2 * j], &self.words[2 * DEPTH + 2 * j + 1])
    }
    fn batch_size(&self) -> u64 {
        self.batch as u64
    }
    fn depth(&self) -> u64 {
        DEPTH as u64
    }
}

fn waiter() -> Waiter {
    Waiter::new(WaitStrategy::Block.policy(3, 2))
}

/// A worker publishing `values`, `chunk` rows per claim, exactly as the worker host does.
fn worker(m: &Model, values: &[u32], chunk: usize) {
    let mut w = waiter();
    for part in values.chunks(chunk) {
        let first = m.claim(part.len());
        let mut items = part.iter();
        for run in m.runs(first, part.len()) {
            m.wait_writable(run, &mut w, || None::<()>).unwrap();
            for r in run.first_row..run.first_row + run.rows {
                let v = *items.next().unwrap();
                m.rows[run.block * m.batch + r].with_mut(|p| unsafe { *p = v });
            }
            m.commit(run);
        }
    }
}

/// The trainer: receives `batches` batches in order, reading every row, releasing each.
fn trainer(m: &Model, batches: u64) -> Vec<u32> {
    let mut w = waiter();
    let mut got = Vec::new();
    for q in 0..batches {
        m.receive(q, &mut w, || None::<()>).unwrap();
        let j = m.block_of(q);
        for r in 0..m.batch {
            got.push(m.rows[j * m.batch + r].with(|p| unsafe { *p }));
        }
        m.release(q);
    }
    got
}

fn check(batch: usize, per_worker: usize, chunk: usize) {
    // A preemption bound keeps the search finite; 3 covers a worker preempted between claim,
    // write and commit while the other worker and the trainer run (about 20 s in release).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.max_branches = 20_000;
    model.check(move || {
        let m = Model::new(batch);
        m.open_all();
        let workers: Vec<_> = (0..2u32)
            .map(|w| {
                let m = m.clone();
                let values: Vec<u32> = (0..per_worker as u32).map(|i| 1 + w * 100 + i).collect();
                loom::thread::spawn(move || worker(&m, &values, chunk))
            })
            .collect();
        let batches = (2 * per_worker / batch) as u64;
        let mut got = trainer(&m, batches);
        for w in workers {
            w.join().unwrap();
        }
        got.sort_unstable();
        let mut want: Vec<u32> =
            (0..2u32).flat_map(|w| (0..per_worker as u32).map(move |i| 1 + w * 100 + i)).collect();
        want.sort_unstable();
        assert_eq!(got, want, "a row was lost, duplicated or read before it was written");
    });
}

#[test]
fn rows_claimed_one_at_a_time_wrap_the_ring() {
    // 4 rows, batches of 1, 2 blocks: the ring wraps twice.
    check(1, 2, 1);
}

#[test]
fn claims_spanning_two_batches() {
    // Each worker claims 2 rows at once; batches of 2 rows: claims can straddle batches.
    check(2, 2, 2);
}

/// The restart policy's pause handshake (`shmenv_engine::ring::recovery`): a worker's claim and
/// the trainer's closing of the pause gate never miss each other. Once the trainer has
/// closed the gate and sees a worker in any state but `CLAIMING`, the claim counter cannot
/// move behind its back: either the claim it sees recorded is all there is, or the worker
/// waits at the gate until it opens.
#[test]
fn the_pause_gate_and_a_claim_never_miss_each_other() {
    use shmenv_engine::protocol::claim_state::{CLAIMED, CLAIMING, IDLE, PAUSED};
    use shmenv_engine::ring::recovery::ClaimRecord;
    use shmenv_engine::sync::atomic::Ordering;

    struct Words {
        record: [AtomicU32; 4],
        first: AtomicU64,
        pause: [AtomicU32; 2],
        counter: AtomicU64,
    }
    impl Words {
        fn record(&self) -> ClaimRecord<'_> {
            let [state, len, done, queue_done] = &self.record;
            ClaimRecord { state, first: &self.first, len, done, queue_done }
        }
        fn pause(&self) -> Gate<'_> {
            Gate::new(&self.pause[0], &self.pause[1])
        }
    }

    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let m = Arc::new(Words {
            record: std::array::from_fn(|_| AtomicU32::new(0)),
            first: AtomicU64::new(0),
            pause: std::array::from_fn(|_| AtomicU32::new(0)),
            counter: AtomicU64::new(0),
        });
        let worker = {
            let m = m.clone();
            loom::thread::spawn(move || {
                let record = m.record();
                let take = || m.counter.fetch_add(1, Ordering::Relaxed);
                let first = record.claim(m.pause(), 1, take, &mut waiter(), || None::<()>).unwrap();
                record.committed(1);
                record.finish(1);
                first
            })
        };
        m.pause().open_to(1);
        let view = loop {
            let v = m.record().read();
            if v.state != CLAIMING {
                break v;
            }
            loom::thread::yield_now();
        };
        let seen = m.counter.load(Ordering::Acquire);
        match view.state {
            CLAIMED => assert_eq!((view.first, view.len, seen), (0, 1, 1)),
            PAUSED => assert_eq!(seen, 0),
            IDLE if view.queue_done == 1 => assert_eq!(seen, 1, "finished: its claim is visible"),
            IDLE => {}
            other => panic!("state {other}"),
        }
        if !matches!(view.state, CLAIMED) && view.queue_done == 0 {
            // Not claimed yet: it must not claim while the gate is closed.
            loom::thread::yield_now();
            assert_eq!(m.counter.load(Ordering::Acquire), 0, "claimed behind a closed gate");
        }
        m.pause().open_to(0);
        assert_eq!(worker.join().unwrap(), 0);
    });
}
