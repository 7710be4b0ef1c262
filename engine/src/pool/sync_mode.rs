//! Sync mode (`batch_size = num_envs`): every call sends one command to every worker and
//! waits until all are done; the results are one whole result block. Everything here
//! receives the [`SyncState`].

use super::{trainer_semaphore, Abort, Core, SyncState};
use crate::action;
use crate::batch::Batch;
use crate::error::{PoolFailure, ResetError, StepError};
use crate::protocol::{self, Column, Command};
use crate::spec::Element;
use crate::stats::now_ns;
use crate::sync::WaitOutcome;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Core {
    /// Sync mode: see [`super::Pool::reset_envs`].
    pub(super) fn reset_envs(
        &mut self,
        s: &mut SyncState,
        mask: &[bool],
        seed: Option<u64>,
    ) -> Result<Batch<'_>, ResetError> {
        self.check_open()?;
        let n = self.params.num_envs;
        if mask.len() != n {
            return Err(ResetError::BadMask { len: mask.len(), num_envs: n });
        }
        if !self.has_reset && !mask.iter().all(|&m| m) {
            return Err(ResetError::PartialFirstReset);
        }
        let flag = match seed {
            Some(s) => {
                // SAFETY: the reset seed word is the trainer's alone (this thread's, inside a `&mut self`
                // call); workers read it only after the command post below (Release) publishes it.
                unsafe { self.region.write_pod(protocol::RESET_SEED, &s) };
                protocol::reset_flag::RESET_SEEDED
            }
            None => protocol::reset_flag::RESET,
        };
        let row_bytes = self.layout.actions.row_bytes;
        let rows = self.layout.actions.rows(0..n);
        // SAFETY: as in `step`: the action rows are written only by the trainer and read by
        // workers only after the next post; no view borrows them (`&mut self`).
        let actions = unsafe { self.region.slice_mut::<u8>(rows.start, n * row_bytes) };
        let flag_of = |m: bool| if m { flag } else { protocol::reset_flag::KEEP };
        for (i, &m) in mask.iter().enumerate() {
            actions[i * row_bytes] = flag_of(m);
        }
        if let Some(own) = &mut self.own_shard {
            own.set_flags(mask[self.params.trainer_envs()].iter().map(|&m| flag_of(m)), row_bytes);
        }
        for (i, &m) in mask.iter().enumerate() {
            if m && !self.ended.is_empty() {
                self.ended[i] = false;
            }
        }
        self.first_reset_done = true;
        Ok(self.run(s, Command::ResetSome)?)
    }

    /// Sync mode: see [`super::Pool::step`].
    pub(super) fn step<T: Element>(
        &mut self,
        s: &mut SyncState,
        actions: &[T],
    ) -> Result<Batch<'_>, StepError> {
        self.check_open()?;
        if !self.has_reset {
            return Err(StepError::NotReset);
        }
        let ended = self.ended_envs(0..self.params.num_envs);
        if !ended.is_empty() {
            return Err(StepError::NeedsReset { env_ids: ended });
        }
        let n = self.params.num_envs;
        action::validate(&self.spec.action, n, actions)?;
        // After validation `actions` is exactly the action rows, in the space's dtype.
        let rows = self.layout.actions.rows(0..n);
        // SAFETY: the action rows are written only by the trainer and read by workers only
        // after the next post (below, after this borrow ends); no batch view borrows them
        // (`&mut self`).
        let dst = unsafe { self.region.slice_mut::<T>(rows.start, actions.len()) };
        dst.copy_from_slice(actions);
        if let Some(own) = &mut self.own_shard {
            let envs = self.params.trainer_envs();
            own.set_actions(crate::spec::as_bytes(actions), envs, self.layout.actions.row_bytes);
        }
        Ok(self.run(s, Command::Step)?)
    }

    /// Sync mode: sends `command` to every worker and waits until all are done.
    pub(super) fn run(&mut self, s: &mut SyncState, command: Command) -> Result<Batch<'_>, PoolFailure> {
        self.check_open()?;
        let entered = now_ns();
        self.restarted.clear();
        // Workers that died while idle (after the last command): restart them first; they
        // join this command with a reset of their envs instead.
        let mut skip = if self.supervisor.any_exited() {
            if !self.may_restart(1) {
                let (worker, exit) = self.supervisor.first_exit().expect("a worker exited");
                return Err(self.fail(self.died(worker, exit)));
            }
            self.restart_idle_deaths()?
        } else {
            Vec::new()
        };
        let j = s.next_sync_block;
        s.next_sync_block = (j + 1) % protocol::SYNC_BLOCKS;
        self.command_seq = self.command_seq.wrapping_add(1);
        self.region.atomic_u32(protocol::COMMAND_WORD).store(command as u32, Ordering::Relaxed);
        self.region.atomic_u32(protocol::SYNC_BLOCK).store(j as u32, Ordering::Relaxed);
        self.region.atomic_u32(protocol::COMMAND_SEQ).store(self.command_seq, Ordering::Relaxed);
        // Each post is a Release that publishes the command, seed and actions.
        for v in (0..self.params.num_workers).filter(|v| !skip.contains(v)) {
            self.control().worker_semaphore(v).post();
        }
        // The trainer's own shard, while the workers step theirs.
        self.run_own_shard(command, j)?;
        let w = (self.params.num_workers - skip.len()) as u32;
        let sem = trainer_semaphore(&self.region);
        let sup = &self.supervisor;
        let interrupt = &mut self.interrupt;
        // Workers done already (the trainer's own shard took longer): no clock reads for a
        // wait of 0, unless a trace wants the wait's span where it was.
        let done = (self.trace.is_none() || w == 0) && sem.count() >= w;
        let waited_from = if done { entered } else { now_ns() };
        let deadline = self.step_timeout.map(|t| Instant::now() + t);
        let outcome = sem.acquire(w, &mut self.waiter, deadline, || {
            if let Some((worker, exit)) = sup.exited_worker() {
                return Some(Abort::Died(worker, exit));
            }
            interrupt.as_mut().is_some_and(|f| (f.0)()).then_some(Abort::Interrupted)
        });
        let waited = if done { 0 } else { now_ns() - waited_from };
        match outcome {
            Ok(()) => {}
            Err(WaitOutcome::Aborted(Abort::Died(worker, exit))) if self.may_restart(1) => {
                for v in self.quiesce(&skip, worker, exit)? {
                    self.restart_worker(v)?;
                    skip.push(v);
                }
            }
            Err(WaitOutcome::Aborted(abort)) => return Err(self.abort(abort)),
            Err(WaitOutcome::TimedOut) => self.restart_hung_sync(&mut skip)?,
        }
        // A worker that failed still posted; find it.
        if let Some(worker) = self.control().failed_worker() {
            return Err(self.fail(self.worker_error(worker)));
        }
        for worker in skip {
            self.reset_restarted(worker, j)?;
        }
        self.has_reset = true;
        self.note_ended(command, j);
        let now = self.end_call(entered, waited, true, command == Command::Step);
        let name = if command == Command::Step { "step" } else { "reset" };
        self.record_spans(&[(name, entered, now), ("wait", waited_from, waited_from + waited)]);
        let n = self.params.num_envs;
        Ok(Batch { view: self.batch_view(j, 0..n) })
    }

    /// After a command's wait timed out: the workers (but those in `skip`) that did not
    /// finish it fail the pool, or under the restart policy are killed and started again
    /// (they join `skip`).
    fn restart_hung_sync(&mut self, skip: &mut Vec<usize>) -> Result<(), PoolFailure> {
        let control = self.control();
        let hung: Vec<usize> = (0..self.params.num_workers)
            .filter(|&w| {
                let done = protocol::worker_words(w).done_seq;
                !skip.contains(&w)
                    && control.region.atomic_u32(done).load(Ordering::Relaxed) != self.command_seq
            })
            .collect();
        if !self.may_restart(hung.len() as u32) {
            let env_ids = hung.iter().flat_map(|&w| self.shard(w)).collect();
            return Err(self.abort(Abort::TimedOut { workers: hung, env_ids }));
        }
        // Restart policy: the hung workers are killed and started again like dead ones;
        // every other worker finished the command, so its posts are dropped.
        self.kill_hung(&hung)?;
        self.drop_trainer_posts();
        for &v in &hung {
            self.restart_worker(v)?;
        }
        skip.extend(hung);
        Ok(())
    }

    /// Without auto-reset: which envs ended, after `command`'s results in block `j`.
    fn note_ended(&mut self, command: Command, j: usize) {
        if self.ended.is_empty() {
            return;
        }
        if command == Command::ResetSome {
            // `reset_envs` cleared the envs it reset.
        } else if command == Command::Step {
            let view = self.batch_view(j, 0..self.params.num_envs);
            let ended: Vec<bool> = view
                .column::<u8>(Column::Terminated)
                .iter()
                .zip(view.column::<u8>(Column::Truncated))
                .map(|(&a, &b)| a != 0 || b != 0)
                .collect();
            self.ended = ended;
        } else {
            self.ended.fill(false);
        }
    }
}
