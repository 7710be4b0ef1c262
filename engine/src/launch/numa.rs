//! Where a pool's rows live on a machine with more than one memory node.
//!
//! The trainer creates the region and pre-faults every page, and Linux places a page on
//! the node of the CPU that first touches it: left alone, every row would sit on the
//! trainer's node, and every worker on another node would write its results across the
//! interconnect each step. Before the pre-fault, the pool therefore asks the kernel to
//! place each worker's result rows on the node of the core that worker is pinned to
//! ([`worker_rows`], applied by `Region::grow_and_seal` with `mbind(MPOL_PREFERRED)`, the
//! region's shared policy for those pages). Only whole pages a worker's rows fill move: a
//! page shared by two workers' rows stays where the trainer touches it. Actions (the
//! trainer writes them), the trainer's own shard and async mode's rows (which hold
//! whichever envs finished first, from any worker) keep the trainer's node. On a machine
//! with one node (this project's test machines) nothing is asked of the kernel.

use crate::protocol::{Layout, PoolParams, PAGE};
use std::ops::Range;

/// The memory node of each worker's core (`None`: unpinned, or the core's node is not
/// known), or `None` when the machine has fewer than two nodes: then placement is moot.
pub(crate) fn worker_nodes(cpus: &[Option<usize>]) -> Option<Vec<Option<usize>>> {
    nodes_for(&crate::stats::machine::node_cpus(), cpus)
}

/// [`worker_nodes`] with the machine's node-to-CPUs map given.
fn nodes_for(node_cpus: &[Vec<usize>], cpus: &[Option<usize>]) -> Option<Vec<Option<usize>>> {
    if node_cpus.len() < 2 {
        return None;
    }
    let node_of = |cpu: usize| node_cpus.iter().position(|list| list.contains(&cpu));
    let nodes: Vec<Option<usize>> = cpus.iter().map(|cpu| cpu.and_then(node_of)).collect();
    nodes.iter().any(Option::is_some).then_some(nodes)
}

/// The byte ranges of the region to place on a node, with the node: in sync mode, the
/// whole pages of worker `w`'s result rows (every array of every block) go to `nodes[w]`.
/// Empty in async mode, and for workers with no known node.
pub(crate) fn worker_rows(
    layout: &Layout,
    params: &PoolParams,
    nodes: &[Option<usize>],
) -> Vec<(Range<usize>, usize)> {
    if layout.ring.is_some() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (w, node) in nodes.iter().enumerate().filter_map(|(w, node)| Some((w, (*node)?))) {
        let envs = params.shard(w);
        for block in &layout.blocks {
            out.extend(
                block
                    .slots()
                    .map(|slot| whole_pages(slot.rows(envs.clone())))
                    .filter(|r| !r.is_empty())
                    .map(|r| (r, node)),
            );
        }
    }
    out
}

/// The pages that lie wholly inside `bytes` (the range rounded inwards to page bounds).
fn whole_pages(bytes: Range<usize>) -> Range<usize> {
    let start = bytes.start.div_ceil(PAGE) * PAGE;
    let end = bytes.end / PAGE * PAGE;
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::AutoReset;
    use crate::spec::{DType, EnvSpec, Space};

    fn params(num_envs: usize, num_workers: usize, batch_size: usize, trainer_shard: bool) -> PoolParams {
        PoolParams {
            env_id: "CartPole-v1".into(),
            config: serde_json::json!({}),
            num_envs,
            num_workers,
            autoreset: AutoReset::NextStep,
            max_episode_steps: None,
            wait: crate::sync::WaitStrategy::Auto,
            batch_size,
            ring_depth: 2,
            stats: false,
            trace: false,
            restart: false,
            plugin: None,
            cores: 4,
            trainer_shard,
        }
    }

    fn cartpole() -> EnvSpec {
        EnvSpec::single(Space::boxed(DType::F32, &[4], -1.0, 1.0), Space::discrete(2))
    }

    #[test]
    fn nodes_come_from_the_cores_only_on_machines_with_two_nodes_or_more() {
        let two = [vec![0, 2], vec![1, 3]];
        assert_eq!(
            nodes_for(&two, &[Some(0), Some(1), None, Some(3)]),
            Some(vec![Some(0), Some(1), None, Some(1)])
        );
        assert_eq!(nodes_for(&two, &[None, None]), None, "no worker pinned: nothing to place");
        assert_eq!(nodes_for(&[vec![0, 1, 2, 3]], &[Some(0), Some(1)]), None, "one node");
        assert_eq!(nodes_for(&[], &[Some(0)]), None, "no node information");
    }

    #[test]
    fn each_worker_gets_the_whole_pages_of_its_own_rows_and_nobody_else_s() {
        let spec = cartpole();
        // 4096 envs, the trainer's shard and 3 workers: 1024 envs each.
        let p = params(4096, 3, 4096, true);
        let layout = Layout::compute(&spec, &p);
        let placed = worker_rows(&layout, &p, &[Some(0), Some(1), None]);
        assert!(!placed.is_empty());
        for (bytes, node) in &placed {
            assert_eq!((bytes.start % PAGE, bytes.end % PAGE), (0, 0), "{bytes:?}");
            assert!(bytes.start < bytes.end && bytes.end <= layout.total_size);
            // Every placed byte belongs to a row of the worker of that node, in some array.
            let w = *node; // workers 0 and 1 sit on nodes 0 and 1
            let owner = p.shard(w);
            let inside = layout.blocks.iter().any(|b| {
                b.slots().any(|s| {
                    let rows = s.rows(owner.clone());
                    rows.start <= bytes.start && bytes.end <= rows.end
                })
            });
            assert!(inside, "{bytes:?} on node {node} is not worker {w}'s");
        }
        // Worker 0's observation rows of the first block are placed (16 KiB of 16-byte rows).
        let obs0 = whole_pages(layout.blocks[0].obs[0].rows(p.shard(0)));
        assert!(placed.contains(&(obs0, 0)));
        // Nothing of the trainer's shard, of the actions or of worker 2 (no node) moves.
        let keep = [layout.actions.rows(0..4096), layout.blocks[0].obs[0].rows(p.trainer_envs())];
        let keep = keep.into_iter().chain([layout.blocks[0].obs[0].rows(p.shard(2))]);
        for k in keep {
            assert!(placed.iter().all(|(b, _)| b.end <= k.start || k.end <= b.start), "{k:?} was placed");
        }
    }

    #[test]
    fn async_rows_and_rows_smaller_than_a_page_stay_where_the_trainer_touches_them() {
        let spec = cartpole();
        let p = params(4096, 2, 1024, false);
        assert!(worker_rows(&Layout::compute(&spec, &p), &p, &[Some(0), Some(1)]).is_empty(), "async");
        let p = params(16, 2, 16, false);
        assert!(worker_rows(&Layout::compute(&spec, &p), &p, &[Some(0), Some(1)]).is_empty(), "16 envs");
        assert_eq!(whole_pages(100..5000), PAGE..PAGE);
        assert_eq!(whole_pages(4096..12288), 4096..12288);
    }
}
