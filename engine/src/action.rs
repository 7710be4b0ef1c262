//! Action validation: every action is checked against the action space before any worker
//! sees it (and before anything is copied into the region).

use crate::error::ActionError;
use crate::spec::{Element, Space};

/// Checks `actions` (all envs, row-major) against `space`: dtype, length, and every value.
pub fn validate<T: Element>(space: &Space, num_envs: usize, actions: &[T]) -> Result<(), ActionError> {
    if T::DTYPE != space.dtype() {
        return Err(ActionError::WrongDtype {
            expected: space.dtype(),
            found: T::DTYPE,
            space: space.to_string(),
        });
    }
    let per_env = space.num_elements();
    if actions.len() != num_envs * per_env {
        return Err(ActionError::WrongLength {
            expected: num_envs * per_env,
            found: actions.len(),
            num_envs,
            per_env,
            space: space.to_string(),
        });
    }
    if let Some((i, expected)) = first_invalid(space, per_env, actions) {
        return Err(ActionError::OutOfRange {
            env_id: i / per_env.max(1),
            element: i % per_env.max(1),
            value: format!("{:?}", actions[i]),
            expected,
        });
    }
    Ok(())
}

/// Index of the first value outside `space`, with what was expected there. The dtype was
/// checked, so integer spaces are read as their storage type; the common case (all valid)
/// is one branch-light pass that the compiler vectorizes.
fn first_invalid<T: Element>(space: &Space, per_env: usize, actions: &[T]) -> Option<(usize, String)> {
    fn find<X: Copy>(a: &[X], ok: impl Fn(usize, X) -> bool) -> Option<usize> {
        if a.iter().enumerate().all(|(i, &x)| ok(i, x)) {
            None
        } else {
            a.iter().enumerate().position(|(i, &x)| !ok(i, x))
        }
    }
    match space {
        Space::Discrete { n, start } => {
            let (lo, hi) = (*start, start + n);
            find(bytemuck::cast_slice::<T, i64>(actions), |_, x| x >= lo && x < hi)
                .map(|i| (i, format!("an integer in {lo}..{hi} ({space})")))
        }
        Space::MultiDiscrete { .. } => {
            let range = |i: usize| space.multi_discrete_range(i % per_env).unwrap_or((0, 0));
            find(actions, |i, x| {
                let (lo, hi) = range(i);
                (i128::from(lo)..i128::from(hi)).contains(&x.to_i128())
            })
            .map(|i| {
                let (lo, hi) = range(i);
                (i, format!("an integer in {lo}..{hi} ({space})"))
            })
        }
        Space::MultiBinary { .. } => find(bytemuck::cast_slice::<T, i8>(actions), |_, x| x == 0 || x == 1)
            .map(|i| (i, format!("0 or 1 ({space})"))),
        Space::Box { dtype, .. } if dtype.is_float() => {
            let bounds =
                |i: usize| space.box_bounds(i % per_env).unwrap_or((f64::NEG_INFINITY, f64::INFINITY));
            // NaN never; an infinity only where that bound is itself infinite.
            let ok = |i: usize, x: f64| {
                x.is_finite()
                    || (!x.is_nan() && (if x > 0.0 { bounds(i).1 } else { -bounds(i).0 }) == f64::INFINITY)
            };
            find(actions, |i, v| ok(i, v.to_f64())).map(|i| (i, format!("a finite number ({space})")))
        }
        Space::Box { .. } => {
            // Integer and bool boxes: exact integer comparisons (a u64 or i64 value near
            // its type's limit does not round), bounds rounded inward.
            let bounds = |i: usize| {
                let (lo, hi) = space.box_bounds(i % per_env).unwrap_or((f64::NEG_INFINITY, f64::INFINITY));
                (lo.ceil() as i128, hi.floor() as i128)
            };
            find(actions, |i, v| {
                let (lo, hi) = bounds(i);
                (lo..=hi).contains(&v.to_i128())
            })
            .map(|i| {
                let (lo, hi) = bounds(i);
                (i, format!("an integer in [{lo}, {hi}] ({space})"))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Bool8, DType, F16};

    fn check<T: Element>(space: &Space, n: usize, a: &[T]) -> Result<Vec<T>, ActionError> {
        validate(space, n, a).map(|()| a.to_vec())
    }

    #[test]
    fn discrete_checks_dtype_length_and_range() {
        let s = Space::discrete(2);
        assert_eq!(check(&s, 3, &[0i64, 1, 1]).unwrap(), vec![0, 1, 1]);
        assert!(matches!(
            check(&s, 3, &[0i32, 1, 1]),
            Err(ActionError::WrongDtype { expected: DType::I64, found: DType::I32, .. })
        ));
        assert!(matches!(
            check(&s, 3, &[0i64, 1]),
            Err(ActionError::WrongLength { expected: 3, found: 2, .. })
        ));
        let e = check(&s, 3, &[0i64, 2, 1]).unwrap_err();
        assert_eq!(
            e,
            ActionError::OutOfRange {
                env_id: 1,
                element: 0,
                value: "2".into(),
                expected: "an integer in 0..2 (Discrete(2))".into()
            }
        );
        assert!(e.to_string().contains("env 1"));
        assert!(check(&Space::Discrete { n: 3, start: -1 }, 1, &[-1i64]).is_ok());
    }

    #[test]
    fn box_rejects_non_finite_and_multi_spaces_check_each_entry() {
        let s = Space::boxed(DType::F32, &[2], -2.0, 2.0);
        assert!(
            check(&s, 2, &[0.0f32, 1.0, 5.0, -1.0]).is_ok(),
            "finite values out of bounds are the env's to clip"
        );
        let e = check(&s, 2, &[0.0f32, 1.0, f32::NAN, -1.0]).unwrap_err();
        assert!(matches!(e, ActionError::OutOfRange { env_id: 1, element: 0, .. }));
        assert!(check(&s, 1, &[f32::INFINITY, 0.0]).is_err());
        let open = Space::boxed(DType::F64, &[1], f64::NEG_INFINITY, f64::INFINITY);
        assert!(check(&open, 1, &[f64::INFINITY]).is_ok());
        let ints = Space::boxed(DType::U8, &[1], 0.0, 9.0);
        assert!(check(&ints, 1, &[10u8]).is_err());
        let md = Space::multi_discrete(&[2, 5]);
        assert!(check(&md, 2, &[1i64, 4, 0, 0]).is_ok());
        assert!(matches!(
            check(&md, 2, &[1i64, 4, 0, 5]),
            Err(ActionError::OutOfRange { env_id: 1, element: 1, .. })
        ));
        let mb = Space::multi_binary(2);
        assert!(check(&mb, 1, &[1i8, 0]).is_ok());
        assert!(check(&mb, 1, &[1i8, 2]).is_err());
    }

    #[test]
    fn new_dtypes_and_general_multi_discrete_are_checked_exactly() {
        let flags = Space::boxed(DType::Bool, &[2], 0.0, 1.0);
        assert!(check(&flags, 1, &[Bool8(0), Bool8(1)]).is_ok());
        let e = check(&flags, 1, &[Bool8(1), Bool8(7)]).unwrap_err();
        assert!(matches!(e, ActionError::OutOfRange { env_id: 0, element: 1, .. }), "{e}");
        let half = Space::boxed(DType::F16, &[1], -1.0, 1.0);
        assert!(check(&half, 2, &[F16::from_f32(0.5), F16::from_f32(3.0)]).is_ok());
        assert!(check(&half, 1, &[F16::NAN]).is_err());
        let big = Space::boxed(DType::U64, &[1], 0.0, u64::MAX as f64);
        assert!(check(&big, 1, &[u64::MAX]).is_ok());
        let md = Space::MultiDiscrete { nvec: vec![3], start: vec![-1], shape: vec![2, 2], dtype: DType::I8 };
        let md = Space::from_json(&md.to_json()).unwrap();
        assert!(check(&md, 1, &[-1i8, 0, 1, -1]).is_ok());
        let e = check(&md, 1, &[-1i8, 0, 2, -1]).unwrap_err();
        assert!(matches!(e, ActionError::OutOfRange { element: 2, .. }), "{e}");
        assert!(e.to_string().contains("-1..2"), "{e}");
        assert!(check(&md, 1, &[0i64, 0, 0, 0]).is_err(), "the dtype is the space's");
    }
}
