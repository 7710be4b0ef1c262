//! Envs from a shared library that implements the C ABI of `worker/include/shmenv_env.h`.
//!
//! A pool that names a plugin (`PoolBuilder::plugin(path)`) has each worker process load
//! the library for itself ([`Plugin::load`]: `dlopen` with `RTLD_NOW | RTLD_LOCAL`, the
//! entry symbol, the ABI version and the table checked before any env exists) and build its
//! envs with [`Plugin::make`]. A [`PluginEnv`] is an [`Env`] over the library's function
//! table, so the worker host steps it like any Rust env: `observe` hands the library
//! pointers to the env's rows in shared memory, and an error text from `reset`/`step`/
//! `observe` becomes a panic, which the host reports as `EnvPanicked` naming the env.
//!
//! All the `unsafe` of calling into the library lives here. The library runs in the
//! worker's address space: the ABI's rules (documented in the header) are what the
//! `// SAFETY:` arguments below rely on; a library that breaks them (writes outside its
//! rows, frees a handle twice) is a bug shmenv cannot contain beyond the worker process.

use crate::env::{ActionIn, Env, ObsOut, Transition};
use crate::registry::MakeError;
use shmenv_engine::protocol::REPORT_CAPACITY;
use shmenv_engine::spec::EnvSpec;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

mod batch;
pub(crate) use batch::BatchStep;

/// The ABI version this host implements (`SHMENV_ABI_VERSION` of the header).
pub const ABI_VERSION: u32 = 1;

/// The symbol every plugin exports (`SHMENV_PLUGIN_ENTRY_NAME`).
pub(crate) const ENTRY_SYMBOL: &str = "shmenv_plugin_entry";

/// Error texts longer than this are cut (a library's message is for a person to read).
const MAX_MESSAGE: usize = 4096;

/// Opaque env handle (`shmenv_env *`).
type Handle = *mut c_void;

/// `shmenv_env_info`.
#[repr(C)]
struct RawEnvInfo {
    id: *const c_char,
    description: *const c_char,
    max_episode_steps: u32,
    reserved: u32,
}

/// `shmenv_transition`.
#[repr(C)]
#[derive(Default)]
struct RawTransition {
    reward: f32,
    terminated: u8,
    truncated: u8,
}

type CreateFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut Handle) -> *const c_char;
type SpecFn = unsafe extern "C" fn(Handle) -> *const c_char;
type ResetFn = unsafe extern "C" fn(Handle, c_int, u64) -> *const c_char;
type StepFn = unsafe extern "C" fn(Handle, *const c_void, *mut RawTransition) -> *const c_char;
type ObserveFn = unsafe extern "C" fn(Handle, *const *mut c_void) -> *const c_char;
type DestroyFn = unsafe extern "C" fn(Handle);
type StepBatchFn = unsafe extern "C" fn(
    *const Handle,
    u32,
    *const u8,
    *const c_void,
    u32,
    *mut RawTransition,
    *const *mut c_void,
    *mut u32,
) -> *const c_char;

/// `shmenv_plugin`, version 1 (fields are only ever appended within a version; those after
/// `destroy` are optional, and absent from a table whose `size` ends before them).
#[repr(C)]
struct RawPlugin {
    abi_version: u32,
    size: u32,
    num_envs: u32,
    reserved: u32,
    envs: *const RawEnvInfo,
    create: Option<CreateFn>,
    spec_json: Option<SpecFn>,
    reset: Option<ResetFn>,
    step: Option<StepFn>,
    observe: Option<ObserveFn>,
    destroy: Option<DestroyFn>,
    step_batch: Option<StepBatchFn>,
}

/// The bytes of the table every version-1 library has: up to `destroy`, the required fields.
const REQUIRED_BYTES: usize = std::mem::offset_of!(RawPlugin, step_batch);

const _: () = {
    assert!(std::mem::size_of::<RawEnvInfo>() == 24);
    assert!(std::mem::size_of::<RawTransition>() == 8);
    assert!(std::mem::offset_of!(RawPlugin, envs) == 16);
    assert!(std::mem::offset_of!(RawPlugin, create) == 24);
    assert!(std::mem::offset_of!(RawPlugin, destroy) == 64);
    assert!(REQUIRED_BYTES == 72);
    assert!(std::mem::size_of::<RawPlugin>() == 80);
};

/// The library's functions, checked non-NULL at load.
#[derive(Clone, Copy)]
struct Functions {
    create: CreateFn,
    spec_json: SpecFn,
    reset: ResetFn,
    step: StepFn,
    observe: ObserveFn,
    destroy: DestroyFn,
    step_batch: Option<StepBatchFn>,
}

/// Why a plugin library could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// `dlopen` failed: no such file, not a shared library, a missing dependency or symbol.
    #[error("cannot load plugin {path}: {message}. Build it as a shared library (gcc -shared -fPIC) and pass its path")]
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The library does not export the entry function.
    #[error(
        "plugin {path} does not export `{ENTRY_SYMBOL}`: it is not a shmenv plugin. Include shmenv_env.h \
         and define `const shmenv_plugin *shmenv_plugin_entry(void)` (with extern \"C\" in C++)"
    )]
    MissingEntry {
        /// The library.
        path: PathBuf,
    },
    /// The library was built for another ABI version.
    #[error(
        "plugin {path} implements shmenv ABI version {found}, this shmenv implements version {ABI_VERSION}: \
         rebuild the library against this shmenv's worker/include/shmenv_env.h"
    )]
    WrongVersion {
        /// The library.
        path: PathBuf,
        /// Its `abi_version`.
        found: u32,
    },
    /// The table is malformed (a NULL function, no env ids, a table too small).
    #[error("plugin {path} has a malformed function table: {problem}")]
    BadTable {
        /// The library.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// One env id of a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginEnvInfo {
    /// The id.
    pub id: String,
    /// One line about it.
    pub description: String,
    /// Its time limit, if any.
    pub max_episode_steps: Option<u32>,
}

/// A loaded plugin library. Envs made from it keep it loaded (they hold an `Arc`).
pub struct Plugin {
    path: PathBuf,
    envs: Vec<PluginEnvInfo>,
    functions: Functions,
    // Last: unloaded after everything above (the functions point into it).
    _library: libloading::Library,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("path", &self.path).field("envs", &self.envs).finish()
    }
}

impl Plugin {
    /// Loads the library at `path` (resolving every symbol now, not at the first call) and
    /// checks its entry function, ABI version and table.
    pub fn load(path: &Path) -> Result<Arc<Plugin>, PluginError> {
        let path = path.to_path_buf();
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
        // SAFETY: loading a library runs its initializers; the ABI (header) forbids them
        // nothing, but naming a library to load is the caller's decision: the pool's user
        // chose to run this code in the worker, as with any env they register.
        let library = unsafe { libloading::os::unix::Library::open(Some(&path), flags) }
            .map_err(|e| PluginError::Load { path: path.clone(), message: e.to_string() })?;
        let library = libloading::Library::from(library);
        let entry = {
            // SAFETY: the symbol's type is the ABI's `const shmenv_plugin *(*)(void)`; a
            // library exporting this name with another type breaks the ABI.
            let symbol =
                unsafe { library.get::<unsafe extern "C" fn() -> *const RawPlugin>(ENTRY_SYMBOL.as_bytes()) };
            *symbol.map_err(|_| PluginError::MissingEntry { path: path.clone() })?
        };
        // SAFETY: the entry function takes nothing and returns a pointer to a static table.
        let table = unsafe { entry() };
        let raw = read_table(table, &path)?;
        let functions = functions_of(&raw, &path)?;
        let envs = env_infos(&raw, &path)?;
        Ok(Arc::new(Plugin { path, envs, functions, _library: library }))
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The env ids it provides, in its order.
    pub fn envs(&self) -> &[PluginEnvInfo] {
        &self.envs
    }

    /// The entry of `id`, if the library provides it.
    pub fn env(&self, id: &str) -> Option<&PluginEnvInfo> {
        self.envs.iter().find(|e| e.id == id)
    }

    /// Creates env `id` from `config`.
    pub fn make(self: &Arc<Self>, id: &str, config: &serde_json::Value) -> Result<Box<dyn Env>, MakeError> {
        Ok(Box::new(self.make_env(id, config)?))
    }

    /// [`Plugin::make`], unboxed: a shard keeps its handle for the batched call.
    pub(crate) fn make_env(
        self: &Arc<Self>,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<PluginEnv, MakeError> {
        if self.env(id).is_none() {
            let registered = self.envs.iter().map(|e| e.id.clone()).collect();
            return Err(MakeError::UnknownEnv { id: id.into(), registered });
        }
        let failed = |message: String| MakeError::Failed {
            id: id.into(),
            message: format!("{message} (plugin {})", self.path.display()),
        };
        let c_id = CString::new(id).map_err(|_| failed("the id contains a NUL byte".into()))?;
        let config = if config.is_null() { "{}".to_string() } else { config.to_string() };
        let c_config = CString::new(config).map_err(|_| failed("the config contains a NUL byte".into()))?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: both strings are NUL-terminated and live for the call; `handle` is a
        // valid place for the library to store the env.
        let error = unsafe { (self.functions.create)(c_id.as_ptr(), c_config.as_ptr(), &mut handle) };
        // SAFETY: a non-NULL result is the library's NUL-terminated message (ABI).
        if let Some(message) = unsafe { message_of(error) } {
            return Err(failed(message));
        }
        let handle =
            NonNull::new(handle).ok_or_else(|| failed("create returned no env and no error".into()))?;
        // From here on the env is destroyed on every path (OwnedHandle's Drop).
        let handle = OwnedHandle { handle, destroy: self.functions.destroy };
        // SAFETY: the handle is live; the ABI says the string is the env's, valid until destroy.
        let spec = unsafe { spec_text_of((self.functions.spec_json)(handle.as_ptr())) }.map_err(failed)?;
        let spec = serde_json::from_str(&spec)
            .map_err(|e| e.to_string())
            .and_then(|v| EnvSpec::from_json(&v).map_err(|e| e.to_string()))
            .map_err(|e| failed(format!("spec_json is not a valid spec ({e}): {}", excerpt(&spec))))?;
        let table = self.env(id).and_then(|e| e.max_episode_steps);
        if spec.max_episode_steps.is_some_and(|k| Some(k) != table) {
            return Err(failed(format!(
                "spec_json sets max_episode_steps {} but the env's info table says {}: the table's \
                 (shmenv_env_info.max_episode_steps, 0 for none) is the one used; remove it from the spec \
                 or make the two agree",
                spec.max_episode_steps.unwrap_or_default(),
                table.map_or("none".into(), |k| k.to_string())
            )));
        }
        Ok(PluginEnv { handle, functions: self.functions, plugin: self.clone(), id: id.into(), spec })
    }
}

/// Reads the library's table: the version and size first (every version has them), then
/// the fields this host knows, as far as the library's table reaches.
fn read_table(table: *const RawPlugin, path: &Path) -> Result<RawPlugin, PluginError> {
    let bad = |problem: String| PluginError::BadTable { path: path.to_path_buf(), problem };
    if table.is_null() {
        return Err(bad(format!("{ENTRY_SYMBOL}() returned NULL")));
    }
    // SAFETY: every table starts with the two u32 words (ABI); `table` is non-NULL and
    // points at the library's static table.
    let (version, size) = unsafe { ((*table).abi_version, (*table).size) };
    if version != ABI_VERSION {
        return Err(PluginError::WrongVersion { path: path.to_path_buf(), found: version });
    }
    if (size as usize) < REQUIRED_BYTES {
        return Err(bad(format!(
            "size is {size} bytes, version {ABI_VERSION} needs at least {REQUIRED_BYTES}"
        )));
    }
    // Whole fields only: a `size` ending inside an optional field leaves it out.
    let known = if size as usize >= std::mem::size_of::<RawPlugin>() {
        std::mem::size_of::<RawPlugin>()
    } else {
        REQUIRED_BYTES
    };
    let mut raw = std::mem::MaybeUninit::<RawPlugin>::zeroed();
    // SAFETY: the library's table is at least `known` bytes long (at most its `size`,
    // checked above to cover the required fields); fields appended after ours are not read,
    // and ours beyond `known` stay zero. Every field is an integer, a pointer or an optional
    // function pointer, for which all-zero bytes are valid (0, NULL, None), so the copy
    // leaves a valid `RawPlugin`.
    Ok(unsafe {
        std::ptr::copy_nonoverlapping(table.cast::<u8>(), raw.as_mut_ptr().cast::<u8>(), known);
        raw.assume_init()
    })
}

fn functions_of(raw: &RawPlugin, path: &Path) -> Result<Functions, PluginError> {
    let missing = |name: &str| PluginError::BadTable {
        path: path.to_path_buf(),
        problem: format!(
            "the function `{name}` is NULL (version {ABI_VERSION} requires every function up to `destroy`)"
        ),
    };
    Ok(Functions {
        create: raw.create.ok_or_else(|| missing("create"))?,
        spec_json: raw.spec_json.ok_or_else(|| missing("spec_json"))?,
        reset: raw.reset.ok_or_else(|| missing("reset"))?,
        step: raw.step.ok_or_else(|| missing("step"))?,
        observe: raw.observe.ok_or_else(|| missing("observe"))?,
        destroy: raw.destroy.ok_or_else(|| missing("destroy"))?,
        step_batch: raw.step_batch,
    })
}

fn env_infos(raw: &RawPlugin, path: &Path) -> Result<Vec<PluginEnvInfo>, PluginError> {
    let bad = |problem: String| PluginError::BadTable { path: path.to_path_buf(), problem };
    if raw.num_envs == 0 || raw.envs.is_null() {
        return Err(bad("it provides no env ids (num_envs is 0 or envs is NULL)".into()));
    }
    // SAFETY: `envs` points at `num_envs` entries that live while the library is loaded (ABI).
    let infos = unsafe { std::slice::from_raw_parts(raw.envs, raw.num_envs as usize) };
    let mut envs: Vec<PluginEnvInfo> = Vec::with_capacity(infos.len());
    for (i, info) in infos.iter().enumerate() {
        // SAFETY: the ABI's strings are NUL-terminated and static (NULL is refused).
        let id = unsafe { message_of(info.id) }.filter(|s| !s.is_empty());
        let id = id.ok_or_else(|| bad(format!("env {i} has no id")))?;
        if envs.iter().any(|e| e.id == id) {
            return Err(bad(format!("env id {id:?} is listed twice")));
        }
        // SAFETY: as above.
        let description = unsafe { message_of(info.description) }.unwrap_or_default();
        let max_episode_steps = (info.max_episode_steps > 0).then_some(info.max_episode_steps);
        envs.push(PluginEnvInfo { id, description, max_episode_steps });
    }
    Ok(envs)
}

/// The text of a NUL-terminated string from the library (`None` for NULL), cut at
/// [`MAX_MESSAGE`] bytes.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string that lives for the call.
unsafe fn message_of(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    let text = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    let mut end = text.len().min(MAX_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_string())
}

/// The start of a long text, for an error message.
fn excerpt(text: &str) -> String {
    const SHOWN: usize = 400;
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}... ({} bytes)", &text[..end], text.len()),
        None => text.to_string(),
    }
}

/// The text of `spec_json`'s string, whole: at most [`REPORT_CAPACITY`] bytes (a worker
/// reports its spec in that area), else an error naming its length and the limit.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string that lives for the call.
unsafe fn spec_text_of(p: *const c_char) -> Result<String, String> {
    if p.is_null() {
        return Err("spec_json returned NULL".into());
    }
    // SAFETY: the caller's promise.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.len() > REPORT_CAPACITY {
        return Err(format!(
            "spec_json returned {} bytes, more than the {REPORT_CAPACITY} a spec may take (a worker's \
             report area): give Boxes uniform bounds (one low and one high) or use fewer arrays",
            bytes.len()
        ));
    }
    String::from_utf8(bytes.to_vec()).map_err(|e| format!("spec_json returned text that is not UTF-8 ({e})"))
}

/// Observation arrays whose row pointers fit on the stack in [`with_row_pointers`].
const STACK_ROWS: usize = 8;

/// Runs `f` with the start of each of the `n` byte slices of `rows`, as the `void *const *`
/// array the ABI takes (`observe`'s and `step_batch`'s `rows`), on the stack for up to
/// [`STACK_ROWS`] arrays.
fn with_row_pointers<'r, R>(
    n: usize,
    rows: impl Iterator<Item = &'r mut [u8]>,
    f: impl FnOnce(*const *mut c_void) -> R,
) -> R {
    let mut stack = [std::ptr::null_mut::<c_void>(); STACK_ROWS];
    let mut heap = Vec::new();
    let slots: &mut [*mut c_void] = if n <= STACK_ROWS {
        &mut stack[..n]
    } else {
        heap.resize(n, std::ptr::null_mut());
        &mut heap
    };
    for (slot, row) in slots.iter_mut().zip(rows) {
        *slot = row.as_mut_ptr().cast();
    }
    f(slots.as_ptr())
}

/// An env's handle, borrowed: what [`BatchStep`] passes to the library (`shmenv_env *`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct EnvHandle(NonNull<c_void>);

// SAFETY: a plain address; whoever calls the library with it must own the env's
// `PluginEnv` (a shard owns both, and uses them on one thread at a time).
unsafe impl Send for EnvHandle {}

/// An env handle, destroyed when dropped.
struct OwnedHandle {
    handle: NonNull<c_void>,
    destroy: DestroyFn,
}

impl OwnedHandle {
    fn as_ptr(&self) -> Handle {
        self.handle.as_ptr()
    }
}

impl Drop for OwnedHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from `create`, is destroyed exactly once (here) and never
        // used afterwards; the library is still loaded (whoever owns this handle holds the
        // `Plugin` too, and drops it after the handle).
        unsafe { (self.destroy)(self.handle.as_ptr()) }
    }
}

// SAFETY: the ABI lets a handle move between threads as long as one thread uses it at a
// time, which its single owner guarantees.
unsafe impl Send for OwnedHandle {}

/// An env of a plugin library.
pub struct PluginEnv {
    // First: destroyed before the library may be unloaded (fields drop in order).
    handle: OwnedHandle,
    functions: Functions,
    plugin: Arc<Plugin>,
    id: String,
    spec: EnvSpec,
}

impl PluginEnv {
    /// The library's handle of this env, for [`BatchStep`] (valid while this env lives).
    pub(crate) fn handle(&self) -> EnvHandle {
        EnvHandle(self.handle.handle)
    }

    /// Panics with the library's error text; the host reports it as the env's failure.
    #[cold]
    fn fail(&self, call: &str, message: String) -> ! {
        panic!("{} ({}): {call} failed: {message}", self.id, self.plugin.path.display())
    }
}

impl Env for PluginEnv {
    fn spec(&self) -> EnvSpec {
        self.spec.clone()
    }

    fn reset(&mut self, seed: Option<u64>) {
        // SAFETY: the handle is live and used by this thread alone (`&mut self`).
        let error = unsafe {
            (self.functions.reset)(self.handle.as_ptr(), c_int::from(seed.is_some()), seed.unwrap_or(0))
        };
        // SAFETY: an error is the library's NUL-terminated message (ABI).
        if let Some(message) = unsafe { message_of(error) } {
            self.fail("reset", message);
        }
    }

    #[inline]
    fn step(&mut self, action: ActionIn<'_>) -> Transition {
        let mut out = RawTransition::default();
        let bytes = action.bytes();
        // SAFETY: the handle is live and ours alone; `bytes` is the env's action row, aligned
        // for its dtype (the region's rows are; the header promises it) and live for the
        // call; `out` is a valid place for the result.
        let error = unsafe { (self.functions.step)(self.handle.as_ptr(), bytes.as_ptr().cast(), &mut out) };
        if !error.is_null() {
            // SAFETY: as in `reset`.
            let message = unsafe { message_of(error) }.unwrap_or_default();
            self.fail("step", message);
        }
        Transition { reward: out.reward, terminated: out.terminated != 0, truncated: out.truncated != 0 }
    }

    #[inline]
    fn observe(&self, obs: &mut ObsOut<'_, '_>) {
        let error = with_row_pointers(obs.len(), obs.rows_mut(), |rows| {
            // SAFETY: the handle is live (`observe` takes `&self`, but the host calls it on
            // one thread, between its own calls); each pointer is this env's row of one
            // observation array, exclusively borrowed through `obs` for this call, as long
            // as the spec says.
            unsafe { (self.functions.observe)(self.handle.as_ptr(), rows) }
        });
        if !error.is_null() {
            // SAFETY: as in `reset`.
            let message = unsafe { message_of(error) }.unwrap_or_default();
            self.fail("observe", message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_copied_and_cut_at_a_character_boundary() {
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { message_of(std::ptr::null()) }, None);
        let long = CString::new("\u{e9}".repeat(MAX_MESSAGE)).unwrap();
        // SAFETY: a NUL-terminated string that lives for the call.
        let cut = unsafe { message_of(long.as_ptr()) }.unwrap();
        assert_eq!(cut.len(), MAX_MESSAGE);
        assert!(cut.chars().all(|c| c == '\u{e9}'));
    }

    #[test]
    fn a_missing_library_is_a_load_error_naming_the_path() {
        let err = Plugin::load(Path::new("/nonexistent/libx.so")).unwrap_err();
        assert!(matches!(err, PluginError::Load { .. }), "{err}");
        assert!(err.to_string().starts_with("cannot load plugin /nonexistent/libx.so: "), "{err}");
    }
}
