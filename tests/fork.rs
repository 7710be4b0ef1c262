//! Fork safety: a pool belongs to the process that built it. In a forked child every call
//! returns `ForeignProcess` naming both pids, and dropping or closing the pool there
//! touches nothing of the parent's pool, which keeps stepping as if nothing happened.

mod common;

use common::{builder, child_pids, fork_and, Failed, Watchdog};
use shmenv::{Pool, PoolFailure};
use std::time::Duration;

/// What the forked child does with its copy of the pool.
#[derive(Clone, Copy, Debug)]
enum InChild {
    Drop,
    Close,
    Step,
    Send,
}

fn check_in_child(kind: InChild, pool: Pool) -> bool {
    let parent = pool.worker_pids().len(); // readable: plain memory of the copy
    let foreign = |e: PoolFailure| match e {
        PoolFailure::ForeignProcess { owner, current } => {
            let message = e.to_string();
            owner != current
                && current == std::process::id()
                && message.contains(&format!("belongs to process {owner}"))
                && message.contains(&format!("this is process {current}"))
                && message.contains("build a new pool")
        }
        _ => false,
    };
    let mut pool = pool;
    match kind {
        InChild::Drop => drop(pool),
        InChild::Close => return pool.close().iter().all(Option::is_none) && parent == 2,
        InChild::Step => {
            let ok = foreign(pool.step(&[1i64; 4]).map(|_| ()).unwrap_err().failed())
                && foreign(pool.reset().map(|_| ()).unwrap_err().failed());
            drop(pool);
            return ok;
        }
        InChild::Send => {
            let ok = foreign(pool.send(&[1i64; 2], &[0, 1]).unwrap_err().failed())
                && foreign(pool.recv().map(|_| ()).unwrap_err().failed());
            drop(pool);
            return ok;
        }
    }
    true
}

#[test]
fn a_pool_is_inert_in_a_forked_child_and_the_parent_keeps_stepping() {
    let _w = Watchdog::new("fork", Duration::from_secs(120));
    for batch in [4, 2] {
        let mut pool = Some(
            builder("CartPole-v1").num_envs(4).num_workers(2).batch_size(batch).seed(3).build().unwrap(),
        );
        let mut reference = builder("CartPole-v1").num_envs(4).num_workers(1).seed(3).build().unwrap();
        let pids = pool.as_ref().unwrap().worker_pids().to_vec();
        let p = pool.as_mut().unwrap();
        if p.is_async() {
            p.async_reset().unwrap();
            let mut seen = 0;
            while seen < 4 {
                seen += p.recv().unwrap().env_ids().len();
            }
        } else {
            p.reset().unwrap();
            reference.reset().unwrap();
        }
        let kinds = if batch == 4 {
            [InChild::Drop, InChild::Close, InChild::Step]
        } else {
            [InChild::Drop, InChild::Close, InChild::Send]
        };
        for kind in kinds {
            let status = fork_and(&mut pool, |copy| check_in_child(kind, copy));
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "batch {batch}, {kind:?}: the child failed (status {status:#x})"
            );
            let p = pool.as_mut().unwrap();
            assert_eq!(p.worker_pids(), &pids[..], "{kind:?}: workers changed");
            for _ in 0..20 {
                if p.is_async() {
                    p.send(&[1i64; 2], &[0, 1]).unwrap();
                    p.send(&[0i64; 2], &[2, 3]).unwrap();
                    let mut seen = 0;
                    while seen < 4 {
                        seen += p.recv().unwrap_or_else(|e| panic!("{kind:?}: {e}")).env_ids().len();
                    }
                } else {
                    let got =
                        common::batch_rows(&p.step(&[1i64; 4]).unwrap_or_else(|e| panic!("{kind:?}: {e}")));
                    let want = common::batch_rows(&reference.step(&[1i64; 4]).unwrap());
                    assert_eq!(got, want, "{kind:?}: the parent's stream changed");
                }
            }
        }
        let exits = pool.take().unwrap().close();
        assert!(exits.iter().all(|e| *e == Some(shmenv::WorkerExit::Code(0))), "{exits:?}");
    }
    assert!(child_pids().is_empty(), "child processes left behind");
}
