//! The restart policy ([`FailurePolicy::Restart`]): replacing dead or hung workers in the
//! middle of a call, in sync mode (the interrupted command is finished for the others, the
//! replacement resets its envs into the same block) and in async mode (the dead worker's
//! rows in the ring are found and refilled, see [`crate::ring::recovery`]).

use super::{trainer_semaphore, Abort, AsyncState, Core, FailurePolicy};
use crate::error::PoolFailure;
use crate::launch::WorkerExit;
use crate::protocol::{self, queue_entry, Column, Command, WorkerReport, WorkerStatus};
use crate::ring::recovery::{self, ClaimView, RecoveryPlan, RingSnapshot, RowOwner, UNWRITTEN};
use crate::ring::{RegionRing, RingWords};
use crate::spec::EnvSpec;
use crate::sync::{Gate, WaitOutcome};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long the supervisor may take to reap workers killed as hung.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);
/// Settling takes microseconds: a recovery yields its core this many times while it waits
/// for workers to settle, then sleeps a millisecond between looks.
const SETTLE_YIELDS: u32 = 1000;
/// The sleep between looks at unsettled workers after [`SETTLE_YIELDS`].
const SETTLE_SLEEP: Duration = Duration::from_millis(1);
/// The sleep between looks at the supervisor while it reaps killed workers.
const REAP_POLL: Duration = Duration::from_millis(1);

impl Core {
    /// Whether the policy allows `n` more restarts.
    pub(super) fn may_restart(&self, n: u32) -> bool {
        match self.failure_policy {
            FailurePolicy::Fail => false,
            FailurePolicy::Restart { max_restarts } => {
                self.restarts.iter().sum::<u32>().saturating_add(n) <= max_restarts
            }
        }
    }

    /// Restart policy: SIGKILLs the workers that did not answer in time and waits until the
    /// supervisor has reaped them.
    pub(super) fn kill_hung(&mut self, hung: &[usize]) -> Result<(), PoolFailure> {
        for &v in hung {
            self.kill_worker(v);
        }
        let deadline = Instant::now() + REAP_TIMEOUT;
        while hung.iter().any(|&v| self.supervisor.exits()[v].is_none()) {
            if Instant::now() >= deadline {
                let env_ids = hung.iter().flat_map(|&w| self.shard(w)).collect();
                return Err(self.abort(Abort::TimedOut { workers: hung.to_vec(), env_ids }));
            }
            std::thread::sleep(REAP_POLL);
        }
        Ok(())
    }

    /// SIGKILLs worker `v` (a hung one; the supervisor reaps it and records the exit).
    pub(super) fn kill_worker(&self, v: usize) {
        // SAFETY: kill has no memory preconditions; the pid is our own child, not yet
        // reaped (the supervisor records its exit only after reaping).
        unsafe { libc::kill(self.supervisor.pids()[v] as libc::pid_t, libc::SIGKILL) };
    }

    /// Restart policy, after `dead` died during a command: waits until every other worker
    /// (but those in `skip`, restarted before the command and not sent it) finished it (its
    /// done-sequence word, stored after its post, says so), then drops the command's posts:
    /// nobody posts any more, and a dead worker's post, if it got that far, would be one
    /// too many. Workers that die meanwhile join the dead while the budget allows. Returns
    /// the dead workers, to be restarted.
    pub(super) fn quiesce(
        &mut self,
        skip: &[usize],
        dead: usize,
        exit: WorkerExit,
    ) -> Result<Vec<usize>, PoolFailure> {
        let deadline = Instant::now() + self.step_timeout.unwrap_or(self.startup_timeout);
        let mut dead_set = vec![dead];
        loop {
            let exits = self.supervisor.exits();
            for (v, e) in exits.iter().enumerate() {
                if let (Some(e), false) = (e, skip.contains(&v) || dead_set.contains(&v)) {
                    if !self.may_restart(dead_set.len() as u32 + 1) {
                        return Err(self.fail(self.died(v, *e)));
                    }
                    dead_set.push(v);
                }
            }
            let pending = (0..self.params.num_workers).filter(|&v| {
                let done = protocol::worker_words(v).done_seq;
                !skip.contains(&v)
                    && !dead_set.contains(&v)
                    && self.region.atomic_u32(done).load(Ordering::Acquire) != self.command_seq
            });
            if pending.count() == 0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(self.fail(self.died(dead, exit)));
            }
            std::thread::yield_now();
        }
        self.drop_trainer_posts();
        Ok(dead_set)
    }

    /// Restart policy, sync mode, before a command: restarts every worker that died since
    /// the last one (they join the command with a reset of their envs instead). Returns them.
    pub(super) fn restart_idle_deaths(&mut self) -> Result<Vec<usize>, PoolFailure> {
        let exits = self.supervisor.exits();
        let dead: Vec<(usize, WorkerExit)> =
            exits.iter().enumerate().filter_map(|(v, e)| e.map(|e| (v, e))).collect();
        if let Some(&(worker, exit)) = dead.first() {
            if !self.may_restart(dead.len() as u32) {
                return Err(self.fail(self.died(worker, exit)));
            }
        }
        for &(v, _) in &dead {
            self.restart_worker(v)?;
        }
        Ok(dead.into_iter().map(|(v, _)| v).collect())
    }

    /// Restart policy, once no worker can post any more: forgets the posts of the
    /// interrupted command (count and sleeping-for words of the trainer's semaphore).
    pub(super) fn drop_trainer_posts(&self) {
        let sem = protocol::TRAINER_SEMAPHORE;
        self.region.atomic_u32(sem).store(0, Ordering::Relaxed);
        self.region.atomic_u32(sem + protocol::SEMAPHORE_WANT).store(0, Ordering::Relaxed);
    }

    /// Restart policy: starts worker `w` again and takes it through the start-up handshake
    /// (its spec must be the pool's). A replacement that dies during its start is replaced
    /// again while the budget allows: each attempt counts as a restart.
    pub(super) fn restart_worker(&mut self, w: usize) -> Result<(), PoolFailure> {
        loop {
            match self.start_replacement(w)? {
                None => {
                    self.place_replacement(w);
                    return Ok(());
                }
                Some(_) if self.may_restart(1) => {
                    // Nobody else posts the trainer now (see `start_replacement`); a post
                    // the dead replacement made before it died is stale.
                    self.drop_trainer_posts();
                }
                Some(exit) => return Err(self.fail(self.died(w, exit))),
            }
        }
    }

    /// One attempt at replacing worker `w`, while no other worker posts the trainer's
    /// semaphore (sync mode: all have finished the command or are dead; async mode: workers
    /// post it only during their start). `Ok(Some(exit))`: the replacement died during its
    /// start.
    fn start_replacement(&mut self, w: usize) -> Result<Option<WorkerExit>, PoolFailure> {
        let words = protocol::worker_words(w);
        for word in [words.semaphore, words.semaphore_want, words.status, words.report_len, words.done_seq] {
            self.region.atomic_u32(word).store(0, Ordering::Relaxed);
        }
        if let Err(e) = self.supervisor.respawn(w) {
            let message = format!("could not be restarted ({}): {e}", self.program.display());
            return Err(self.fail(PoolFailure::WorkerFailed { worker: w, env_ids: self.shard(w), message }));
        }
        self.restarts[w] += 1;
        let deadline = Instant::now() + self.restart_timeout;
        // Its report: one post.
        if let Some(exit) = self.wait_restart_post(w, deadline)? {
            return Ok(Some(exit));
        }
        let spec_ok = match self.control().report(w) {
            Some(WorkerReport::Spec(json)) => EnvSpec::from_json(&json).is_ok_and(|s| s == self.spec),
            _ => false,
        };
        if !spec_ok {
            let message = "after a restart it reported another spec or an error".to_string();
            return Err(self.fail(PoolFailure::WorkerFailed { worker: w, env_ids: self.shard(w), message }));
        }
        // Let it map the data part; it posts once running.
        self.control().worker_semaphore(w).post();
        if let Some(exit) = self.wait_restart_post(w, deadline)? {
            return Ok(Some(exit));
        }
        if self.control().status(w) != Some(WorkerStatus::Running) {
            return Err(self.fail(self.worker_error(w)));
        }
        Ok(None)
    }

    /// Waits for one post of restarted worker `w`; `Ok(Some(exit))` if it died first. A
    /// replacement that does not answer by `deadline` is killed and the pool fails.
    fn wait_restart_post(&mut self, w: usize, deadline: Instant) -> Result<Option<WorkerExit>, PoolFailure> {
        let sem = trainer_semaphore(&self.region);
        let sup = &self.supervisor;
        // Only this worker's death ends the wait: others may be dead and waiting for their
        // own restart (several hung or dead at once).
        let died = || sup.exited_worker().and_then(|_| sup.exits()[w]);
        match sem.acquire(1, &mut self.waiter, Some(deadline), died) {
            Ok(()) => Ok(None),
            Err(WaitOutcome::Aborted(exit)) => Ok(Some(exit)),
            Err(WaitOutcome::TimedOut) => {
                self.kill_worker(w);
                let message = format!(
                    "did not start again within {:?} (the step timeout, or twice the pool's own start-up \
                     time if that is longer; without a step timeout, the start-up timeout)",
                    self.restart_timeout
                );
                Err(self.fail(PoolFailure::WorkerFailed { worker: w, env_ids: self.shard(w), message }))
            }
        }
    }

    /// Restart policy: resets the restarted worker's envs into block `j` with the
    /// documented seeds, and marks their rows truncated (their episodes were cut short). A
    /// replacement that dies meanwhile is replaced again while the budget allows.
    pub(super) fn reset_restarted(&mut self, w: usize, j: usize) -> Result<(), PoolFailure> {
        loop {
            let k = self.restarts.iter().sum::<u32>() as u64;
            // SAFETY: the reset seed word is the trainer's alone (this thread's, inside a `&mut self`
            // call); workers read it only after the command post below (Release) publishes it.
            unsafe { self.region.write_pod(protocol::RESET_SEED, &self.seed.wrapping_add(k << 32)) };
            self.region
                .atomic_u32(protocol::COMMAND_WORD)
                .store(Command::ResetSeeded as u32, Ordering::Relaxed);
            self.region.atomic_u32(protocol::SYNC_BLOCK).store(j as u32, Ordering::Relaxed);
            self.control().worker_semaphore(w).post();
            match self.wait_restart_post(w, Instant::now() + self.restart_timeout)? {
                None => break,
                Some(_) if self.may_restart(1) => {
                    self.drop_trainer_posts();
                    self.restart_worker(w)?;
                }
                Some(exit) => return Err(self.fail(self.died(w, exit))),
            }
        }
        if let Some(worker) = self.control().failed_worker() {
            return Err(self.fail(self.worker_error(worker)));
        }
        let rows = self.layout.blocks[j].column(Column::Truncated).rows(self.shard(w));
        // SAFETY: every worker has posted its completion of this command and none is
        // posted again before the next call, so nobody else touches block `j` now.
        let flags = unsafe { self.region.slice_mut::<u8>(rows.start, rows.len()) };
        flags.fill(1);
        self.restarted.extend(self.shard(w));
        Ok(())
    }

    /// Async mode: restarts every dead worker (all reaped) and mends the ring. With the
    /// pause gate closed and every live worker settled, the rows the dead workers held are
    /// planned ([`recovery::plan`]); the posts they made are taken back; the gate opens
    /// again; each replacement is started (its envs get the restart seed) and handed
    /// fill entries: its pending envs, each into one of the held rows, the rest into rows
    /// it claims. Every one of its envs comes back once more as a fresh, truncated episode
    /// (pending envs now, idle ones at their next `send`), listed in `restarted_envs`.
    pub(super) fn recover_async(&mut self, a: &mut AsyncState) -> Result<(), PoolFailure> {
        let pause = Gate::in_region(&self.region, protocol::RING_PAUSE);
        pause.open_to(1);
        let stock = self.take_stock(a, Instant::now() + self.startup_timeout);
        Gate::in_region(&self.region, protocol::RING_PAUSE).open_to(0);
        let (dead, plan) = stock?;
        self.replace_dead(a, &dead, plan)
    }

    /// The claim records of the live workers, once all are settled (`None` for the dead),
    /// or the workers still unsettled at `deadline`. Call with the pause gate closed. With
    /// `kill_overdue`, an unsettled worker that has been in env code for longer than the
    /// step timeout is killed (it will never settle), and then counts as dead.
    fn settled_views(
        &self,
        a: &AsyncState,
        deadline: Instant,
        kill_overdue: bool,
        answered: impl Fn(usize, &ClaimView) -> bool,
    ) -> Result<Vec<Option<ClaimView>>, Vec<usize>> {
        let ring = &a.ring;
        let limit = (ring.released + a.layout.depth as u64) * ring.batch_size as u64;
        let mut polls = 0u32;
        loop {
            let exits = self.supervisor.exits();
            let views: Vec<Option<ClaimView>> = (0..self.params.num_workers)
                .map(|w| exits[w].is_none().then(|| recovery::claim_record(&self.region, w).read()))
                .collect();
            let unsettled: Vec<usize> = (0..views.len())
                .filter(|&w| views[w].is_some_and(|v| !(v.is_settled(limit) && answered(w, &v))))
                .collect();
            if unsettled.is_empty() {
                return Ok(views);
            }
            // One that has been in env code for longer than the step timeout (stuck while
            // writing a row it claimed) will never settle: it is hung, and is replaced too.
            if let Some(limit) = self.step_timeout.filter(|_| kill_overdue) {
                self.control().overdue(limit).into_iter().filter(|w| unsettled.contains(w)).for_each(|w| {
                    self.kill_worker(w);
                });
            }
            if Instant::now() >= deadline {
                return Err(unsettled);
            }
            // Settling takes microseconds; a worker that takes longer is descheduled or
            // stuck: stop competing with it for a core.
            polls = polls.saturating_add(1);
            if polls < SETTLE_YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(SETTLE_SLEEP);
            }
        }
    }

    /// With the pause gate closed: waits until every live worker is settled, plans the
    /// recovery and takes back the dead workers' posts. Returns the dead workers.
    fn take_stock(
        &mut self,
        a: &mut AsyncState,
        deadline: Instant,
    ) -> Result<(Vec<usize>, RecoveryPlan), PoolFailure> {
        let views = match self.settled_views(a, deadline, true, |_, _| true) {
            Ok(views) => views,
            Err(workers) => {
                let env_ids = workers.iter().flat_map(|&w| self.shard(w)).collect();
                return Err(self.abort(Abort::TimedOut { workers, env_ids }));
            }
        };
        let dead: Vec<usize> = (0..views.len()).filter(|&w| views[w].is_none()).collect();
        let exits = self.supervisor.exits();
        if let Some(&first) = dead.first() {
            if !self.may_restart(dead.len() as u32) {
                let exit = exits[first].expect("dead workers have exited");
                return Err(self.fail(self.died(first, exit)));
            }
        }
        let (ring, layout) = (&mut a.ring, &a.layout);
        let words = RegionRing { region: &self.region, layout };
        let b = ring.batch_size as u64;
        let mut reserved: Vec<std::ops::Range<u64>> = Vec::new();
        for (w, view) in views.iter().enumerate() {
            let Some(view) = view else { continue };
            reserved.push(view.uncommitted());
            // Fill entries pushed to this worker and not yet published (the published ones
            // are forgotten).
            let (head, published) = (ring.queue_heads[w], view.queue_done);
            ring.fills[w].retain(|&(index, _)| index.wrapping_sub(published) < head.wrapping_sub(published));
            reserved.extend(ring.fills[w].iter().map(|&(_, row)| row..row + 1));
        }
        let ring = &*ring;
        let snapshot = RingSnapshot {
            batch_size: b,
            next_batch: ring.next_batch,
            window_end: ring.released + layout.depth as u64,
            claimed: words.claim_counter().load(Ordering::Acquire),
            in_flight: ring.in_flight as u64,
            reserved,
        };
        let n = self.params.num_envs;
        // Row `g`'s env id (in block `g / b % depth`).
        let env_id = |g: u64| {
            let block = &self.layout.blocks[words.block_of(g / b)];
            let row = (g % b) as usize;
            self.region.atomic_u32(block.column(Column::EnvIds).rows(row..row + 1).start)
        };
        let owner = |g: u64| match env_id(g).load(Ordering::Relaxed) {
            UNWRITTEN => RowOwner::Dead,
            id if (id as usize) < n => match views[ring.worker_of[id as usize] as usize] {
                Some(_) => RowOwner::Live,
                None => RowOwner::Dead,
            },
            _ => RowOwner::Corrupt,
        };
        let committed = |q: u64| words.committed(words.block_of(q)).count();
        // No worker is to blame for a ring that does not add up: the region is corrupt.
        let corrupt = |pool: &mut Core, message: String| {
            let what = format!("the async ring cannot be recovered after a worker died: {message}");
            Err(pool.fail(PoolFailure::Protocol { what }))
        };
        let plan = match recovery::plan(&snapshot, owner, committed) {
            Ok(plan) => plan,
            Err(e) => return corrupt(self, e.to_string()),
        };
        for &(q, posts) in &plan.take_back {
            if !words.committed(words.block_of(q)).try_acquire(posts) {
                return corrupt(self, format!("batch {q} lost posts while workers were paused"));
            }
        }
        // The fill rows are nobody's now: no live worker holds them (the plan skipped the
        // reserved rows) and the dead are reaped. Their replacement writers read the fill
        // entries after the queue head's Release store, so this happens before their writes.
        for g in plan.rows_to_unmark(&snapshot) {
            env_id(g).store(UNWRITTEN, Ordering::Relaxed);
        }
        Ok((dead, plan))
    }

    /// Starts a replacement for each dead worker and hands it its pending envs: first into
    /// the rows of `plan` (ascending, so it never waits for a block while holding a row of an
    /// earlier batch), then into rows it claims.
    fn replace_dead(
        &mut self,
        a: &mut AsyncState,
        dead: &[usize],
        plan: RecoveryPlan,
    ) -> Result<(), PoolFailure> {
        let k = self.restarts.iter().sum::<u32>() as u64 + dead.len() as u64;
        let restart_seed = self.seed.wrapping_add(k << 32);
        for &w in dead {
            let words = protocol::worker_words(w);
            self.region.atomic_u32(words.restarted).store(1, Ordering::Relaxed);
            // SAFETY: dead worker `w`'s restart seed, read only by its replacement, which starts
            // (or is posted) after this; no other thread of the trainer touches it.
            unsafe { self.region.write_pod(words.restart_seed, &restart_seed) };
            self.region.atomic_u32(words.queue_head).store(0, Ordering::Relaxed);
            recovery::claim_record(&self.region, w).clear();
            let busy = protocol::worker_busy_since(self.params.num_workers, w);
            self.region.atomic_u64(busy).store(0, Ordering::Relaxed);
            self.restart_worker(w)?;
        }
        let ring = &mut a.ring;
        let lost: usize =
            dead.iter().flat_map(|&w| ring.shards[w].clone()).filter(|&e| ring.pending[e]).count();
        if plan.fill_rows.len() > lost {
            let what = format!(
                "the async ring cannot be recovered: {} rows held by dead workers, {lost} envs in flight on them",
                plan.fill_rows.len()
            );
            return Err(self.fail(PoolFailure::Protocol { what }));
        }
        let mut rows = plan.fill_rows.into_iter();
        for &w in dead {
            ring.queue_heads[w] = 0;
            ring.fills[w].clear();
            for e in ring.shards[w].clone() {
                if !std::mem::replace(&mut ring.restart_marked[e], true) {
                    ring.marked += 1;
                }
                if ring.pending[e] {
                    // An action still waiting its turn in the trainer goes with the fill.
                    ring.order.take_held(e);
                    let row = rows.next().unwrap_or(queue_entry::FILL_CLAIM);
                    ring.enqueue(&self.region, &a.layout, e, queue_entry::FILL, row);
                }
            }
        }
        ring.publish_queues(&self.region, self.params.num_workers);
        Ok(())
    }

    /// Async mode, restart policy, after a wait timed out: the live workers that do not
    /// answer. With the pause gate closed, a worker answers if it becomes settled and, when
    /// idle, has published every entry pushed to it, within `grace`.
    pub(super) fn hung_async(&mut self, a: &AsyncState, grace: Duration) -> Vec<usize> {
        Gate::in_region(&self.region, protocol::RING_PAUSE).open_to(1);
        let ring = &a.ring;
        let answered = |w: usize, v: &ClaimView| {
            v.state != protocol::claim_state::IDLE || v.queue_done == ring.queue_heads[w]
        };
        let hung = self.settled_views(a, Instant::now() + grace, false, answered).err().unwrap_or_default();
        Gate::in_region(&self.region, protocol::RING_PAUSE).open_to(0);
        hung
    }
}
