//! The process's allocator: an arena cap set at start and freed memory handed back after big steps.

/// Caps glibc's malloc arenas at one per core (its default allows eight per core). Memory
/// freed in one arena is kept there for that arena's threads: after a run's end-of-run step
/// freed its records, a whole-run export on other threads grew the process by another ~190 MiB
/// (big_run, 100,000 cases, SQLite), with this cap by nothing. Call it before any other thread
/// starts: a thread's arena is chosen at its first allocation.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        let cores = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter (it returns 0 if it refuses, which
        // leaves glibc's default in place); no other thread exists yet to race it.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores);
        }
    }
}

/// Hands the memory malloc holds freed back to the system (glibc keeps it for reuse): called
/// after a run's end-of-run step, which frees a whole run's records at once, so an idle server
/// does not keep the size of its biggest run.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only returns free pages to the system; it takes malloc's own locks.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
