//! Async mode: fair scheduling. Envs are bound to workers, so a worker that gets less CPU
//! (it shares a core with the trainer, or the OS runs it less) would have its envs stepped
//! less often than the others': whichever envs finish first fill the batches, and they are
//! the ones sent again. EnvPool avoids this with one queue for all its threads; shmenv
//! evens it out in the trainer instead. Each worker's progress is the results it delivered
//! per env it hosts; a sent action goes to its worker's queue only while that worker is at
//! most [`MAX_LEAD`] steps per env ahead of the slowest worker that has work. Actions for
//! a worker further ahead wait in the trainer, and `recv` waits for the slow worker (which
//! gives it the core). Within a worker, envs are served in send order (its queue is FIFO).
//! So in a loop that sends every received env back, every env's step count stays within a
//! few steps of every other's. When the workers hold fewer actions than a batch needs, the
//! waiting actions of the least advanced workers go regardless, so a batch always
//! completes (an env stuck in a hang does not stop the others; the step timeout handles
//! the hang).
//!
//! Pure bookkeeping (no shared memory), a few array updates per env and O(workers) per
//! call: [`super::RingState`] asks it what to enqueue.

use std::collections::VecDeque;

/// How many steps per env a worker may be ahead of the slowest busy worker and still be
/// handed actions. Small enough that counts stay even, large enough that workers keeping
/// pace never wait for each other.
pub(in crate::pool) const MAX_LEAD: u64 = 2;

/// Per worker: results delivered, actions out, actions held back.
#[derive(Debug, Default)]
pub(in crate::pool) struct SendOrder {
    /// Whether to hold actions back at all (`PoolBuilder::fair_scheduling`); without it
    /// every action goes out at once, as it is sent.
    fair: bool,
    /// Per env: its worker.
    worker_of: Vec<usize>,
    /// Per worker: how many envs it hosts.
    shard_len: Vec<u64>,
    /// Per worker: results received from its envs (raised when it comes back from idle,
    /// so it does not return with a debt that would hold every other worker back).
    delivered: Vec<u64>,
    /// Per worker: actions in its queue whose results were not received yet.
    out: Vec<usize>,
    /// Per worker: envs whose actions are held back, in the order they were sent.
    held: Vec<VecDeque<usize>>,
    /// Per env: its latest action is held back.
    is_held: Vec<bool>,
    /// Actions held back, over all workers.
    held_total: usize,
    /// Scratch for [`SendOrder::send`] (kept to avoid an allocation per call).
    allowed: Vec<u8>,
}

impl SendOrder {
    /// Bookkeeping for envs hosted as `worker_of` says, by workers hosting `shard_len` envs;
    /// `fair` turns the holding back on.
    pub(in crate::pool) fn new(worker_of: Vec<usize>, shard_len: Vec<u64>, fair: bool) -> SendOrder {
        let (workers, envs) = (shard_len.len(), worker_of.len());
        SendOrder {
            fair,
            worker_of,
            shard_len,
            delivered: vec![0; workers],
            out: vec![0; workers],
            held: vec![VecDeque::new(); workers],
            is_held: vec![false; envs],
            held_total: 0,
            allowed: Vec::new(),
        }
    }

    /// New actions for `envs`: each goes to `enqueue` now if its worker is within the
    /// lead and holds nothing back already (so a worker's actions stay in send order), or
    /// is held back until [`SendOrder::release`] lets it go. A few array reads per env;
    /// the lead is worked out once per worker and call.
    pub(in crate::pool) fn send(&mut self, envs: &[usize], mut enqueue: impl FnMut(usize)) {
        if !self.fair {
            envs.iter().for_each(|&env| enqueue(env));
            return;
        }
        let slowest = self.slowest_busy();
        // Per worker, for this call: 0 not yet known, 1 within the lead, 2 too far ahead.
        let mut allowed = std::mem::take(&mut self.allowed);
        allowed.clear();
        allowed.resize(self.out.len(), 0);
        for &env in envs {
            let w = self.worker_of[env];
            if allowed[w] == 0 {
                if self.out[w] == 0 && self.held[w].is_empty() {
                    self.forgive_debt(w, slowest);
                }
                allowed[w] = if slowest.is_none_or(|s| self.within_lead(w, s)) { 1 } else { 2 };
            }
            if allowed[w] == 1 && self.held[w].is_empty() {
                self.out[w] += 1;
                enqueue(env);
            } else {
                self.held[w].push_back(env);
                self.is_held[env] = true;
                self.held_total += 1;
            }
        }
        self.allowed = allowed;
    }

    /// Records `env`'s new action as out with its worker at once (resets, which every env
    /// gets together).
    pub(in crate::pool) fn send_now(&mut self, env: usize) {
        self.out[self.worker_of[env]] += 1;
    }

    /// `env`'s result was received.
    pub(in crate::pool) fn received(&mut self, env: usize) {
        let w = self.worker_of[env];
        self.out[w] = self.out[w].saturating_sub(1);
        self.delivered[w] += 1;
    }

    /// Takes `env` out of the held-back actions if it is there (its worker died: the
    /// restart hands its env over directly); it then counts as out.
    pub(in crate::pool) fn take_held(&mut self, env: usize) {
        if std::mem::take(&mut self.is_held[env]) {
            let w = self.worker_of[env];
            self.held[w].retain(|&e| e != env);
            self.held_total -= 1;
            self.out[w] += 1;
        }
    }

    /// Whether `env`'s latest action is held back in the trainer.
    pub(in crate::pool) fn is_held(&self, env: usize) -> bool {
        self.is_held[env]
    }

    /// Actions held back.
    pub(in crate::pool) fn held(&self) -> usize {
        self.held_total
    }

    /// The envs whose held-back actions go to their workers now: every worker within
    /// [`MAX_LEAD`] of the slowest busy one gets all of its own; then, while the workers
    /// hold fewer than `need` actions (`out_in_flight` now), the least advanced workers'
    /// oldest.
    pub(in crate::pool) fn release(
        &mut self,
        mut out_in_flight: usize,
        need: usize,
        mut enqueue: impl FnMut(usize),
    ) {
        if self.held_total == 0 {
            return;
        }
        let slowest = self.slowest_busy();
        for w in 0..self.held.len() {
            if !self.held[w].is_empty() && slowest.is_none_or(|s| self.within_lead(w, s)) {
                out_in_flight += self.held[w].len();
                self.pass_on(w, usize::MAX, &mut enqueue);
            }
        }
        while out_in_flight < need && self.held_total > 0 {
            let w = (0..self.held.len())
                .filter(|&w| !self.held[w].is_empty())
                .min_by(|&a, &b| self.compare_progress(a, b))
                .expect("some worker holds actions");
            let take = need - out_in_flight;
            out_in_flight += take.min(self.held[w].len());
            self.pass_on(w, take, &mut enqueue);
        }
    }

    /// Hands up to `count` of worker `w`'s held-back actions to `enqueue`, oldest first.
    fn pass_on(&mut self, w: usize, count: usize, enqueue: &mut impl FnMut(usize)) {
        for _ in 0..count {
            let Some(env) = self.held[w].pop_front() else { break };
            self.is_held[env] = false;
            self.held_total -= 1;
            self.out[w] += 1;
            enqueue(env);
        }
    }

    /// The least advanced worker with actions out or held back.
    fn slowest_busy(&self) -> Option<usize> {
        (0..self.out.len())
            .filter(|&w| self.out[w] > 0 || !self.held[w].is_empty())
            .min_by(|&a, &b| self.compare_progress(a, b))
    }

    /// `delivered[a] / shard_len[a]` against the same for `b`, in integers.
    fn compare_progress(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let lhs = self.delivered[a] as u128 * self.shard_len[b] as u128;
        let rhs = self.delivered[b] as u128 * self.shard_len[a] as u128;
        lhs.cmp(&rhs)
    }

    /// Whether worker `w` is at most [`MAX_LEAD`] steps per env ahead of worker `s`.
    fn within_lead(&self, w: usize, s: usize) -> bool {
        let lhs = self.delivered[w] as u128 * self.shard_len[s] as u128;
        let rhs = (self.delivered[s] + MAX_LEAD * self.shard_len[s]) as u128 * self.shard_len[w] as u128;
        lhs <= rhs
    }

    /// Worker `w`, idle until now, comes back at most `MAX_LEAD + 1` steps per env behind
    /// the slowest busy worker `slowest`.
    fn forgive_debt(&mut self, w: usize, slowest: Option<usize>) {
        let Some(s) = slowest else { return };
        let floor =
            (self.delivered[s] as u128 * self.shard_len[w] as u128 / self.shard_len[s] as u128) as u64;
        let floor = floor.saturating_sub((MAX_LEAD + 1) * self.shard_len[w]);
        self.delivered[w] = self.delivered[w].max(floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl SendOrder {
        /// `send`, returning what went out at once.
        fn send_list(&mut self, envs: &[usize]) -> Vec<usize> {
            let mut out = Vec::new();
            self.send(envs, |e| out.push(e));
            out
        }

        /// `release`, returning what went out.
        fn release_list(&mut self, out_in_flight: usize, need: usize) -> Vec<usize> {
            let mut out = Vec::new();
            self.release(out_in_flight, need, |e| out.push(e));
            out
        }
    }

    /// Two workers hosting envs 0-1 and 2-3, every env sent once and out.
    fn two_by_two() -> SendOrder {
        let mut order = SendOrder::new(vec![0, 0, 1, 1], vec![2, 2], true);
        assert_eq!(order.send_list(&[0, 1, 2, 3]), vec![0, 1, 2, 3]);
        order
    }

    /// Receives `envs` and sends them again; returns what went out at once.
    fn round(order: &mut SendOrder, envs: &[usize]) -> Vec<usize> {
        envs.iter().for_each(|&e| order.received(e));
        order.send_list(envs)
    }

    #[test]
    fn actions_of_workers_that_keep_pace_go_out_at_once() {
        let mut order = two_by_two();
        for _ in 0..10 {
            assert_eq!(round(&mut order, &[0, 1, 2, 3]), vec![0, 1, 2, 3]);
        }
        assert_eq!(order.held(), 0);
        assert!(order.release_list(0, 4).is_empty());
    }

    #[test]
    fn a_worker_too_far_ahead_waits_until_the_slowest_catches_up() {
        let mut order = two_by_two();
        // Worker 1's envs keep coming back while worker 0's are still out.
        for r in 0..MAX_LEAD {
            assert_eq!(round(&mut order, &[2, 3]), vec![2, 3], "round {r} is within the lead");
        }
        assert!(round(&mut order, &[2, 3]).is_empty(), "3 steps per env ahead: held back");
        assert!(order.is_held(2) && order.held() == 2);
        assert!(order.release_list(2, 2).is_empty(), "worker 0's two actions make a batch");
        // Worker 0 delivers one round: worker 1 is within the lead again.
        assert_eq!(round(&mut order, &[0, 1]), vec![0, 1]);
        assert_eq!(order.release_list(4, 2), vec![2, 3]);
        assert_eq!(order.held(), 0);
    }

    #[test]
    fn a_batch_that_needs_more_actions_gets_the_least_advanced_held_back() {
        let mut order = SendOrder::new(vec![0, 1, 1, 2, 2], vec![1, 2, 2], true);
        assert_eq!(order.send_list(&[0, 1, 2, 3, 4]).len(), 5);
        // Worker 0 (env 0) is stuck; workers 1 and 2 run ahead until they are held back.
        for _ in 0..=MAX_LEAD {
            round(&mut order, &[1, 2, 3, 4]);
        }
        assert_eq!(order.held(), 4);
        // Only env 0 is out and a batch needs 3: two more go, from one worker, oldest first.
        assert_eq!(order.release_list(1, 3), vec![1, 2]);
        assert_eq!(order.held(), 2);
    }

    #[test]
    fn a_worker_left_idle_comes_back_without_a_debt() {
        let mut order = two_by_two();
        order.received(0);
        order.received(1); // worker 0 is left idle from here on
        for _ in 0..10 {
            assert_eq!(round(&mut order, &[2, 3]), vec![2, 3]);
        }
        assert_eq!(order.send_list(&[0, 1]), vec![0, 1]);
        assert_eq!(order.delivered[0], order.delivered[1] - (MAX_LEAD + 1) * 2);
    }

    #[test]
    fn without_fair_scheduling_nothing_is_held_back() {
        let mut order = SendOrder::new(vec![0, 0, 1, 1], vec![2, 2], false);
        assert_eq!(order.send_list(&[0, 1, 2, 3]), vec![0, 1, 2, 3]);
        for _ in 0..10 {
            assert_eq!(round(&mut order, &[2, 3]), vec![2, 3]);
        }
        assert_eq!(order.held(), 0);
    }

    #[test]
    fn a_held_back_env_taken_over_by_a_restart_counts_as_out() {
        let mut order = two_by_two();
        for _ in 0..=MAX_LEAD {
            round(&mut order, &[2, 3]);
        }
        assert!(order.is_held(2));
        order.take_held(2);
        order.take_held(2);
        assert_eq!((order.held(), order.out[1]), (1, 1));
        assert!(!order.is_held(2));
    }
}
