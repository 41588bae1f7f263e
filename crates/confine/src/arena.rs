//! A keeper of CPython's frame-stack chunks, for the warm zygote and every script it
//! forks: [`jax_runner_keep_frame_chunks`] sets this library's pair of functions as
//! the interpreter's arena allocator (`PyObject_SetArenaAllocator`), chained to the
//! one it replaces.
//!
//! Why: CPython 3.11 and later keep each thread's frames in 16 KiB chunks, which it
//! takes from the arena allocator (`mmap`) when a call needs one and gives back
//! (`munmap`) as soon as the call returns below it. A hot call on a chunk's edge then
//! maps and unmaps a chunk, and faults its first page, at every call: one such pair
//! costs ~15 µs more than a `malloc`/`free` (measured), and where the edges fall
//! depends on how deep a script's `main()` starts, a lottery a forked script draws
//! differently from a cold one (measured: 1,792 pairs in one generated POMDP script
//! forked by the runner, 390 by a plain fork server). Keeping a few freed chunks for
//! the next request takes that to almost none. Every other request (obmalloc's
//! arenas, a chunk larger than 16 KiB) goes to the allocator this one replaced.

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

/// The size of the chunks kept: CPython's `DATA_STACK_CHUNK_SIZE` (3.11 to 3.13).
pub const CHUNK: usize = 16 * 1024;
/// How many freed chunks are kept at most (128 KiB): a thread crossing one edge back
/// and forth needs one; deep recursion that shrinks again gives back the rest.
pub const KEEP: usize = 8;

/// CPython's `PyObjectArenaAllocator`, stable since 3.4.
#[repr(C)]
#[derive(Clone, Copy)]
struct ArenaAllocator {
    ctx: *mut c_void,
    alloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize)>,
}

/// The allocator replaced, set once by the install.
struct Previous(ArenaAllocator);
// SAFETY: `ctx` is the interpreter's own context for its allocator, which the
// interpreter passes to those functions from whichever thread allocates.
unsafe impl Send for Previous {}
unsafe impl Sync for Previous {}

/// Freed chunks, kept for the next request. A pure stack of addresses: what it holds
/// is memory the previous allocator gave and the interpreter gave back.
#[derive(Debug, Default)]
pub struct Keeper {
    blocks: [usize; KEEP],
    len: usize,
}

impl Keeper {
    /// A kept block for a request of `size` bytes, if one fits.
    pub fn take(&mut self, size: usize) -> Option<usize> {
        if size != CHUNK || self.len == 0 {
            return None;
        }
        self.len -= 1;
        Some(self.blocks[self.len])
    }

    /// Keeps a freed block of `size` bytes; false when it is not a chunk or the keeper
    /// is full (the caller gives it to the previous allocator).
    pub fn keep(&mut self, block: usize, size: usize) -> bool {
        if size != CHUNK || self.len == KEEP || block == 0 {
            return false;
        }
        self.blocks[self.len] = block;
        self.len += 1;
        true
    }
}

static PREVIOUS: OnceLock<Previous> = OnceLock::new();
static KEPT: Mutex<Keeper> = Mutex::new(Keeper {
    blocks: [0; KEEP],
    len: 0,
});

/// The keeper, when no other thread holds it: a request that finds it held (another
/// thread of a build without the GIL, or a fork taken while a thread held it) goes to
/// the previous allocator, so no call ever waits or deadlocks.
fn kept() -> Option<MutexGuard<'static, Keeper>> {
    match KEPT.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

unsafe extern "C" fn alloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    if let Some(block) = kept().and_then(|mut k| k.take(size)) {
        return block as *mut c_void;
    }
    match PREVIOUS.get() {
        // SAFETY: the interpreter's own allocator, called as the interpreter would.
        Some(Previous(p)) => match p.alloc {
            Some(f) => unsafe { f(p.ctx, size) },
            None => std::ptr::null_mut(),
        },
        None => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn free(_ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    if kept().is_some_and(|mut k| k.keep(ptr as usize, size)) {
        return;
    }
    if let Some(Previous(p)) = PREVIOUS.get() {
        if let Some(f) = p.free {
            // SAFETY: every block came from the previous allocator (see `alloc`).
            unsafe { f(p.ctx, ptr, size) }
        }
    }
}

type GetSet = unsafe extern "C" fn(*mut ArenaAllocator);

/// One of the interpreter's functions, found in the process (the `python` program
/// exports them, or the `libpython` it loaded).
fn python_function(name: &std::ffi::CStr) -> Option<GetSet> {
    // SAFETY: dlsym on the global scope with a NUL-terminated name; a non-null result
    // is that function, whose C signature is `void (PyObjectArenaAllocator *)`.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, GetSet>(f) })
}

/// Sets the keeper as the calling interpreter's arena allocator, chained to the one
/// it replaces. Returns 1 when set, 0 when it already was (a second call changes
/// nothing), -1 when the process has no such interpreter functions.
///
/// # Safety
///
/// Called from Python (ctypes) with the GIL held, in a process whose interpreter is
/// CPython: the allocator changes for every arena allocated afterwards.
#[no_mangle]
pub unsafe extern "C" fn jax_runner_keep_frame_chunks() -> i32 {
    let (Some(get), Some(set)) = (
        python_function(c"PyObject_GetArenaAllocator"),
        python_function(c"PyObject_SetArenaAllocator"),
    ) else {
        return -1;
    };
    // Set once per process (a fork inherits it): a second call would chain the keeper
    // to itself.
    if PREVIOUS.get().is_some() {
        return 0;
    }
    let mut current = ArenaAllocator {
        ctx: std::ptr::null_mut(),
        alloc: None,
        free: None,
    };
    // SAFETY: the interpreter fills the struct it is given.
    unsafe { get(&mut current) };
    if current.alloc.is_none() || current.free.is_none() {
        return -1;
    }
    if PREVIOUS.set(Previous(current)).is_err() {
        return 0;
    }
    let mut ours = ArenaAllocator {
        ctx: std::ptr::null_mut(),
        alloc: Some(alloc),
        free: Some(free),
    };
    // SAFETY: the interpreter copies the struct; our functions live as long as the
    // library, which the zygote never unloads.
    unsafe { set(&mut ours) };
    1
}

/// How many chunks the keeper holds now: for the tests, which read it in a script.
#[no_mangle]
pub extern "C" fn jax_runner_kept_frame_chunks() -> usize {
    kept().map_or(0, |k| k.len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chunks_are_kept_and_at_most_keep_of_them() {
        let mut k = Keeper::default();
        assert!(!k.keep(0x1000, CHUNK + 1), "a larger chunk goes back");
        assert!(!k.keep(0x1000, 256 * 1024), "an obmalloc arena goes back");
        assert!(!k.keep(0, CHUNK), "a null block is never kept");
        for i in 1..=KEEP {
            assert!(k.keep(i * CHUNK, CHUNK), "chunk {i} kept");
        }
        assert!(!k.keep(99 * CHUNK, CHUNK), "the keeper is full");
        assert_eq!(k.take(CHUNK * 2), None, "only a chunk's size is served");
        // Last kept, first served: the block whose pages are most likely still warm.
        for i in (1..=KEEP).rev() {
            assert_eq!(k.take(CHUNK), Some(i * CHUNK));
        }
        assert_eq!(k.take(CHUNK), None, "empty: the previous allocator serves");
    }

    /// The exported pair, with a counting allocator as the "previous" one: a chunk
    /// freed and asked for again is served without it; other sizes always reach it.
    #[test]
    fn the_pair_serves_kept_chunks_and_forwards_the_rest() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static ALLOCS: AtomicUsize = AtomicUsize::new(0);
        static FREES: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn fake_alloc(_: *mut c_void, size: usize) -> *mut c_void {
            ALLOCS.fetch_add(1, Ordering::SeqCst);
            Box::into_raw(vec![0u8; size].into_boxed_slice()) as *mut c_void
        }
        unsafe extern "C" fn fake_free(_: *mut c_void, ptr: *mut c_void, size: usize) {
            FREES.fetch_add(1, Ordering::SeqCst);
            let slice = std::ptr::slice_from_raw_parts_mut(ptr as *mut u8, size);
            drop(unsafe { Box::from_raw(slice) });
        }
        let prev = ArenaAllocator {
            ctx: std::ptr::null_mut(),
            alloc: Some(fake_alloc),
            free: Some(fake_free),
        };
        assert!(PREVIOUS.set(Previous(prev)).is_ok());
        let null = std::ptr::null_mut();
        unsafe {
            let a = alloc(null, CHUNK);
            assert_eq!(ALLOCS.load(Ordering::SeqCst), 1);
            free(null, a, CHUNK);
            assert_eq!(FREES.load(Ordering::SeqCst), 0, "the chunk was kept");
            assert_eq!(jax_runner_kept_frame_chunks(), 1);
            assert_eq!(alloc(null, CHUNK), a, "and served again");
            assert_eq!(ALLOCS.load(Ordering::SeqCst), 1);
            let arena = alloc(null, 1 << 20);
            free(null, arena, 1 << 20);
            assert_eq!(ALLOCS.load(Ordering::SeqCst), 2);
            assert_eq!(
                FREES.load(Ordering::SeqCst),
                1,
                "an arena goes back at once"
            );
            free(null, a, CHUNK);
        }
    }
}
