//! Async mode: fair scheduling. Envs are bound to workers, so a worker that gets less CPU
//! (it shares a core with the trainer, or the OS runs it less) would have its envs stepped
//! less often than the others': whichever envs finish first fill the batches, and they are
//! the ones sent again. EnvPool avoids this with one queue for all its threads; shmenv
//! evens it out in the trainer instead: every action gets a step number (one more than
//! the env's last, and never far below the slowest env's, so an env that was left idle
//! does not come back with a debt), and an action goes to its worker only while its number is
//! at most [`MAX_LEAD`] ahead of the lowest number still out with a worker. The envs
//! ahead wait in the trainer, and `recv` waits for the slow worker (which gives it the
//! core). So every env's step count stays within `MAX_LEAD + 1` of every other's, and an
//! env can be absent from at most about `(MAX_LEAD + 1) * num_envs / batch_size` batches
//! in a row. When the workers hold fewer actions than a batch needs, the oldest waiting
//! ones go regardless, so a batch always completes (an env stuck in a hang does not stop
//! the others; the step timeout handles the hang).
//!
//! Pure bookkeeping (no shared memory): [`super::RingState`] asks it what to enqueue.

use std::collections::BTreeMap;

/// How many steps an env may be ahead of the env furthest behind (among those with an
/// action out) and still have its next action passed on. Small enough that counts stay
/// even, large enough that workers keeping pace never wait for each other.
pub(super) const MAX_LEAD: u64 = 2;

/// Step numbers of the actions out with the workers, and the actions held back.
#[derive(Debug)]
pub(super) struct SendOrder {
    /// Per env: the step number of its latest action.
    number: Vec<u64>,
    /// Per env: its latest action is with its worker (passed on, not yet received).
    is_out: Vec<bool>,
    /// Step number -> how many envs with an action out have it.
    out: BTreeMap<u64, usize>,
    /// Envs whose actions are held back, in the order they were sent.
    waiting: Vec<usize>,
}

impl SendOrder {
    /// Bookkeeping for `num_envs` envs.
    pub(super) fn new(num_envs: usize) -> SendOrder {
        SendOrder {
            number: vec![0; num_envs],
            is_out: vec![false; num_envs],
            out: BTreeMap::new(),
            waiting: Vec::new(),
        }
    }

    /// Numbers `env`'s new action and holds it back; [`SendOrder::release`] says when it
    /// goes to the worker.
    pub(super) fn send(&mut self, env: usize) {
        self.renumber(env);
        self.waiting.push(env);
    }

    /// Numbers `env`'s new action and records it as out with its worker at once (resets,
    /// which every env gets together).
    pub(super) fn send_now(&mut self, env: usize) {
        self.renumber(env);
        self.mark_out(env);
    }

    /// `env`'s result was received.
    pub(super) fn received(&mut self, env: usize) {
        if std::mem::take(&mut self.is_out[env]) {
            let n = self.number[env];
            if let Some(count) = self.out.get_mut(&n) {
                *count -= 1;
                if *count == 0 {
                    self.out.remove(&n);
                }
            }
        }
    }

    /// Takes `env` out of the held-back actions if it is there (its worker died: the
    /// restart hands its env over directly); it then counts as out.
    pub(super) fn take_waiting(&mut self, env: usize) {
        if let Some(at) = self.waiting.iter().position(|&e| e == env) {
            self.waiting.remove(at);
            self.mark_out(env);
        }
    }

    /// Whether `env`'s latest action is with its worker (passed on, not yet received).
    pub(super) fn is_out(&self, env: usize) -> bool {
        self.is_out[env]
    }

    /// Actions held back.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The envs whose held-back actions go to their workers now: those within
    /// [`MAX_LEAD`] of the lowest step number out, then, while the workers hold fewer than
    /// `batch_size` actions (`out_in_flight` now), the oldest of the rest.
    pub(super) fn release(&mut self, mut out_in_flight: usize, batch_size: usize) -> Vec<usize> {
        let limit = self.lowest_out().map_or(u64::MAX, |n| n.saturating_add(MAX_LEAD));
        let (go, mut stay): (Vec<usize>, Vec<usize>) =
            self.waiting.drain(..).partition(|&e| self.number[e] <= limit);
        out_in_flight += go.len();
        let extra = batch_size.saturating_sub(out_in_flight).min(stay.len());
        let mut released = go;
        released.extend(stay.drain(..extra));
        self.waiting = stay;
        for &e in &released {
            self.mark_out(e);
        }
        released
    }

    fn lowest_out(&self) -> Option<u64> {
        self.out.keys().next().copied()
    }

    /// One more than the env's last step number, but not more than `MAX_LEAD + 1` behind
    /// the lowest out: an env left idle for a while comes back a few steps behind the
    /// others, not with a debt that would hold them all back until it paid it off.
    fn renumber(&mut self, env: usize) {
        let floor = self.lowest_out().map_or(0, |n| n.saturating_sub(MAX_LEAD + 1));
        self.number[env] = (self.number[env] + 1).max(floor);
    }

    fn mark_out(&mut self, env: usize) {
        if !std::mem::replace(&mut self.is_out[env], true) {
            *self.out.entry(self.number[env]).or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_of_envs_that_keep_pace_go_out_at_once() {
        let mut order = SendOrder::new(4);
        (0..4).for_each(|e| order.send(e));
        assert_eq!(order.release(0, 2), vec![0, 1, 2, 3]);
        (0..4).for_each(|e| order.received(e));
        (0..4).for_each(|e| order.send(e));
        assert_eq!(order.release(0, 2), vec![0, 1, 2, 3]);
        assert_eq!(order.waiting(), 0);
    }

    #[test]
    fn an_env_too_far_ahead_waits_until_the_slowest_catches_up() {
        let mut order = SendOrder::new(2);
        order.send(0);
        order.send(1);
        assert_eq!(order.release(0, 1), vec![0, 1]);
        // Env 1 keeps coming back while env 0 is still out with step 1.
        for step in 2..=3 {
            order.received(1);
            order.send(1);
            assert_eq!(order.release(1, 1), vec![1], "step {step} is within the lead");
        }
        order.received(1);
        order.send(1); // step 4 = 1 + MAX_LEAD + 1: held back
        assert!(order.release(1, 1).is_empty());
        assert_eq!(order.waiting(), 1);
        // Env 0 comes back and goes out again with step 2: env 1's step 4 may go.
        order.received(0);
        order.send(0);
        assert_eq!(order.release(0, 1), vec![1, 0]);
    }

    #[test]
    fn a_batch_that_needs_more_actions_gets_the_oldest_held_back() {
        let mut order = SendOrder::new(3);
        (0..3).for_each(|e| order.send(e));
        assert_eq!(order.release(0, 2).len(), 3);
        // Env 0 is stuck; envs 1 and 2 run far ahead.
        for _ in 0..MAX_LEAD {
            for e in 1..3 {
                order.received(e);
                order.send(e);
            }
            assert_eq!(order.release(1, 2), vec![1, 2]);
        }
        for e in 1..3 {
            order.received(e);
            order.send(e);
        }
        // Only env 0 is out, and a batch needs 2: the older held-back action (env 1) goes.
        assert_eq!(order.release(1, 2), vec![1]);
        assert_eq!(order.waiting(), 1);
    }

    #[test]
    fn an_env_left_idle_comes_back_at_the_pace_of_the_others() {
        let mut order = SendOrder::new(2);
        order.send(0);
        order.send(1);
        order.release(0, 1);
        order.received(0); // env 0 is left idle from here on
        for _ in 0..10 {
            order.received(1);
            order.send(1);
            assert_eq!(order.release(0, 1), vec![1]);
        }
        order.send(0);
        assert_eq!(order.release(1, 1), vec![0]);
        assert_eq!(order.number[0], order.number[1] - MAX_LEAD - 1);
    }

    #[test]
    fn a_held_back_env_taken_over_by_a_restart_counts_as_out() {
        let mut order = SendOrder::new(2);
        order.send(0);
        order.send(1);
        order.take_waiting(1);
        order.take_waiting(1);
        assert_eq!(order.waiting(), 1);
        assert_eq!(order.out.values().sum::<usize>(), 1);
        assert_eq!(order.release(1, 1), vec![0]);
        assert_eq!(order.out.values().sum::<usize>(), 2);
    }
}
