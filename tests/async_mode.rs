//! Async mode (batch_size < num_envs): batches of whichever envs finish first, written in
//! place into the ring. Every env sent an action appears in exactly one later batch; per-env
//! trajectories equal sync mode's; actions reach their env; nothing is lost or duplicated
//! however many times the ring wraps; no env starves.

mod common;

use common::{builder, Failed, Watchdog};
use serde_json::json;
use shmenv::{AutoReset, Batch, PoolFailure, RecvError, ResetError, SendError, StepError, WrongMode};
use std::collections::HashMap;
use std::time::Duration;

/// Env `e`'s `t`-th action (t counts steps since the first reset).
fn action(e: usize, t: usize) -> i64 {
    ((e * 7 + t * 3 + t / 5) % 2) as i64
}

/// One env's results, one entry per result row: obs, reward, flags, final obs.
type Stream = Vec<(Vec<f32>, f32, bool, bool, Option<Vec<f32>>)>;

fn record(batch: &Batch<'_>, streams: &mut HashMap<usize, Stream>) -> Vec<usize> {
    let obs = batch.observations::<f32>().unwrap();
    let finals = batch.final_obs::<f32>("obs").ok();
    let mut ids = Vec::new();
    for (r, &e) in batch.env_ids().iter().enumerate() {
        let done = batch.terminated().get(r) || batch.truncated().get(r);
        let fin = finals.as_ref().filter(|_| done).map(|f| f.row(r).to_vec());
        streams.entry(e as usize).or_default().push((
            obs.row(r).to_vec(),
            batch.rewards()[r],
            batch.terminated().get(r),
            batch.truncated().get(r),
            fin,
        ));
        ids.push(e as usize);
    }
    ids
}

fn sync_streams(n: usize, mode: AutoReset, steps: usize) -> HashMap<usize, Stream> {
    let mut pool = builder("CartPole-v1").num_envs(n).num_workers(2).seed(5).autoreset(mode).build().unwrap();
    let mut streams = HashMap::new();
    record(&pool.reset().unwrap(), &mut streams);
    for t in 0..steps {
        let a: Vec<i64> = (0..n).map(|e| action(e, t)).collect();
        record(&pool.step(&a).unwrap(), &mut streams);
    }
    streams
}

#[test]
fn per_env_streams_equal_sync_mode_and_every_send_comes_back_once() {
    let _w = Watchdog::new("async equals sync", Duration::from_secs(120));
    let n = 7;
    for mode in [AutoReset::NextStep, AutoReset::SameStep] {
        let want = sync_streams(n, mode, 40);
        for (workers, batch, depth) in [(1, 1, 2), (2, 3, 2), (3, 2, 3), (2, 6, 4)] {
            let ctx = format!("{mode:?}, {workers} workers, batch {batch}, depth {depth}");
            let mut pool = builder("CartPole-v1")
                .num_envs(n)
                .num_workers(workers)
                .batch_size(batch)
                .ring_depth(depth)
                .seed(5)
                .autoreset(mode)
                .build()
                .unwrap();
            assert!(pool.is_async());
            let mut got: HashMap<usize, Stream> = HashMap::new();
            let mut sent = vec![0usize; n]; // actions sent per env
            let mut in_flight = vec![true; n];
            let mut ids = record(&pool.reset().unwrap(), &mut got);
            for &e in &ids {
                in_flight[e] = false;
            }
            // Until every env has 30 results (a worker that the OS does not schedule for a
            // while makes no progress; the others fill the batches meanwhile, as they should).
            for _ in 0..100_000 {
                if (0..n).all(|e| got.get(&e).is_some_and(|s| s.len() >= 30)) {
                    break;
                }
                let a: Vec<i64> = ids.iter().map(|&e| action(e, sent[e])).collect();
                pool.send(&a, &ids).unwrap();
                for &e in &ids {
                    sent[e] += 1;
                    in_flight[e] = true;
                }
                ids = record(&pool.recv().unwrap(), &mut got);
                for &e in &ids {
                    assert!(in_flight[e], "{ctx}: env {e} came back without being sent");
                    in_flight[e] = false;
                }
            }
            // Drain: every env in flight comes back exactly once.
            while pool.in_flight() >= batch {
                for e in record(&pool.recv().unwrap(), &mut got) {
                    assert!(in_flight[e], "{ctx}: env {e} came back twice");
                    in_flight[e] = false;
                }
            }
            for e in 0..n {
                let (g, w) = (&got[&e], &want[&e]);
                let k = g.len().min(w.len());
                assert!(k > 20, "{ctx}: env {e} made too little progress ({k} results)");
                assert_eq!(g[..k], w[..k], "{ctx}: env {e}'s stream differs from sync mode");
                // Results received = actions sent + the reset (envs still in flight excepted).
                assert_eq!(g.len(), sent[e] + 1 - usize::from(in_flight[e]), "{ctx}: env {e}");
            }
        }
    }
}

#[test]
fn the_ring_wraps_many_times_without_losing_or_duplicating_a_step() {
    let _w = Watchdog::new("ring wrap", Duration::from_secs(240));
    // Burn-v0 with a 9-step episode: elapsed_steps must go 1, 2, ... and back to 0 after
    // an episode ends, for every env, in every batch.
    let n = 5;
    let mut pool = builder("Burn-v0")
        .config(json!({"episode_len": 9}))
        .num_envs(n)
        .num_workers(3)
        .batch_size(2)
        .ring_depth(2)
        .seed(0)
        .build()
        .unwrap();
    let mut last: Vec<Option<(u32, bool)>> = vec![None; n];
    let check = |batch: &Batch<'_>, last: &mut Vec<Option<(u32, bool)>>| -> Vec<usize> {
        let mut ids = Vec::new();
        for (r, &e) in batch.env_ids().iter().enumerate() {
            let e = e as usize;
            let elapsed = batch.elapsed_steps()[r];
            let done = batch.terminated().get(r) || batch.truncated().get(r);
            let expected = match last[e] {
                None | Some((_, true)) => 0,
                Some((prev, false)) => prev + 1,
            };
            assert_eq!(elapsed, expected, "env {e}: a step was lost or duplicated");
            last[e] = Some((elapsed, done));
            ids.push(e);
        }
        ids
    };
    let mut ids = check(&pool.reset().unwrap(), &mut last);
    let rows = if cfg!(debug_assertions) { 200_000 } else { 2_000_000 };
    let mut received = ids.len();
    while received < rows {
        pool.send(&vec![0i64; ids.len()], &ids).unwrap();
        ids = check(&pool.recv().unwrap(), &mut last);
        received += ids.len();
    }
}

#[test]
fn envs_come_back_in_the_order_their_worker_got_them() {
    // No starvation: each worker's queue is FIFO and result rows are claimed in the order
    // envs finish, so among the envs of one worker, results come back in the order the
    // actions were sent, whatever the step costs and however the OS schedules workers.
    let _w = Watchdog::new("fifo", Duration::from_secs(120));
    let (n, b) = (12, 4);
    let mut pool = builder("Burn-v0")
        .config(json!({"step_us": 200, "step_us_jitter": 190}))
        .num_envs(n)
        .num_workers(3)
        .batch_size(b)
        .seed(3)
        .build()
        .unwrap();
    let worker_of = |e: usize| (0..3).find(|&w| pool.shard(w).contains(&e)).unwrap();
    let worker_of: Vec<usize> = (0..n).map(worker_of).collect();
    let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); 3];
    for e in 0..n {
        queues[worker_of[e]].push_back(e); // the reset
    }
    let take = |ids: &[u32], queues: &mut Vec<std::collections::VecDeque<usize>>| -> Vec<usize> {
        ids.iter()
            .map(|&e| {
                let e = e as usize;
                let q = &mut queues[worker_of[e]];
                assert_eq!(q.front(), Some(&e), "env {e} overtook an env its worker got earlier");
                q.pop_front();
                e
            })
            .collect()
    };
    let mut ids = take(pool.reset().unwrap().env_ids(), &mut queues);
    for _ in 0..300 {
        pool.send(&vec![0i64; ids.len()], &ids).unwrap();
        for &e in &ids {
            queues[worker_of[e]].push_back(e);
        }
        ids = take(pool.recv().unwrap().env_ids(), &mut queues);
    }
}

#[test]
fn async_calls_check_their_arguments() {
    let _w = Watchdog::new("async errors", Duration::from_secs(60));
    let mut pool = builder("CartPole-v1").num_envs(4).num_workers(2).batch_size(2).seed(0).build().unwrap();
    assert!(matches!(pool.send(&[0i64], &[0]), Err(SendError::NotReset)));
    assert!(matches!(pool.step(&[0i64; 4]), Err(StepError::WrongMode(WrongMode { call: "step", .. }))));
    let ids: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    assert_eq!(ids.len(), 2);
    let other: Vec<usize> = (0..4).filter(|e| !ids.contains(e)).collect();
    // The envs not in the first batch are still in flight (their reset).
    let e = pool.send(&[0i64], &other[..1]).unwrap_err();
    assert!(matches!(e, SendError::EnvBusy { env_id } if env_id == other[0]), "{e:?}");
    assert!(matches!(pool.send(&[0i64], &[9]), Err(SendError::BadEnvId { env_id: 9, num_envs: 4 })));
    assert!(matches!(pool.send(&[0i64, 1], &[ids[0], ids[0]]), Err(SendError::EnvBusy { .. })));
    assert!(matches!(pool.send(&[5i64, 0], &ids), Err(SendError::Action(_))));
    // Nothing above was sent: two envs in flight, one batch to receive, then none.
    assert_eq!(pool.in_flight(), 2);
    pool.recv().unwrap();
    let e = pool.recv().unwrap_err();
    assert!(e.to_string().contains("needs at least batch_size = 2 envs in flight, but 0 are"), "{e}");
    assert!(matches!(pool.async_reset(), Ok(())));
    assert!(matches!(pool.async_reset(), Err(ResetError::InFlight { .. })));

    let mut sync = builder("CartPole-v1").num_envs(2).num_workers(1).build().unwrap();
    sync.reset().unwrap();
    let e = sync.send(&[0i64], &[0]).unwrap_err();
    assert!(e.to_string().contains("this pool is sync"), "{e}");
    assert!(matches!(sync.recv(), Err(RecvError::WrongMode(WrongMode { call: "recv", .. }))));
    let err = builder("CartPole-v1").num_envs(4).batch_size(5).build().unwrap_err();
    assert!(err.to_string().contains("batch_size must be between 1 and num_envs (4), got 5"), "{err}");
    let err = builder("CartPole-v1").num_envs(4).batch_size(2).ring_depth(1).build().unwrap_err();
    assert!(err.to_string().contains("ring_depth must be between 2 and 64"), "{err}");
}

#[test]
fn batches_are_contiguous_views_of_the_ring() {
    let _w = Watchdog::new("async zero copy", Duration::from_secs(60));
    let mut pool = builder("Pendulum-v1").num_envs(6).num_workers(2).batch_size(3).seed(1).build().unwrap();
    let range = pool.mapping_lease().address_range();
    let batch = pool.reset().unwrap();
    let obs = batch.observations::<f32>().unwrap();
    assert_eq!(obs.shape(), &[3, 3]);
    let (start, end) = (obs.as_slice().as_ptr() as usize, obs.as_slice().as_ptr() as usize + 9 * 4);
    assert!(range.contains(&start) && range.contains(&(end - 1)));
    assert_eq!(batch.rewards().len(), 3);
    assert_eq!(batch.env_ids().len(), 3);
}

#[test]
fn closing_while_workers_wait_for_a_full_ring_exits_them_cleanly() {
    let _w = Watchdog::new("close with full ring", Duration::from_secs(60));
    let mut pool = builder("CartPole-v1")
        .num_envs(8)
        .num_workers(2)
        .batch_size(1)
        .ring_depth(2)
        .seed(0)
        .build()
        .unwrap();
    let first: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    pool.send(&[0i64], &first).unwrap();
    // Eight results are on their way into a ring of two one-row blocks, and nothing is
    // received: the workers end up waiting for the trainer to release a block.
    std::thread::sleep(Duration::from_millis(50));
    let exits = pool.close();
    assert_eq!(exits, vec![Some(shmenv::WorkerExit::Code(0)); 2], "workers were killed instead of exiting");
}

#[test]
fn a_panicking_env_in_async_mode_is_reported_with_its_id() {
    let _w = Watchdog::new("async env panic", Duration::from_secs(60));
    let config = json!({"fault": "panic", "fault_step": 2, "fault_seed": 13});
    let mut pool =
        builder("Burn-v0").config(config).num_envs(4).num_workers(2).batch_size(2).seed(10).build().unwrap();
    let mut ids: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    // Keep stepping until the failure surfaces (the other worker keeps filling batches
    // meanwhile; the watchdog bounds the wait).
    let mut outcome = Ok(());
    for _ in 0..10_000_000 {
        if let Err(e) = pool.send(&vec![0i64; ids.len()], &ids) {
            outcome = Err(e.failed());
            break;
        }
        match pool.recv() {
            Ok(b) => ids = b.env_ids().iter().map(|&e| e as usize).collect(),
            Err(e) => {
                outcome = Err(e.failed());
                break;
            }
        }
    }
    match outcome {
        Err(PoolFailure::EnvPanicked { env_id, message }) => {
            assert_eq!(env_id, 3);
            assert!(message.contains("fault injected at step 2"), "{message}");
        }
        other => panic!("expected EnvPanicked for env 3, got {other:?}"),
    }
    assert!(matches!(pool.recv().map(|_| ()).unwrap_err().failure(), Some(PoolFailure::Closed { .. })));
}

/// Runs `recvs` batches of an EnvPool-style loop (recv, send the same envs back) and
/// returns each env's step count and the longest run of batches it was absent from.
fn sample_counts(n: usize, batch: usize, workers: usize, recvs: usize) -> (Vec<usize>, Vec<usize>) {
    let mut pool =
        builder("CartPole-v1").num_envs(n).num_workers(workers).batch_size(batch).seed(1).build().unwrap();
    let mut counts = vec![0usize; n];
    let mut last_seen = vec![0usize; n];
    let mut gap = vec![0usize; n];
    let mut ids: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    for t in 1..=recvs {
        let actions = vec![0i64; ids.len()];
        pool.send(&actions, &ids).unwrap();
        ids = pool.recv().unwrap().env_ids().iter().map(|&e| e as usize).collect();
        for &e in &ids {
            counts[e] += 1;
            gap[e] = gap[e].max(t - last_seen[e]);
            last_seen[e] = t;
        }
    }
    for e in 0..n {
        gap[e] = gap[e].max(recvs - last_seen[e]);
    }
    (counts, gap)
}

#[test]
fn async_sampling_is_fair_across_workers() {
    let _w = Watchdog::new("fair sampling", Duration::from_secs(240));
    for (n, batch, workers) in [(8, 4, 2), (16, 5, 3)] {
        let (counts, gaps) = sample_counts(n, batch, workers, 20_000);
        let mean = counts.iter().sum::<usize>() as f64 / n as f64;
        for (e, &c) in counts.iter().enumerate() {
            let off = (c as f64 - mean).abs() / mean;
            assert!(
                off <= 0.10,
                "{n}/{batch}/{workers}: env {e} stepped {c} times, mean {mean:.0} ({counts:?})"
            );
        }
        let spread = counts.iter().max().unwrap() - counts.iter().min().unwrap();
        assert!(spread <= 8, "{n}/{batch}/{workers}: step counts {counts:?} differ by {spread}");
        // An env can be overtaken by at most about two rounds of the others (the send
        // window is twice the env count), plus the round it was sent in.
        // Step numbers of envs out stay within 2 of the lowest (the pool's lead), and an
        // env just received may be up to 3 behind it: at most 6 steps of each other env
        // pass while one env is out.
        let bound = 6 * n / batch + 2;
        let worst = *gaps.iter().max().unwrap();
        assert!(worst <= bound, "{n}/{batch}/{workers}: an env was absent from {worst} batches in a row, bound {bound} ({gaps:?})");
    }
}

#[test]
fn retained_batches_stay_intact_until_the_second_recv_after_them() {
    let _w = Watchdog::new("retained batches", Duration::from_secs(120));
    let n = 8;
    let mut pool = builder("CartPole-v1")
        .num_envs(n)
        .num_workers(2)
        .batch_size(4)
        .ring_depth(2)
        .retain_batches(1)
        .seed(3)
        .build()
        .unwrap();
    // Copies of each batch as received, and a raw view that outlives the borrow (what a
    // binding hands out): it must still read the same after the next send and recv.
    let first = pool.reset().unwrap();
    let (mut ids, mut obs_ptr): (Vec<usize>, *const f32) = (
        first.env_ids().iter().map(|&e| e as usize).collect(),
        first.observations::<f32>().unwrap().as_slice().as_ptr(),
    );
    let mut copy: Vec<f32> = first.observations::<f32>().unwrap().as_slice().to_vec();
    for _ in 0..3000 {
        pool.send(&vec![1i64; ids.len()], &ids).unwrap();
        let next = pool.recv().unwrap();
        let next_ids: Vec<usize> = next.env_ids().iter().map(|&e| e as usize).collect();
        let next_ptr = next.observations::<f32>().unwrap().as_slice().as_ptr();
        let next_copy = next.observations::<f32>().unwrap().as_slice().to_vec();
        // Time for the workers to write elsewhere (or, were it released, here).
        std::thread::sleep(Duration::from_micros(50));
        // SAFETY: `obs_ptr` points at the previous batch's observations in the mapping,
        // which the pool keeps intact (retain_batches = 1) until the next recv begins.
        let previous = unsafe { std::slice::from_raw_parts(obs_ptr, copy.len()) };
        assert_eq!(previous, &copy[..], "the previous batch changed before the second recv after it");
        (ids, obs_ptr, copy) = (next_ids, next_ptr, next_copy);
    }
}
