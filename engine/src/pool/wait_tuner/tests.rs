use super::*;

/// Feeds `tuner` batches whose cost in each mode comes from `cost` (ns), back to back,
/// for `seconds`, following the modes it asks for; returns the mode followed at the end
/// and the share of the time spent in `WaitMode::Sleep`.
fn run(
    tuner: &mut WaitTuner,
    now: &mut u64,
    seconds: f64,
    cost: impl Fn(WaitMode) -> u64,
) -> (WaitMode, f64) {
    let mut following = tuner.mode;
    let end = *now + (seconds * 1e9) as u64;
    let mut asleep = 0;
    while *now < end {
        let c = cost(following);
        *now += c;
        if following == WaitMode::Sleep {
            asleep += c;
        }
        if let Some(m) = tuner.on_call(*now, c, true) {
            following = m;
        }
    }
    (following, asleep as f64 / (seconds * 1e9))
}

#[test]
fn an_idle_pool_stays_active_and_probes_rarely() {
    let mut t = WaitTuner::new();
    let mut now = 1;
    // CartPole-like on an idle machine: 45 us a batch active, 55 us asleep.
    let (mode, asleep) = run(&mut t, &mut now, 10.0, |m| if m == WaitMode::Active { 45_000 } else { 55_000 });
    assert_eq!((mode, t.mode, t.switches), (WaitMode::Active, WaitMode::Active, 0));
    assert!(asleep < 0.02, "{asleep}");
    assert!(t.probes <= 10, "{}", t.probes);
}

#[test]
fn contention_makes_it_sleep_and_its_end_makes_it_active_again() {
    let mut t = WaitTuner::new();
    let mut now = 1;
    let idle = |m| if m == WaitMode::Active { 45_000 } else { 55_000 };
    let busy = |m| if m == WaitMode::Active { 3_000_000 } else { 130_000 };
    run(&mut t, &mut now, 1.0, idle);
    assert_eq!(t.mode, WaitMode::Active);
    // Contention comes: the drift starts a probe at once, which sleeping wins.
    let (mode, asleep) = run(&mut t, &mut now, 1.0, busy);
    assert_eq!((mode, t.mode, t.switches), (WaitMode::Sleep, WaitMode::Sleep, 1));
    assert!(asleep > 0.8, "{asleep}");
    // It goes: the batches get cheaper, a probe finds active faster again.
    let (mode, _) = run(&mut t, &mut now, 1.0, idle);
    assert_eq!((mode, t.switches), (WaitMode::Active, 2));
}

#[test]
fn a_quick_return_to_a_mode_waits_twice_as_long_before_leaving_it_again() {
    let mut t = WaitTuner::new();
    let s = 1_000_000_000;
    t.switch(s, 50_000.0);
    assert_eq!((t.mode, t.interval_ns), (WaitMode::Sleep, FIRST_INTERVAL_NS));
    // Back to waiting actively after 200 ms (sleeping won by chance): twice as long.
    t.switch(s + 200_000_000, 50_000.0);
    assert_eq!((t.mode, t.interval_ns), (WaitMode::Active, 2 * FIRST_INTERVAL_NS));
    t.switch(s + 500_000_000, 50_000.0);
    assert_eq!((t.mode, t.interval_ns), (WaitMode::Sleep, 2 * FIRST_INTERVAL_NS));
    t.switch(s + 600_000_000, 50_000.0);
    assert_eq!(t.interval_ns, 4 * FIRST_INTERVAL_NS);
    // A long stay asleep (contention that lasted) is no quick return.
    t.switch(s + 700_000_000, 50_000.0);
    t.switch(s + 5 * s, 50_000.0);
    assert_eq!((t.mode, t.interval_ns), (WaitMode::Active, FIRST_INTERVAL_NS));
}

#[test]
fn only_a_brief_spell_of_sleeping_pins_the_workers_again_at_once() {
    let s = 1_000_000_000;
    let mut t = WaitTuner::new();
    assert!(!t.slept_briefly());
    t.switch(s, 50_000.0);
    assert!(!t.slept_briefly(), "asleep");
    t.switch(s + 200_000_000, 50_000.0);
    assert!(t.slept_briefly(), "back after 200 ms: sleeping won by chance");
    t.switch(2 * s, 50_000.0);
    t.switch(7 * s, 50_000.0);
    assert!(!t.slept_briefly(), "back after 5 s: contention that lasted");
}

#[test]
fn small_batches_stay_active_through_wake_ups_and_single_stalls() {
    // 2 us a batch active, 20 us asleep (a trainer that steps a shard itself); the
    // first 3 batches back from sleeping pay a worker's wake-up from a deep idle state
    // (110 us each), and one batch in 200 stalls 150 us (an interrupt, a kernel thread).
    let mut t = WaitTuner::new();
    let (mut now, mut following, mut waking, mut k) = (1u64, WaitMode::Active, 0, 0u64);
    while now < 5_000_000_000 {
        k += 1;
        let mut c = if following == WaitMode::Active { 2_000 } else { 20_000 };
        if waking > 0 {
            (c, waking) = (110_000, waking - 1);
        } else if k % 200 == 0 {
            c += 150_000;
        }
        now += c;
        if let Some(m) = t.on_call(now, c, true) {
            if (following, m) == (WaitMode::Sleep, WaitMode::Active) {
                waking = 3;
            }
            following = m;
        }
    }
    assert_eq!((t.mode, t.switches), (WaitMode::Active, 0), "{} probes", t.probes);
}

#[test]
fn a_mode_within_the_margin_does_not_take_over() {
    let mut t = WaitTuner::new();
    let mut now = 1;
    let (mode, _) = run(&mut t, &mut now, 5.0, |m| if m == WaitMode::Active { 100_000 } else { 97_000 });
    assert_eq!((mode, t.switches), (WaitMode::Active, 0));
}

#[test]
fn time_outside_pool_calls_counts_only_up_to_its_cap() {
    let mut t = WaitTuner::new();
    let mut now = 0;
    for k in 0..100u64 {
        // 10 us inside, 30 us outside, and one 1 s pause (an SGD phase) at batch 50.
        now += 30_000 + if k == 50 { 1_000_000_000 } else { 0 } + 10_000;
        t.on_call(now, 10_000, true);
    }
    assert!(t.outside_avg_ns < 200_000.0, "{}", t.outside_avg_ns);
    // The window with the pause (compared in the probe it started) counts it as 140 us.
    let Phase::Probe { against, .. } = t.phase else { panic!("{:?}", t.phase) };
    assert_eq!((t.chosen(), t.following()), (WaitMode::Active, WaitMode::Sleep));
    assert!(against.mean() < 100_000.0, "{}", against.mean());
}

#[test]
fn a_sleeping_pool_keeps_its_workers_pinned_only_while_other_programs_leave_the_cores_alone() {
    use WaitMode::{Active, Sleep};
    let free = || true;
    // Asleep (a probe of sleeping included): the last window decides; none yet: unpinned.
    for placed in [Active, Sleep] {
        assert_eq!(placement(Sleep, placed, false, Some(false), free), Active);
        assert_eq!(placement(Sleep, placed, false, Some(true), free), Sleep);
        assert_eq!(placement(Sleep, placed, false, None, free), Sleep);
    }
    // Waiting actively: workers stay where they are until pinning them again is due...
    assert_eq!(placement(Active, Sleep, false, Some(false), free), Sleep);
    assert_eq!(placement(Active, Active, true, Some(true), free), Active);
    // ...and are pinned then only if neither the last window nor the runnable tasks say the
    // cores are busy (the runnable tasks are not even read after a busy window).
    assert_eq!(placement(Active, Sleep, true, Some(false), free), Active);
    assert_eq!(placement(Active, Sleep, true, None, free), Active);
    assert_eq!(placement(Active, Sleep, true, Some(true), || panic!("not asked")), Sleep);
    assert_eq!(placement(Active, Sleep, true, Some(false), || false), Sleep);
}
