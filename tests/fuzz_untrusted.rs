//! Property-based fuzzing of everything that parses bytes or values a process did not
//! write itself: the region header, the JSON the region carries (pool parameters, worker
//! reports, env specs), env configs, actions, and the restart policy's recovery plan (over
//! ring state other processes wrote). Each must answer Ok or a typed error for
//! any input, never panic, and what it accepts must satisfy the invariants the rest of
//! the code relies on.
//!
//! CI runs 256 cases per target; for a long run:
//! `PROPTEST_CASES=200000 cargo test --release --test fuzz_untrusted`.

use proptest::prelude::*;
use shmenv::worker::Registry;
use shmenv::{DType, EnvSpec, Space};
use shmenv_engine::action;
use shmenv_engine::protocol::{self, Header, Layout, PoolParams, WorkerReport};

/// Arbitrary JSON, biased towards the shapes the parsers look for.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into)),
        prop_oneof![
            Just("inf"),
            Just("-inf"),
            Just("nan"),
            Just("Box"),
            Just("Discrete"),
            Just("f32"),
            Just("u8"),
            Just("i64"),
            Just("panic"),
            Just("hang"),
            Just("NextStep"),
            Just("")
        ]
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("type"),
            Just("dtype"),
            Just("shape"),
            Just("low"),
            Just("high"),
            Just("n"),
            Just("start"),
            Just("nvec"),
            Just("observations"),
            Just("action"),
            Just("name"),
            Just("space"),
            Just("max_episode_steps"),
            Just("step_us"),
            Just("obs_shape"),
            Just("obs_dtype"),
            Just("g"),
            Just("episode_len"),
            Just("fault"),
            Just("fault_step"),
            Just("x")
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map(keys.prop_map(String::from), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn small_space() -> impl Strategy<Value = Space> {
    let dtype =
        prop_oneof![Just(DType::F32), Just(DType::F64), Just(DType::U8), Just(DType::I32), Just(DType::I64)];
    prop_oneof![
        (dtype, prop::collection::vec(0usize..4, 0..3), -10.0f64..10.0, 0.0f64..10.0)
            .prop_map(|(d, shape, low, width)| Space::boxed(d, &shape, low, low + width)),
        (1i64..10, -5i64..5).prop_map(|(n, start)| Space::Discrete { n, start }),
        prop::collection::vec(1i64..6, 1..4).prop_map(|nvec| Space::multi_discrete(&nvec)),
        (1usize..6).prop_map(Space::multi_binary),
    ]
}

proptest! {
    /// Any 64 bytes as a header, against any region size: Ok only if consistent.
    #[test]
    fn header_validation_never_panics(bytes in prop::collection::vec(any::<u8>(), 64), len in 0usize..(1 << 24)) {
        let header: Header = bytemuck::pod_read_unaligned(&bytes[..std::mem::size_of::<Header>()]);
        if header.validate(len).is_ok() {
            prop_assert!(header.num_workers >= 1 && header.num_envs >= header.num_workers);
            prop_assert!(header.bootstrap_size as usize <= len);
            prop_assert_eq!(header.bootstrap_size as usize, protocol::bootstrap_size(header.num_workers as usize));
            prop_assert!(header.params_len as usize <= protocol::PARAMS_CAPACITY);
        }
    }

    /// The JSON a region carries (params, reports, specs) and env configs: any value is
    /// parsed or refused, and the built-in envs build or refuse with a message.
    #[test]
    fn region_json_and_configs_never_panic(value in json_value()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        let _ = serde_json::from_slice::<PoolParams>(&bytes);
        let _ = serde_json::from_slice::<WorkerReport>(&bytes);
        if let Ok(spec) = EnvSpec::from_json(&value) {
            prop_assert!(spec.validate().is_ok());
            prop_assert!(spec.observations.iter().all(|o| o.space.validate().is_ok()));
        }
        let registry = Registry::with_builtins();
        for id in registry.ids() {
            if let Ok(env) = registry.make(&id, &value) {
                prop_assert!(env.spec().validate().is_ok(), "{} accepted {} with an invalid spec", id, value);
            }
        }
    }

    /// Shapes whose element or byte count overflows a `usize` (or passes 1 GiB) are refused
    /// by every space that takes a shape, as JSON from a spec and as Burn's config, with
    /// the shape and the limit named; none panics, none is laid out at a wrapped size.
    #[test]
    fn shapes_whose_size_overflows_are_refused(
        dims in prop::collection::vec(1usize..=usize::MAX, 1..5),
        big in (1usize << 16)..=usize::MAX,
        dtype in prop::sample::select(vec![DType::U8, DType::F32, DType::F64, DType::I64]),
    ) {
        let mut shape = dims;
        shape.push(big);
        shape.push(big);
        let bytes = shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        let dtype = dtype.name();
        prop_assume!(bytes.is_none_or(|b| b > shmenv_engine::spec::space::MAX_VALUE_BYTES));
        let spaces = [
            serde_json::json!({"type": "Box", "dtype": dtype, "shape": shape, "low": 0, "high": 1}),
            serde_json::json!({"type": "MultiDiscrete", "nvec": [2], "shape": shape, "dtype": "i64"}),
            serde_json::json!({"type": "MultiBinary", "n": 4, "shape": shape}),
        ];
        for space in spaces {
            let e = Space::from_json(&space).unwrap_err().to_string();
            prop_assert!(e.contains(&format!("{shape:?}")) && e.contains("1 GiB"), "{}", e);
            let spec = serde_json::json!({"observations": [{"name": "obs", "space": space}], "action": {"type": "Discrete", "n": 2, "start": 0}});
            prop_assert!(EnvSpec::from_json(&spec).is_err());
        }
        let registry = Registry::with_builtins();
        let config = serde_json::json!({"obs_shape": shape, "obs_dtype": "u8"});
        let e = registry.make("Burn-v0", &config).err().expect("refused").to_string();
        prop_assert!(e.contains("obs_shape") && e.contains("1 GiB"), "{}", e);
    }

    /// Actions against spaces: never panics; accepted actions are inside the space.
    #[test]
    fn action_validation_never_panics(
        space in small_space(),
        num_envs in 0usize..4,
        floats in prop::collection::vec(prop_oneof![any::<f32>(), Just(f32::NAN), Just(f32::INFINITY)], 0..24),
        ints in prop::collection::vec(prop_oneof![any::<i64>(), -6i64..10], 0..24),
    ) {
        let f: Result<(), _> = action::validate(&space, num_envs, &floats);
        let i: Result<(), _> = action::validate(&space, num_envs, &ints);
        let bytes: Vec<u8> = ints.iter().map(|&v| v as u8).collect();
        let _ = action::validate(&space, num_envs, &bytes);
        let per = space.num_elements();
        if i.is_ok() {
            prop_assert_eq!(ints.len(), num_envs * per);
            match &space {
                Space::Discrete { n, start } => prop_assert!(ints.iter().all(|v| *v >= *start && *v < start + n)),
                Space::MultiDiscrete { nvec, .. } => {
                    prop_assert!(ints.iter().enumerate().all(|(k, v)| *v >= 0 && *v < nvec[k % per]))
                }
                _ => {}
            }
        }
        if f.is_ok() {
            prop_assert!(floats.iter().all(|v| v.is_finite()), "a non-finite action was accepted");
        }
    }

    /// Layouts for any small spec and pool shape: every range inside the region, none
    /// overlapping, offsets aligned.
    #[test]
    fn layouts_are_disjoint_and_inside(
        obs in prop::collection::vec(small_space(), 1..4),
        action in small_space(),
        num_workers in 1usize..4,
        extra_envs in 0usize..8,
        async_mode in any::<bool>(),
        depth in 2usize..5,
        same_step in any::<bool>(),
        trace in any::<bool>(),
    ) {
        let num_envs = num_workers + extra_envs;
        let spec = EnvSpec {
            observations: obs.into_iter().enumerate()
                .map(|(k, space)| shmenv::ObsArray { name: format!("o{k}"), space, info: false }).collect(),
            action,
            max_episode_steps: None,
            single_key_dict: false,
        };
        prop_assume!(spec.validate().is_ok());
        let params = PoolParams {
            env_id: "x".into(),
            config: serde_json::json!({}),
            num_envs,
            num_workers,
            autoreset: if same_step { shmenv::AutoReset::SameStep } else { shmenv::AutoReset::NextStep },
            max_episode_steps: None,
            wait: shmenv::WaitStrategy::Auto,
            batch_size: if async_mode { (num_envs / 2).max(1) } else { num_envs },
            ring_depth: depth,
            stats: true,
            trace,
            restart: false,
            plugin: None,
            cores: 0,
            trainer_shard: false,
        };
        let layout = Layout::compute(&spec, &params);
        let mut ranges = layout.byte_ranges();
        ranges.sort_by_key(|r| r.start);
        prop_assert!(ranges[0].start >= protocol::bootstrap_size(num_workers));
        for pair in ranges.windows(2) {
            prop_assert!(pair[0].end <= pair[1].start, "{:?} overlaps {:?}", pair[0], pair[1]);
        }
        prop_assert!(ranges.iter().all(|r| r.end <= layout.total_size && r.start % 8 == 0));
    }

    /// The restart policy's recovery plan reads a ring other processes wrote (the claim
    /// counter, env ids, post counts, claim records): for any of it, the plan is an error
    /// or a consistent plan, never a panic; and for any consistent ring it is a plan that
    /// takes back exactly the dead workers' posts.
    #[test]
    fn recovery_plans_never_panic_and_stay_in_bounds(
        batch_size in 1u64..9,
        next_batch in 0u64..1000,
        depth in 2u64..5,
        released_behind in 0u64..2,
        claimed_delta in -2i64..40,
        in_flight in 0u64..48,
        reserved in prop::collection::vec((0u64..40, 0u64..4), 0..3),
        owners in prop::collection::vec(0u8..40, 64),
        dead_posts in prop::collection::vec(0u32..12, 8),
        consistent in any::<bool>(),
    ) {
        use shmenv_engine::ring::recovery::{plan, RingSnapshot, RowOwner};
        let (b, start) = (batch_size, next_batch * batch_size);
        let released = next_batch.saturating_sub(released_behind);
        let s = RingSnapshot {
            batch_size: b,
            next_batch,
            window_end: released + depth,
            claimed: start.saturating_add_signed(claimed_delta),
            in_flight,
            reserved: reserved.iter().map(|&(a, n)| start + a..start + a + n).collect(),
        };
        let owner = |g: u64| match owners[(g % 64) as usize] {
            0..=19 => RowOwner::Live,
            20..=38 => RowOwner::Dead,
            _ => RowOwner::Corrupt,
        };
        let is_reserved = |g: u64| s.reserved.iter().any(|r| r.contains(&g));
        let rows_of = |q: u64, who: RowOwner| {
            (q * b..((q + 1) * b).min(s.claimed)).filter(|&g| !is_reserved(g) && owner(g) == who).count() as u32
        };
        // A consistent ring: each batch's posts are its live rows plus some of its dead ones.
        let taken = |q: u64| dead_posts[(q % 8) as usize] % (rows_of(q, RowOwner::Dead) + 1);
        let posts = |q: u64| if consistent { rows_of(q, RowOwner::Live) + taken(q) } else { dead_posts[(q % 8) as usize] };
        let result = plan(&s, owner, posts);
        let window_rows = start..(s.window_end * b).min(s.claimed.max(start));
        let sane = s.claimed >= start
            && s.claimed - start <= in_flight
            && window_rows.clone().all(|g| is_reserved(g) || owner(g) != RowOwner::Corrupt);
        if consistent && sane {
            let p = result.as_ref().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let want: u32 = (next_batch..s.window_end).map(taken).sum();
            prop_assert_eq!(p.take_back.iter().map(|&(_, n)| n).sum::<u32>(), want);
        }
        if let Ok(p) = result {
            prop_assert!(p.fill_rows.windows(2).all(|w| w[0] < w[1]), "fill rows ascending and unique");
            prop_assert!(p.fill_rows.iter().all(|&g| g >= start && g < s.claimed && !is_reserved(g)));
            prop_assert!(p.take_back.iter().all(|&(q, n)| q >= next_batch && q < s.window_end && n > 0));
        }
    }
}
