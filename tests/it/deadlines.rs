//! A client's deadline (`grpc-timeout`) ends the work behind the call, not only the call
//! (issue 43 item 5): on PostgreSQL, a query stuck behind a lock the test holds is gone
//! from `pg_stat_activity` soon after the call answered DEADLINE_EXCEEDED. (SQLite: an
//! abandoned write is never applied, `limits::deadlines_are_honoured_down_to_the_store`;
//! an abandoned read is interrupted, the store's own `a_read_whose_caller_left_stops`.)

use std::time::{Duration, Instant};

use crate::common::InProcess;
use crate::common::calls::{count, create_project, frame};
use memmachine_proto::v2 as pb;
use sqlx::Connection;

/// The episode count's query, as `pg_stat_activity` shows it.
const COUNT_QUERY: &str = "SELECT COUNT(*) FROM episodes WHERE org_id = $1 AND project = $2";

/// GetEpisodeCount made by hand over HTTP/2 with `grpc-timeout` (tonic's client would
/// keep the deadline itself and answer first): the server's grpc-status.
async fn raw_count(url: &str, timeout: &str) -> String {
    let body = frame(&pb::GetEpisodeCountRequest {
        org_id: "acme".into(),
        project_id: "notes".into(),
    });
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .post(format!(
            "{url}/memmachine.v2.ProjectService/GetEpisodeCount"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(body)
        .send()
        .await
        .unwrap();
    response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// How many of the server's count queries are running (or waiting) in the database.
async fn running(admin: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND state = 'active' AND query = $1",
    )
    .bind(COUNT_QUERY)
    .fetch_one(admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_postgres_query_past_its_deadline_is_cancelled() {
    let Some(url) = crate::common::postgres::fresh_database().await else {
        return;
    };
    // The server's cap is far above the client's deadline: the answer is the client's.
    let server = InProcess::start_with(|config| {
        config.store = memmachine::store::StoreLocation::Postgres(url.clone());
        config.request_timeout = Duration::from_secs(60);
    })
    .await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    assert_eq!(count(&channel, None, "acme").await.unwrap(), 0);

    // A transaction of the test's holds the table the count reads.
    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE episodes IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();

    let deadline = Duration::from_millis(1000);
    let started = Instant::now();
    let status = raw_count(&server.url, "1000m").await;
    let answered = started.elapsed();
    assert_eq!(status, "4", "DEADLINE_EXCEEDED");
    assert!(answered < Duration::from_secs(30), "{answered:?}");

    // The query it started is gone from the database while the lock is still held.
    let mut seen_after_answer = 0;
    let gone = loop {
        let now = running(&mut admin).await;
        if now == 0 {
            break started.elapsed();
        }
        seen_after_answer = seen_after_answer.max(now);
        assert!(
            started.elapsed() < answered + Duration::from_secs(15),
            "the abandoned count query still runs {:?} after the call answered",
            started.elapsed() - answered
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "deadline {deadline:?}: answered DEADLINE_EXCEEDED after {answered:?}; the query \
         was gone from pg_stat_activity after {gone:?} (seen running after the answer: {})",
        seen_after_answer > 0
    );

    // Once the lock is gone the server answers as before (the closed connection was
    // replaced).
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();
    assert_eq!(count(&channel, None, "acme").await.unwrap(), 0);
    server.stop().await.unwrap();
}
