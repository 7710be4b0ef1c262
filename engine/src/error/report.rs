//! [`Report`]: what a `main` returns to print an error as its message.

use std::error::Error;
use std::fmt;

/// Any error, as a `main` reports it: `fn main() -> Result<(), shmenv::Report>` prints
/// `Error: ` and the error's message (what went wrong, the value, what to do), where a
/// `main` returning `Box<dyn Error>` would print the error's `Debug` form (its variant and
/// fields). Every error converts with `?`.
///
/// ```
/// use shmenv_engine::error::Report;
/// let err = std::io::Error::new(std::io::ErrorKind::NotFound, "no such pool");
/// let report = Report::from(err);
/// assert_eq!(format!("{report:?}"), "no such pool");
/// assert!(report.error().downcast_ref::<std::io::Error>().is_some());
/// ```
///
/// It is not itself an [`Error`] (so that every error converts into it); [`Report::error`]
/// gives the error it holds, to match on or to walk its sources.
pub struct Report(Box<dyn Error + Send + Sync + 'static>);

impl Report {
    /// The error reported.
    pub fn error(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The error reported, boxed.
    pub fn into_error(self) -> Box<dyn Error + Send + Sync + 'static> {
        self.0
    }
}

impl<E: Error + Send + Sync + 'static> From<E> for Report {
    fn from(error: E) -> Report {
        Report(Box::new(error))
    }
}

/// The error's message: what `main` prints after `Error: `.
impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
