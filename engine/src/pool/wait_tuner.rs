//! The wait tuner: how the trainer of a [`WaitStrategy::Auto`](crate::WaitStrategy::Auto)
//! pool decides, while it runs, whether its processes wait actively (spin and yield, then
//! sleep) or sleep at once, and (`Core::tune`) how the pool applies that choice: the
//! `WAIT_MODE` word, its own waiter and where the workers run.
//!
//! Neither is best everywhere, and the difference is large both ways (figures in
//! `docs/waiting.md`, "Waiting under contention"): on an idle machine a yield hands the
//! core to the partner within a context switch while a futex wake-up costs tens of
//! microseconds; with other processes competing for the cores a yield hands a whole time
//! slice to a stranger, and a spinning waiter burns the slice its partner needs, so sleeping
//! is many times faster. Signals such as run-queue delay do not tell the two apart (a
//! yielding trainer waits in the run queue on an idle machine too), so the tuner measures
//! the only thing that matters: what a batch costs the trainer in each mode.
//!
//! The cost of a batch is the time from one batch to the next, with the time the trainer
//! spends outside pool calls capped at a few times its running average (an SGD phase or a
//! log flush between two batches is not the pool's doing). The tuner runs in the chosen
//! mode, measuring it in windows of at least 8 batches and 20 ms. When a probe is due it
//! runs as many batches as the last window in the other mode, and switches when they cost
//! [`MARGIN`] less (to wait actively again, in two probes in a row: see [`wins_needed`]).
//! A probe stops as soon as it has cost more than the window it is compared with, or its
//! batches cost more than the window's mean (by [`MARGIN`]) over 8 batches, 1.5x over 3 or
//! 4x over any: trying the wrong mode costs at most one window, 8 batches when it is worse
//! (as sleeping is on an idle machine), and a batch or two when it is far worse. Probes come 100 ms
//! after a switch and twice as far apart after each probe that confirms the mode, up to
//! 2 s; while active, 3 or more batches that cost twice what the last probe measured
//! (contention came) start one at once, but for the first window after a probe (the
//! processes' return costs a few wake-ups), and while asleep a window at a third (it went).

use super::Core;
use crate::protocol;
use crate::sync::WaitMode;
use std::sync::atomic::Ordering;

/// A window ends after this many batches and [`MIN_WINDOW_NS`], or after
/// [`MAX_WINDOW_NS`] with at least [`FEW_BATCHES`].
const MIN_BATCHES: u32 = 8;
/// Shortest window: a few scheduler slices, so that a window sees what contention does.
const MIN_WINDOW_NS: u64 = 20_000_000;
/// Longest window (slow envs): it ends here once it has [`FEW_BATCHES`].
const MAX_WINDOW_NS: u64 = 200_000_000;
/// Fewest batches in a window.
const FEW_BATCHES: u32 = 3;
/// The other mode takes over when its batches cost this share less.
pub(super) const MARGIN: f64 = 0.05;
/// Workers unpinned while the pool slept are pinned again only once it has waited actively
/// this long: under contention that comes and goes, a pinned worker waits for the core a
/// busy process holds while an unpinned one moves to the other.
pub(super) const REPIN_AFTER_NS: u64 = 2_000_000_000;
/// After the cores were found busy, the workers stay unpinned at least this long before
/// the next look (see [`Core::cores_look_free`]).
pub(super) const BUSY_RECHECK_NS: u64 = 100_000_000;
/// A probe whose batches (even its first, of transition) cost this many times the
/// compared window's mean ends at once.
const FAR_WORSE: f64 = 4.0;
/// A return to a mode this soon after leaving it doubles the interval before the next
/// probe of the mode left (see [`WaitTuner::switch`]).
const REVERT_NS: u64 = 1_000_000_000;
/// A probe whose first [`FEW_BATCHES`] or more cost this many times the compared window's
/// mean ends there: the other mode is far worse (as waiting actively is under contention).
const LOSING: f64 = 1.5;
/// The first probe, and the next one after a switch, comes this long after.
const FIRST_INTERVAL_NS: u64 = 100_000_000;
/// Probes that confirm the mode double the interval up to this.
const MAX_INTERVAL_NS: u64 = 2_000_000_000;
/// Batches this many times costlier than the last probe measured, while active, start a
/// probe.
const DRIFT: f64 = 2.0;
/// Time outside pool calls counts up to this many times its running average (plus
/// [`OUTSIDE_SLACK_NS`]).
const OUTSIDE_CAP: f64 = 4.0;
/// See [`OUTSIDE_CAP`].
const OUTSIDE_SLACK_NS: f64 = 20_000.0;

/// Probes in a row that `mode` must win to take over, given the cost of the probe's
/// batches against the compared window's (`ratio`): two to start waiting actively (a pool
/// that does so under contention loses most of its speed until the next probe; a lucky
/// window must not be enough); to start sleeping, one when it is far cheaper (contention:
/// every batch counts) and two otherwise (on an idle machine a window can be a few percent
/// off by chance, and sleeping there costs a wake-up a batch). A probe that a drift
/// started (`drifted`: compared with the drift's few batches) needs two as well: one stall
/// of a few tens of microseconds (an interrupt, a kernel thread) makes such a window look
/// like contention; contention that stays drifts the next window at once.
fn wins_needed(mode: WaitMode, ratio: f64, drifted: bool) -> u32 {
    match mode {
        WaitMode::Active => 2,
        WaitMode::Sleep if ratio < CLEARLY_CHEAPER && !drifted => 1,
        WaitMode::Sleep => 2,
    }
}

/// See [`wins_needed`].
const CLEARLY_CHEAPER: f64 = 0.75;

/// Batches measured in one mode.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Window {
    start_ns: u64,
    batches: u32,
    cost_ns: f64,
}

impl Window {
    fn starting(now_ns: u64) -> Window {
        Window { start_ns: now_ns, batches: 0, cost_ns: 0.0 }
    }

    fn add(&mut self, cost_ns: f64) {
        self.batches += 1;
        self.cost_ns += cost_ns;
    }

    fn is_complete(&self, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.start_ns);
        (self.batches >= MIN_BATCHES && elapsed >= MIN_WINDOW_NS)
            || (self.batches >= FEW_BATCHES && elapsed >= MAX_WINDOW_NS)
    }

    fn mean(&self) -> f64 {
        self.cost_ns / f64::from(self.batches.max(1))
    }
}

/// Where the tuner is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Running in the chosen mode, measuring it window after window: the window that
    /// ends after the next probe is due (or that shows a drift) is what the probe is
    /// compared with.
    Settled(Window),
    /// Running in the other mode: `skip` batches of transition, then `window`, compared
    /// with the chosen mode's window `against` (`drifted`: the few batches of a drift).
    Probe { skip: u32, window: Window, against: Window, drifted: bool },
}

/// The tuner's state (pure: it is fed times and answers with modes; the pool applies them).
#[derive(Clone, Debug)]
pub(super) struct WaitTuner {
    mode: WaitMode,
    phase: Phase,
    /// When the last batch was returned (`None` before the first).
    last_batch_ns: Option<u64>,
    /// Time inside pool calls since the last batch.
    call_ns: u64,
    /// Running average of the time outside pool calls per batch (capped samples).
    outside_avg_ns: f64,
    /// Mean batch cost of the chosen mode's last window (0 before the first).
    settled_cost_ns: f64,
    interval_ns: u64,
    next_probe_ns: u64,
    /// The interval between probes while asleep, kept across a short excursion into
    /// waiting actively (see [`WaitTuner::switch`]).
    sleep_interval_ns: u64,
    /// The same while active, kept across a short excursion into sleeping.
    active_interval_ns: u64,
    /// When the tuner last chose to wait actively.
    active_since_ns: u64,
    /// When the tuner last chose to sleep.
    sleep_since_ns: u64,
    /// Probes in a row that the other mode won.
    wins: u32,
    /// The processes are returning to the chosen mode after a probe: the window running
    /// is not checked for a drift.
    returning: bool,
    /// Probes so far.
    pub probes: u64,
    /// Switches so far.
    pub switches: u64,
}

impl WaitTuner {
    /// A tuner starting in `WaitMode::Active`; its first probe comes after
    /// `FIRST_INTERVAL_NS` of batches.
    pub(super) fn new() -> WaitTuner {
        WaitTuner {
            mode: WaitMode::Active,
            phase: Phase::Settled(Window::default()),
            last_batch_ns: None,
            call_ns: 0,
            outside_avg_ns: 0.0,
            settled_cost_ns: 0.0,
            interval_ns: FIRST_INTERVAL_NS,
            next_probe_ns: u64::MAX,
            sleep_interval_ns: FIRST_INTERVAL_NS,
            active_interval_ns: FIRST_INTERVAL_NS,
            active_since_ns: 0,
            sleep_since_ns: 0,
            wins: 0,
            returning: false,
            probes: 0,
            switches: 0,
        }
    }

    /// The mode chosen (a probe may be running the other one).
    pub(super) fn chosen(&self) -> WaitMode {
        self.mode
    }

    /// The mode the pool's processes follow now: the chosen one, or the other while a
    /// probe runs it.
    pub(super) fn following(&self) -> WaitMode {
        match self.phase {
            Phase::Settled(_) => self.mode,
            Phase::Probe { .. } => self.mode.other(),
        }
    }

    /// How long the tuner has waited actively since it last chose to (0 while asleep; from
    /// the pool's start before it first slept).
    pub(super) fn active_for_ns(&self, now_ns: u64) -> u64 {
        match self.mode {
            WaitMode::Active => now_ns.saturating_sub(self.active_since_ns),
            WaitMode::Sleep => 0,
        }
    }

    /// Whether the tuner, waiting actively, came back from sleeping within [`REVERT_NS`]:
    /// sleeping looked cheaper only for a window or two (on an idle machine, by chance).
    pub(super) fn slept_briefly(&self) -> bool {
        self.mode == WaitMode::Active
            && self.switches > 0
            && self.active_since_ns.saturating_sub(self.sleep_since_ns) < REVERT_NS
    }

    /// Records a pool call that took `call_ns` and ended at `now_ns`; `batch` when it
    /// returned a batch of steps. Returns the mode the pool's processes must follow from
    /// now on when it changes.
    pub(super) fn on_call(&mut self, now_ns: u64, call_ns: u64, batch: bool) -> Option<WaitMode> {
        self.call_ns += call_ns;
        if !batch {
            return None;
        }
        let inside = std::mem::take(&mut self.call_ns) as f64;
        let Some(last) = self.last_batch_ns.replace(now_ns) else {
            // Waiting actively since the pool's first batch (for the re-pinning delay).
            self.active_since_ns = now_ns;
            self.settle(now_ns, 0.0);
            return None;
        };
        let outside = (now_ns.saturating_sub(last) as f64 - inside).max(0.0);
        let outside = if self.outside_avg_ns == 0.0 {
            outside
        } else {
            outside.min(OUTSIDE_CAP * self.outside_avg_ns + OUTSIDE_SLACK_NS)
        };
        self.outside_avg_ns += (outside - self.outside_avg_ns) / 16.0;
        self.on_batch(now_ns, inside + outside)
    }

    fn on_batch(&mut self, now_ns: u64, cost_ns: f64) -> Option<WaitMode> {
        match &mut self.phase {
            Phase::Settled(window) => {
                window.add(cost_ns);
                let window = *window;
                let complete = window.is_complete(now_ns);
                // The first window back from a probe begins with the processes' return
                // (workers asleep wake up, from a deep idle state: a few batches of
                // 100 us): no drift there, or a wake-up would look like contention.
                let drifted = !self.returning && self.drifted(&window, complete);
                if complete {
                    self.returning = false;
                }
                if !complete && !drifted {
                    return None;
                }
                if now_ns >= self.next_probe_ns || drifted {
                    self.probes += 1;
                    self.phase =
                        Phase::Probe { skip: 1, window: Window::default(), against: window, drifted };
                    return Some(self.mode.other());
                }
                self.phase = Phase::Settled(Window::starting(now_ns));
                None
            }
            Phase::Probe { skip, window, against, drifted } => {
                if *skip > 0 {
                    // The processes are still changing modes: not counted, unless it
                    // already shows the other mode far worse.
                    *skip -= 1;
                    *window = Window::starting(now_ns);
                    if cost_ns <= FAR_WORSE * against.mean() {
                        return None;
                    }
                }
                window.add(cost_ns);
                let (window, against, drifted) = (*window, *against, *drifted);
                let hopeless = window.mean() > FAR_WORSE * against.mean()
                    || (window.batches >= FEW_BATCHES && window.mean() > LOSING * against.mean())
                    || (window.batches >= MIN_BATCHES && window.mean() > (1.0 + MARGIN) * against.mean());
                if hopeless || window.cost_ns > against.cost_ns * (1.0 - MARGIN) {
                    // The other mode has already cost more: stay.
                    self.interval_ns = (self.interval_ns * 2).min(MAX_INTERVAL_NS);
                    self.keep_interval();
                    self.settle(now_ns, against.mean());
                    self.returning = true;
                    return Some(self.mode);
                }
                if window.batches < against.batches {
                    return None;
                }
                self.wins += 1;
                let ratio = window.mean() / against.mean().max(1.0);
                if self.wins < wins_needed(self.mode.other(), ratio, drifted) {
                    // Won once: measure the chosen mode again and probe again at once.
                    self.phase = Phase::Settled(Window::starting(now_ns));
                    self.next_probe_ns = now_ns;
                    self.returning = true;
                    return Some(self.mode);
                }
                self.switch(now_ns, window.mean());
                None
            }
        }
    }

    /// Whether the batches of `window` cost what makes the other mode worth a try before
    /// the next probe is due: while active, 3 or more at twice what the last probe measured
    /// (contention came); while asleep, a whole window at a third (it went: under
    /// contention the cost of sleeping swings widely, so only a large drop counts).
    fn drifted(&self, window: &Window, complete: bool) -> bool {
        self.settled_cost_ns > 0.0
            && match self.mode {
                WaitMode::Active => {
                    window.batches >= FEW_BATCHES && window.mean() > DRIFT * self.settled_cost_ns
                }
                WaitMode::Sleep => complete && window.mean() * 3.0 < self.settled_cost_ns,
            }
    }

    /// Takes the other mode. Probes of the mode left start `FIRST_INTERVAL_NS` after, but
    /// for a return within [`REVERT_NS`] of leaving a mode: the other one then looked better
    /// only for a while (under contention waiting actively has fast stretches of tens of
    /// milliseconds between stalls of a time slice each; on an idle machine a window of
    /// sleeping can look a few percent cheaper by chance), so the next try waits twice as
    /// long as the last.
    fn switch(&mut self, now_ns: u64, cost_ns: f64) {
        self.mode = self.mode.other();
        self.switches += 1;
        // The excursion into the mode left began when that mode was taken.
        let (excursion_began, kept) = match self.mode {
            WaitMode::Active => (self.sleep_since_ns, self.active_interval_ns),
            WaitMode::Sleep => (self.active_since_ns, self.sleep_interval_ns),
        };
        match self.mode {
            WaitMode::Active => self.active_since_ns = now_ns,
            WaitMode::Sleep => self.sleep_since_ns = now_ns,
        }
        self.interval_ns = if now_ns.saturating_sub(excursion_began) < REVERT_NS {
            (kept * 2).min(MAX_INTERVAL_NS)
        } else {
            FIRST_INTERVAL_NS
        };
        self.keep_interval();
        self.settle(now_ns, cost_ns);
    }

    /// Remembers the current interval as the chosen mode's (see [`WaitTuner::switch`]).
    fn keep_interval(&mut self) {
        match self.mode {
            WaitMode::Active => self.active_interval_ns = self.interval_ns,
            WaitMode::Sleep => self.sleep_interval_ns = self.interval_ns,
        }
    }

    fn settle(&mut self, now_ns: u64, cost_ns: f64) {
        self.wins = 0;
        self.phase = Phase::Settled(Window::starting(now_ns));
        self.settled_cost_ns = cost_ns;
        self.next_probe_ns = now_ns.saturating_add(self.interval_ns);
    }
}

/// Where `Core::tune` places the workers (`Active`: on their cores, `Sleep`: anywhere),
/// given the mode they follow, where they are, whether pinning them again is due in
/// `active`, what the last window of other programs' CPU time said (`None`: no window yet)
/// and, asked only when it matters, whether the runnable tasks leave the cores free.
fn placement(
    following: WaitMode,
    placed_for: WaitMode,
    repin_due: bool,
    others_busy: Option<bool>,
    cores_look_free: impl FnOnce() -> bool,
) -> WaitMode {
    match following {
        WaitMode::Sleep if others_busy == Some(false) => WaitMode::Active,
        WaitMode::Sleep => WaitMode::Sleep,
        WaitMode::Active if !repin_due || placed_for == WaitMode::Active => placed_for,
        WaitMode::Active if others_busy == Some(true) || !cores_look_free() => WaitMode::Sleep,
        WaitMode::Active => WaitMode::Active,
    }
}

impl Core {
    /// Feeds the tuner a pool call that ended at `now_ns` after `call_ns`, and applies what
    /// it chose: the mode every process waits in and where the workers run.
    pub(super) fn tune(&mut self, now_ns: u64, call_ns: u64, steps: bool) {
        let Some(tuner) = self.tuner.as_mut() else { return };
        let follow = tuner.on_call(now_ns, call_ns, steps);
        let (probes, switches, chosen) = (tuner.probes, tuner.switches, tuner.chosen());
        let (following, active_for) = (tuner.following(), tuner.active_for_ns(now_ns));
        let slept_briefly = tuner.slept_briefly();
        if let Some(mode) = follow {
            self.follow_wait_mode(mode);
            self.pool_stats().set_wait(chosen, probes, switches);
        }
        // While the pool sleeps (a probe of sleeping included) the workers stay pinned only
        // while other programs are known to leave the cores alone (a pinned worker waits
        // for the core a busy process holds, however it waits; beside the trainer's own
        // threads, between batches, pinned workers step faster, asleep too). Pinned again
        // once the pool has waited actively for a while (see `REPIN_AFTER_NS`), or at once
        // after a brief spell of sleeping (sleeping did not hold up: the machine is idle,
        // where pinned workers are faster). Never pinned again while other tasks hold the
        // cores, however waiting actively came to win (under contention it wins stretches
        // by chance).
        let others_busy = match self.pinned.first() {
            Some(Some(_)) => self.others.look(now_ns, self.supervisor.pids()),
            _ => None,
        };
        let repin_due = active_for >= REPIN_AFTER_NS || slept_briefly;
        let placement =
            placement(following, self.placed_for, repin_due, others_busy, || self.cores_look_free(now_ns));
        self.place_workers(placement);
    }

    /// Whether unpinned workers may be pinned again: the machine runs no more runnable
    /// tasks than this pool's processes (the trainer and its workers, waiting actively) or,
    /// if it has more, than its cores. A busy answer holds for [`BUSY_RECHECK_NS`] (one read
    /// of `/proc/loadavg` per interval, not per batch).
    fn cores_look_free(&mut self, now_ns: u64) -> bool {
        if now_ns < self.busy_until_ns {
            return false;
        }
        // The pool's own processes, or as many as the cores when it has fewer: other tasks
        // on cores it does not need are not its business.
        let own = (self.pinned.len() + 1).max(crate::sync::available_cores());
        let free = crate::launch::runnable_tasks().is_none_or(|running| running <= own);
        if !free {
            self.busy_until_ns = now_ns.saturating_add(BUSY_RECHECK_NS);
        }
        free
    }

    /// Makes every process of the pool wait in `mode`: the trainer now, the workers from
    /// their next wait (they read the `WAIT_MODE` word).
    fn follow_wait_mode(&mut self, mode: WaitMode) {
        self.region.atomic_u32(protocol::WAIT_MODE).store(mode as u32, Ordering::Relaxed);
        self.waiter.follow(mode);
    }

    /// Places the workers pinned by `CpuAffinity::Auto` as `tune` chose: on their cores for
    /// `Active`, anywhere for `Sleep` (a pinned worker cannot flee a core a busy process
    /// holds).
    fn place_workers(&mut self, mode: WaitMode) {
        if mode == self.placed_for || self.supervisor.any_exited() {
            return; // A pid may be stale after an exit: placement waits for the next call.
        }
        self.placed_for = mode;
        for (&pid, &cpu) in self.supervisor.pids().iter().zip(&self.pinned) {
            if cpu.is_some() {
                crate::launch::place(pid, cpu.filter(|_| mode == WaitMode::Active));
            }
        }
    }

    /// A replacement of worker `w` is placed like the others: on its core or anywhere, as
    /// `tune` last chose (it was spawned where the pool's first workers were: on its core,
    /// or anywhere when the cores were busy at the start).
    pub(super) fn place_replacement(&self, w: usize) {
        if let Some(&Some(cpu)) = self.pinned.get(w) {
            crate::launch::place(
                self.supervisor.pids()[w],
                Some(cpu).filter(|_| self.placed_for == WaitMode::Active),
            );
        }
    }
}

#[cfg(test)]
mod tests;
