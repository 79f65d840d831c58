//! Test-only fault injection: with `MEMMACHINE_TEST_ABORT_AFTER_ADD=1`, a debug build
//! aborts right after an add commits, before it answers (the idempotency crash test).

/// Aborts the process when the hook is set (debug builds only; release ignores it).
#[inline]
pub(super) fn after_add() {
    #[cfg(debug_assertions)]
    {
        static SET: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            std::env::var("MEMMACHINE_TEST_ABORT_AFTER_ADD").is_ok_and(|v| v == "1")
        });
        if *SET {
            eprintln!("MEMMACHINE_TEST_ABORT_AFTER_ADD: aborting after the add committed");
            std::process::abort();
        }
    }
}
