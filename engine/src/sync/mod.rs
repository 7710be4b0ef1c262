//! Cross-process counting semaphores on shared atomic words, with futex wake-ups, and the
//! waiting policy that decides how long to spin, yield and then sleep.
//!
//! The numbers behind the defaults come from `cargo bench --bench wakeup` (figures in
//! `docs/waiting.md`, "Waiting policy"): a handoff between processes spinning on cores
//! of their own takes about a microsecond round trip, a futex wake-up of a process asleep
//! on another core tens of microseconds, and spinning with more runnable processes than
//! cores is ruinous (a scheduler quantum, ~10 ms, per handoff). So the policy spins only
//! when every process can have a core, yields next (cheap, and it hands the core to whoever
//! needs it), and sleeps on the futex after about a millisecond, always with a timeout so
//! that liveness checks run.
//!
//! One primitive a file: [`atomic`](crate::sync::atomic) (std's atomics, or loom's under
//! `--cfg loom`), the futex, [`Semaphore`](crate::sync::Semaphore),
//! [`Gate`](crate::sync::Gate), the strategies and policies
//! ([`WaitStrategy`](crate::sync::WaitStrategy), [`WaitPolicy`](crate::sync::WaitPolicy),
//! [`WaitMode`](crate::sync::WaitMode)) and the [`Waiter`](crate::sync::Waiter) whose wait
//! loop the primitives share. The region hands out raw atomic words;
//! [`Semaphore::in_region`](crate::sync::Semaphore::in_region) and
//! [`Gate::in_region`](crate::sync::Gate::in_region) build a primitive from the words at an
//! offset, which the protocol names.

pub mod atomic;
mod futex;
mod gate;
mod semaphore;
mod strategy;
mod waiter;

pub use gate::{Gate, GateWords, GATE_SLEEPERS};
pub use semaphore::{Semaphore, SemaphoreWords, SEMAPHORE_BYTES, SEMAPHORE_WANT};
pub use strategy::{available_cores, WaitMode, WaitPolicy, WaitStrategy};
pub use waiter::{WaitOutcome, Waiter};

#[cfg(all(test, not(loom)))]
mod tests;
