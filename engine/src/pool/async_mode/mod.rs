//! Async mode (`batch_size < num_envs`): `send` hands actions to some envs, `recv` waits for
//! the next batch of results in the ring. Everything here receives the [`AsyncState`]: the
//! trainer's side of the ring and the ring's layout. `ring_state` is that side of the ring
//! (envs in flight, the workers' queues); `send_order` decides which sent actions go to
//! their workers now.

mod ring_state;
mod send_order;

use super::{Abort, AsyncState, Control, Core, FailurePolicy};
use crate::action;
use crate::batch::Batch;
use crate::error::{PoolFailure, RecvError, ResetError, SendError};
use crate::protocol::{self, Column};
use crate::ring::{RegionRing, RingWords};
use crate::spec::Element;
use crate::stats::{now_ns, PoolStats};
use crate::sync::{Semaphore, WaitOutcome};
pub(super) use ring_state::RingState;
use send_order::SendOrder;
use std::time::{Duration, Instant};

/// Restart policy, after a wait timed out: how long the live workers get to answer the
/// pause gate (at most; never longer than the step timeout) before they count as hung.
const HUNG_GRACE: Duration = Duration::from_millis(100);

/// Why `recv`'s wait was given up: as any wait, or because workers overran the step timeout.
enum RecvAbort {
    Wait(Abort),
    /// These workers have been running env code for longer than the step timeout.
    Overdue(Vec<usize>),
}

impl AsyncState {
    /// The ring's words in `region`.
    pub(super) fn words<'a>(&'a self, region: &'a crate::region::Region) -> RegionRing<'a> {
        RegionRing { region, layout: &self.layout }
    }

    /// Gives the blocks of received batches back to the workers, all but the last `keep`
    /// received.
    pub(super) fn release_received(&mut self, core: &Core, keep: u64) {
        let words = RegionRing { region: &core.region, layout: &self.layout };
        let ring = &mut self.ring;
        while ring.released.saturating_add(keep) < ring.next_batch {
            let q = ring.released;
            if core.params.restart {
                super::mark_unwritten(&core.region, &core.layout.blocks[words.block_of(q)]);
            }
            words.release(q);
            ring.released = q + 1;
        }
    }

    /// Puts envs on their workers' queues (now in flight), then publishes each touched
    /// queue once.
    fn push(&mut self, core: &Core, envs: impl Iterator<Item = usize>, kind: u32) {
        let ring = &mut self.ring;
        for e in envs {
            ring.enqueue(&core.region, &self.layout, e, kind, 0);
            ring.order.send_now(e);
            ring.pending[e] = true;
            ring.in_flight += 1;
        }
        ring.publish_queues(&core.region, core.params.num_workers);
    }

    /// Passes the sent actions whose turn has come ([`SendOrder`]) to their workers'
    /// queues and publishes them; with `for_batch`, also enough of the oldest held back
    /// that the workers hold a whole batch (`recv` is about to wait for one).
    fn pass_on(&mut self, core: &Core, for_batch: bool) {
        let ring = &mut self.ring;
        if ring.order.held() == 0 {
            return;
        }
        let out = ring.in_flight - ring.order.held();
        let need = if for_batch { ring.batch_size } else { 0 };
        // (Taken out for the call so the closure may use the rest of `ring`.)
        let mut order = std::mem::take(&mut ring.order);
        order.release(out, need, |e| {
            ring.enqueue(&core.region, &self.layout, e, protocol::queue_entry::STEP, 0)
        });
        ring.order = order;
        ring.publish_queues(&core.region, core.params.num_workers);
    }

    /// The envs in flight on `workers` (their actions are with them).
    fn pending_on(&self, workers: &[usize]) -> Vec<usize> {
        let ring = &self.ring;
        workers.iter().flat_map(|&w| ring.shards[w].clone()).filter(|&e| ring.pending[e]).collect()
    }
}

impl Core {
    /// Async mode: see [`super::Pool::send`].
    pub(super) fn send<T: Element>(
        &mut self,
        a: &mut AsyncState,
        actions: &[T],
        env_ids: &[usize],
    ) -> Result<(), SendError> {
        self.check_open()?;
        let entered = now_ns();
        let keep = if a.ring.retain == 0 { 0 } else { a.ring.retain + 1 };
        a.release_received(self, keep);
        let n = self.params.num_envs;
        if !self.has_reset {
            return Err(SendError::NotReset);
        }
        self.recover_idle_deaths(a)?;
        let ring = &mut a.ring;
        // Mark as we check; on a refusal, unmark what was marked so nothing changes.
        for (k, &e) in env_ids.iter().enumerate() {
            let refusal = if e >= n {
                Some(SendError::BadEnvId { env_id: e, num_envs: n })
            } else if ring.pending[e] {
                Some(SendError::EnvBusy { env_id: e })
            } else {
                None
            };
            if let Some(err) = refusal {
                for &m in &env_ids[..k] {
                    ring.pending[m] = false;
                }
                return Err(err);
            }
            ring.pending[e] = true;
        }
        let unmark = |ring: &mut RingState| env_ids.iter().for_each(|&e| ring.pending[e] = false);
        let ended = self.ended_envs(env_ids.iter().copied());
        if !ended.is_empty() {
            unmark(ring);
            return Err(SendError::NeedsReset { env_ids: ended });
        }
        if let Err(e) = action::validate(&self.spec.action, env_ids.len(), actions) {
            unmark(ring);
            return Err(e.into());
        }
        let per_env = self.spec.action.num_elements();
        for (k, &e) in env_ids.iter().enumerate() {
            let row = self.layout.actions.rows(e..e + 1);
            // SAFETY: env `e` has no action in flight (checked above), so no worker reads
            // its action row until the queue entry pushed below publishes it.
            let dst = unsafe { self.region.slice_mut::<T>(row.start, per_env) };
            dst.copy_from_slice(&actions[k * per_env..(k + 1) * per_env]);
        }
        ring.in_flight += env_ids.len();
        let mut order = std::mem::take(&mut ring.order);
        order.send(env_ids, |e| ring.enqueue(&self.region, &a.layout, e, protocol::queue_entry::STEP, 0));
        ring.order = order;
        ring.publish_queues(&self.region, self.params.num_workers);
        let now = self.end_call(entered, 0, false, false);
        self.record_spans(&[("send", entered, now)]);
        Ok(())
    }

    /// Async mode: queues a reset of every env (seeded with `seed + i` if `Some`).
    pub(super) fn start_reset(&mut self, a: &mut AsyncState, seed: Option<u64>) -> Result<(), ResetError> {
        a.release_received(self, a.ring.retain);
        self.recover_idle_deaths(a)?;
        let ring = &mut a.ring;
        if let Some(env_id) = ring.pending.iter().position(|&p| p) {
            return Err(ResetError::InFlight { env_id });
        }
        // Every env starts over: a restarted env's reset row is just a reset row.
        ring.restart_marked.fill(false);
        ring.marked = 0;
        let kind = match seed {
            Some(s) => {
                // SAFETY: the reset seed word is the trainer's alone (this thread's, inside a `&mut
                // self` call); the worker reads it only after the queue head store (Release).
                unsafe { self.region.write_pod(protocol::RESET_SEED, &s) };
                protocol::queue_entry::RESET_SEEDED
            }
            None => protocol::queue_entry::RESET,
        };
        a.push(self, 0..self.params.num_envs, kind);
        self.first_reset_done = true;
        self.has_reset = true;
        self.ended.fill(false);
        Ok(())
    }

    /// Async mode, restart policy: restarts workers that died since the last call, before
    /// anything is pushed to them.
    fn recover_idle_deaths(&mut self, a: &mut AsyncState) -> Result<(), PoolFailure> {
        let restarting = self.failure_policy != FailurePolicy::Fail;
        if restarting && self.supervisor.exited_worker().is_some() {
            self.recover_async(a)?;
        }
        Ok(())
    }

    /// Async mode: see [`super::Pool::recv`].
    pub(super) fn recv(&mut self, a: &mut AsyncState) -> Result<Batch<'_>, RecvError> {
        self.check_open()?;
        let ring = &a.ring;
        if ring.in_flight < ring.batch_size {
            return Err(RecvError::NotEnoughInFlight {
                in_flight: ring.in_flight,
                batch_size: ring.batch_size,
            });
        }
        Ok(self.recv_batch(a)?)
    }

    /// Async mode: waits for the next batch (`batch_size` envs are in flight).
    pub(super) fn recv_batch(&mut self, a: &mut AsyncState) -> Result<Batch<'_>, PoolFailure> {
        let entered = now_ns();
        a.release_received(self, a.ring.retain);
        let (q, b) = (a.ring.next_batch, a.ring.batch_size);
        self.recover_idle_deaths(a)?;
        a.pass_on(self, true);
        let j = a.words(&self.region).block_of(q);
        let full = a
            .layout
            .committed
            .iter()
            .filter(|&&c| Semaphore::in_region(&self.region, c).count() as usize >= b)
            .count();
        PoolStats::new(&self.region, self.params.num_workers).add_ring_sample(full as u64);
        // A batch complete already is taken without waiting: no clock reads for a wait of 0,
        // unless `wait_batch`, which still looks for dead and overdue workers first,
        // replaced some (their posts taken back, the batch was waited for after all), or a
        // trace wants the wait's span where it was.
        let complete = self.trace.is_none()
            && Semaphore::in_region(&self.region, a.layout.committed[j]).count() as usize >= b;
        let waited_from = if complete { entered } else { now_ns() };
        let replaced = self.wait_batch(a, q)?;
        let waited = if complete && !replaced { 0 } else { now_ns() - waited_from };
        self.take_batch(a, j, b)?;
        // The received envs are no longer the oldest out: actions held back for them go now.
        a.pass_on(self, false);
        let now = self.end_call(entered, waited, true, true);
        self.record_spans(&[("recv", entered, now), ("wait", waited_from, waited_from + waited)]);
        Ok(Batch { view: self.batch_view(j, 0..b) })
    }

    /// One wait for batch `q`: dead, failed, overdue workers and the interrupt check end it.
    fn wait_once(&mut self, a: &AsyncState, q: u64) -> Result<(), WaitOutcome<RecvAbort>> {
        let words = a.words(&self.region);
        let (sup, control) =
            (&self.supervisor, Control { region: &self.region, num_workers: self.params.num_workers });
        let interrupt = &mut self.interrupt;
        let deadline = self.step_timeout.map(|t| Instant::now() + t);
        // A worker stuck in env code while the others fill the batches never makes a
        // wait time out: look at how long each has been in env code, before waiting (a
        // batch may be complete already) and while waiting.
        // (A worker that holds actions but runs no env code, e.g. a stopped one, is not
        // overtaken for long: the fair scheduling holds the others back until a batch
        // needs it, and then the wait times out.)
        let overdue = || {
            let hung = self.step_timeout.map(|t| control.overdue(t)).unwrap_or_default();
            (!hung.is_empty()).then_some(RecvAbort::Overdue(hung))
        };
        let died = sup.exited_worker().map(|(w, exit)| RecvAbort::Wait(Abort::Died(w, exit)));
        match died.or_else(overdue) {
            Some(abort) => Err(WaitOutcome::Aborted(abort)),
            None => words.receive_until(q, &mut self.waiter, deadline, || {
                if let Some((worker, exit)) = sup.exited_worker() {
                    return Some(RecvAbort::Wait(Abort::Died(worker, exit)));
                }
                if let Some(worker) = control.failed_worker() {
                    return Some(RecvAbort::Wait(Abort::Failed(worker)));
                }
                if let Some(abort) = overdue() {
                    return Some(abort);
                }
                interrupt.as_mut().is_some_and(|f| (f.0)()).then_some(RecvAbort::Wait(Abort::Interrupted))
            }),
        }
    }

    /// Waits until batch `q` is complete; under the restart policy, replaces dead and hung
    /// workers meanwhile and waits on. Returns whether it replaced any.
    fn wait_batch(&mut self, a: &mut AsyncState, q: u64) -> Result<bool, PoolFailure> {
        let restarting = self.failure_policy != FailurePolicy::Fail;
        let mut replaced = false;
        loop {
            match self.wait_once(a, q) {
                Ok(()) => return Ok(replaced),
                // Restart policy: replace the dead, or kill and replace the hung, then wait on.
                Err(WaitOutcome::Aborted(RecvAbort::Wait(Abort::Died(..)))) if restarting => {
                    self.recover_async(a)?;
                    replaced = true;
                }
                Err(WaitOutcome::Aborted(RecvAbort::Overdue(hung)))
                    if restarting && self.may_restart(hung.len() as u32) =>
                {
                    self.kill_hung(&hung)?;
                    self.recover_async(a)?;
                    replaced = true;
                }
                Err(WaitOutcome::Aborted(RecvAbort::Wait(abort))) => return Err(self.abort(abort)),
                Err(WaitOutcome::Aborted(RecvAbort::Overdue(workers))) => {
                    let env_ids = a.pending_on(&workers);
                    return Err(self.abort(Abort::TimedOut { workers, env_ids }));
                }
                Err(WaitOutcome::TimedOut) => {
                    let grace = self.step_timeout.unwrap_or_default().min(HUNG_GRACE);
                    let hung = if restarting { self.hung_async(a, grace) } else { Vec::new() };
                    if hung.is_empty() || !self.may_restart(hung.len() as u32) {
                        // The envs whose actions are with the workers (not those the
                        // fair scheduling holds back in the trainer).
                        let ring = &a.ring;
                        let env_ids: Vec<usize> = (0..self.params.num_envs)
                            .filter(|&e| ring.pending[e] && !ring.order.is_held(e))
                            .collect();
                        let mut workers: Vec<usize> =
                            env_ids.iter().map(|&e| ring.worker_of[e] as usize).collect();
                        workers.dedup();
                        return Err(self.abort(Abort::TimedOut { workers, env_ids }));
                    }
                    self.kill_hung(&hung)?;
                    self.recover_async(a)?;
                    replaced = true;
                }
            }
        }
    }

    /// After batch `q`'s `b` rows (block `j`) were received: checks the workers and the
    /// rows' env ids, takes the envs out of flight, marks restarted envs' rows truncated and
    /// notes which envs ended.
    fn take_batch(&mut self, a: &mut AsyncState, j: usize, b: usize) -> Result<(), PoolFailure> {
        let restarting = self.failure_policy != FailurePolicy::Fail;
        // A batch can be complete while another worker has failed or died (the healthy
        // workers fill it): its envs would silently never come back, so report it now
        // (under the restart policy the next call replaces it).
        if let Some((worker, exit)) = self.supervisor.exited_worker().filter(|_| !restarting) {
            return Err(self.fail(self.died(worker, exit)));
        }
        if let Some(worker) = self.control().failed_worker() {
            return Err(self.fail(self.worker_error(worker)));
        }
        // The rows' env ids were written by workers: check them before trusting them.
        let block = &self.layout.blocks[j];
        // SAFETY: all `b` rows of block `j` were committed (Acquire in the wait), and workers
        // do not write the block again before the trainer releases it (its gate).
        let ids: &[u32] = unsafe { self.region.slice(block.column(Column::EnvIds).offset, b) };
        let ring = &mut a.ring;
        for (row, &id) in ids.iter().enumerate() {
            match ring.pending.get_mut(id as usize) {
                Some(p @ true) => {
                    *p = false;
                    ring.order.received(id as usize);
                }
                _ => {
                    let what = format!(
                        "row {row} of batch {} names env {id}, which has no action in flight (the pool has envs \
                         0..{})",
                        ring.next_batch, self.params.num_envs
                    );
                    return Err(self.fail(PoolFailure::Protocol { what }));
                }
            }
        }
        ring.in_flight -= b;
        ring.next_batch += 1;
        self.restarted.clear();
        if ring.marked > 0 {
            // SAFETY: as for `ids`; the trainer owns the received block until it releases it,
            // and no view of it exists yet (`&mut self`).
            let truncated = unsafe { self.region.slice_mut::<u8>(block.column(Column::Truncated).offset, b) };
            for (r, &id) in ids.iter().enumerate() {
                if std::mem::take(&mut ring.restart_marked[id as usize]) {
                    ring.marked -= 1;
                    truncated[r] = 1;
                    self.restarted.push(id as usize);
                }
            }
        }
        if !self.ended.is_empty() {
            let view = self.batch_view(j, 0..b);
            let (ids, terminated, truncated) = (
                view.column::<u32>(Column::EnvIds),
                view.column::<u8>(Column::Terminated),
                view.column::<u8>(Column::Truncated),
            );
            let ended: Vec<(usize, bool)> =
                (0..b).map(|r| (ids[r] as usize, terminated[r] != 0 || truncated[r] != 0)).collect();
            for (id, e) in ended {
                self.ended[id] = e;
            }
        }
        Ok(())
    }
}
