//! Store round trips per request: the domain counts each call it makes to the store
//! while a request runs (a task-local count, so concurrent requests never mix), and
//! the request's total goes to `memmachine_store_round_trips` by operation.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static TRIPS: Cell<u32>;
}

/// Runs `request`, counting the store calls made through [`call`] while it runs.
pub async fn counted<T>(request: impl Future<Output = T>) -> (T, u32) {
    TRIPS
        .scope(Cell::new(0), async {
            let answer = request.await;
            (answer, TRIPS.with(Cell::get))
        })
        .await
}

/// One call to the store, counted for the current request (if one is counting), its
/// time the current search's store stage (if one is timed).
pub async fn call<T>(store_call: impl Future<Output = T>) -> T {
    let _ = TRIPS.try_with(|trips| trips.set(trips.get() + 1));
    crate::stage_time::timed_async(crate::stage_time::Stage::Store, store_call).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_the_calls_of_its_own_request_only() {
        let ((), outside) = counted(async {}).await;
        assert_eq!(outside, 0);
        let (answer, trips) = counted(async {
            call(async {}).await;
            // Another request inside counts apart.
            let ((), inner) = counted(call(async {})).await;
            assert_eq!(inner, 1);
            call(async { 7 }).await
        })
        .await;
        assert_eq!((answer, trips), (7, 2));
        // Outside any request: not counted, still run.
        assert_eq!(call(async { 3 }).await, 3);
    }
}
