//! Unit tests of the semaphores, the waiting phases and the wait modes (threads, not processes).

use super::atomic::AtomicU32;
use super::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn words() -> Arc<[AtomicU32; 2]> {
    Arc::new([AtomicU32::new(0), AtomicU32::new(0)])
}

#[test]
fn counts_posts_and_acquires_many_at_once() {
    let w = words();
    let s = Semaphore::new(&w[0], &w[1]);
    assert!(!s.try_acquire(1));
    s.post();
    s.post();
    assert!(!s.try_acquire(3));
    assert!(s.try_acquire(2));
    assert_eq!(s.count(), 0);
}

#[test]
fn every_strategy_hands_off_between_threads() {
    for strategy in [WaitStrategy::Auto, WaitStrategy::Spin, WaitStrategy::Yield, WaitStrategy::Block] {
        let ping = words();
        let pong = words();
        let (p2, q2) = (ping.clone(), pong.clone());
        let policy = strategy.policy(2, 2);
        let rounds = 2000;
        let t = std::thread::spawn(move || {
            let mut waiter = Waiter::new(policy);
            let ping = Semaphore::new(&p2[0], &p2[1]);
            let pong = Semaphore::new(&q2[0], &q2[1]);
            for _ in 0..rounds {
                ping.acquire(1, &mut waiter, None, || None::<()>).unwrap();
                pong.post();
            }
        });
        let mut waiter = Waiter::new(policy);
        let ping_s = Semaphore::new(&ping[0], &ping[1]);
        let pong_s = Semaphore::new(&pong[0], &pong[1]);
        for _ in 0..rounds {
            ping_s.post();
            pong_s.acquire(1, &mut waiter, None, || None::<()>).unwrap();
        }
        t.join().unwrap();
        assert_eq!(ping_s.count(), 0, "{strategy:?}");
        assert_eq!(pong_s.count(), 0, "{strategy:?}");
    }
}

#[test]
fn a_sleeping_consumer_is_woken_only_by_the_post_it_waits_for() {
    let w = words();
    let w2 = w.clone();
    let t = std::thread::spawn(move || {
        let s = Semaphore::new(&w2[0], &w2[1]);
        let mut waiter = Waiter::new(WaitStrategy::Block.policy(1, 1));
        s.acquire(3, &mut waiter, None, || None::<()>).unwrap();
    });
    let s = Semaphore::new(&w[0], &w[1]);
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(5));
        s.post();
    }
    t.join().unwrap();
    assert_eq!(s.count(), 0);
}

#[test]
fn check_aborts_and_deadline_times_out() {
    let w = words();
    let s = Semaphore::new(&w[0], &w[1]);
    let mut waiter = Waiter::new(WaitStrategy::Auto.policy(2, 2));
    let mut calls = 0;
    let r = s.acquire(1, &mut waiter, None, || {
        calls += 1;
        (calls > 3).then_some("dead")
    });
    assert_eq!(r, Err(WaitOutcome::Aborted("dead")));
    let r = s.acquire(1, &mut waiter, Some(Instant::now() + Duration::from_millis(30)), || None::<()>);
    assert_eq!(r, Err(WaitOutcome::TimedOut));
}

#[test]
fn adaptive_waiter_sleeps_early_after_long_waits() {
    let mut w = Waiter::new(WaitStrategy::Auto.policy(2, 2));
    assert_eq!(w.budgets().0, Duration::from_micros(50));
    for _ in 0..64 {
        w.record(Duration::from_millis(20));
    }
    assert_eq!(w.budgets(), (Duration::ZERO, Duration::from_micros(20)));
}

#[test]
fn sleep_mode_skips_spinning_and_yielding_only_for_the_adaptive_policy() {
    let mut auto = Waiter::new(WaitStrategy::Auto.policy(2, 2));
    auto.follow(WaitMode::Sleep);
    assert_eq!(auto.budgets(), (Duration::ZERO, Duration::ZERO));
    auto.follow(WaitMode::Active);
    assert_eq!(auto.budgets().0, Duration::from_micros(50));
    let mut spin = Waiter::new(WaitStrategy::Spin.policy(2, 2));
    spin.follow(WaitMode::Sleep);
    assert_eq!(spin.budgets().0, Duration::from_millis(10));
    assert_eq!(WaitMode::from_word(WaitMode::Sleep as u32), WaitMode::Sleep);
    assert_eq!(WaitMode::from_word(7), WaitMode::Active);
}

#[test]
fn a_pool_waits_by_the_trainers_core_count() {
    // A worker pinned to one core counts the pool's cores, not its own: with 1 worker on
    // 2 cores every process spins first.
    let shared = WaitStrategy::Auto.pool_policy(1, 2);
    assert!(!shared.spin.is_zero());
    assert!(WaitStrategy::Auto.pool_policy(1, 1).spin.is_zero());
    let params = |cores| crate::protocol::PoolParams {
        env_id: "CartPole-v1".into(),
        config: serde_json::json!({}),
        num_envs: 2,
        num_workers: 1,
        autoreset: crate::protocol::AutoReset::NextStep,
        max_episode_steps: None,
        wait: WaitStrategy::Auto,
        batch_size: 2,
        ring_depth: 2,
        stats: false,
        trace: false,
        restart: false,
        plugin: None,
        cores,
        trainer_shard: false,
    };
    assert_eq!(params(2).policy_cores(), 2);
    assert_eq!(params(0).policy_cores(), available_cores());
}
