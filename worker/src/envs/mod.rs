//! The built-in envs (registered by `Registry::with_builtins`).

pub mod burn;
pub mod cartpole;
pub mod pendulum;
