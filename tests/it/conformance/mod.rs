//! The one conformance suite of the storage traits (`memmachine::store`), split into
//! modules by trait and instantiated per backend with `conformance!(name, Backend)`.
//!
//! A `Backend` makes stores: `fresh()` a store of its own, `pair()` two handles on one
//! database (two replicas). Tests name their projects, keys and embedders with random
//! ids, so they may share one database; the few that read database-wide figures (the
//! stats, the semantic queues, `prune_changes`) rely on `fresh()` giving them a database
//! no other test writes to (a temporary directory for SQLite; for PostgreSQL, a database
//! of its own).

mod episodes;
mod feed;
mod forget;
mod history;
mod keys;
mod legacy;
mod memory_feed;
mod projects;
mod ranking;
mod retention;
mod semantic;
mod settings;
mod shared;
mod stats;
mod support;
mod usage;
mod vectors;

use std::future::Future;
use std::sync::Arc;

use memmachine::store::Store;
use memmachine::store::postgres::PostgresStore;
use memmachine::store::sqlite::SqliteStore;

/// A storage backend under test.
pub trait Backend {
    const NAME: &'static str;
    /// A new store over a database of its own; `None` when the backend is unavailable.
    fn fresh() -> impl Future<Output = Option<Arc<dyn Store>>> + Send;
    /// Two handles on one new database, as two replicas of the server hold them.
    fn pair() -> impl Future<Output = Option<(Arc<dyn Store>, Arc<dyn Store>)>> + Send;
}

pub struct SqliteBackend;

impl Backend for SqliteBackend {
    const NAME: &'static str = "sqlite";

    async fn fresh() -> Option<Arc<dyn Store>> {
        let dir = support::scratch_dir();
        Some(Arc::new(SqliteStore::open_async(&dir).await.unwrap()))
    }

    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let dir = support::scratch_dir();
        let first = SqliteStore::open_async(&dir).await.unwrap();
        let second = SqliteStore::open_async(&dir).await.unwrap();
        Some((Arc::new(first), Arc::new(second)))
    }
}

/// The server named by `MEMMACHINE_TEST_POSTGRES` (which `scripts/test.sh` starts): a
/// new database per store; skipped when the variable is unset (failed under CI).
pub struct PostgresBackend;

impl Backend for PostgresBackend {
    const NAME: &'static str = "postgres";

    async fn fresh() -> Option<Arc<dyn Store>> {
        let url = crate::common::postgres::fresh_database().await?;
        Some(Arc::new(PostgresStore::connect(&url).await.unwrap()))
    }

    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let url = crate::common::postgres::fresh_database().await?;
        let first = PostgresStore::connect(&url).await.unwrap();
        let second = PostgresStore::connect(&url).await.unwrap();
        Some((Arc::new(first), Arc::new(second)))
    }
}

/// Runs `test` on a fresh store, or says why it did not.
pub async fn with_fresh<B: Backend, F, Fut>(test: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    match B::fresh().await {
        Some(store) => test(store).await,
        None => eprintln!("skipped: the {} backend is not available", B::NAME),
    }
}

/// Runs `test` on two handles on one database, or says why it did not.
pub async fn with_pair<B: Backend, F, Fut>(test: F)
where
    F: FnOnce(Arc<dyn Store>, Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    match B::pair().await {
        Some((one, other)) => test(one, other).await,
        None => eprintln!("skipped: the {} backend is not available", B::NAME),
    }
}

/// One `#[tokio::test]` per listed test, in a module per trait module: `fresh name`
/// runs `crate::conformance::module::name(store)`, `pair name` runs `crate::conformance::module::name(a, b)`.
macro_rules! suite {
    ($backend:ty; $($module:ident { $($kind:ident $test:ident),* $(,)? })*) => {
        $(mod $module { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                suite!(@run $kind $backend, crate::conformance::$module::$test);
            }
        )* })*
    };
    (@run fresh $backend:ty, $test:path) => { crate::conformance::with_fresh::<$backend, _, _>($test).await };
    (@run pair $backend:ty, $test:path) => { crate::conformance::with_pair::<$backend, _, _>($test).await };
}

/// Every test of the suite, for one backend.
macro_rules! conformance {
    ($name:ident, $backend:ty) => {
        mod $name {
            suite! { $backend;
                projects {
                    fresh the_universal_project_exists,
                    fresh projects_are_created_once_got_and_deleted,
                    fresh projects_list_in_key_order_and_page,
                    fresh episodic_config_updates_are_partial,
                    fresh deleting_a_project_deletes_its_episodes,
                }
                episodes {
                    fresh unknown_projects_are_not_found_and_never_created,
                    fresh episodes_get_consecutive_sequence_numbers,
                    fresh episodes_round_trip_every_field,
                    fresh a_failing_batch_stores_nothing_and_uses_no_numbers,
                    fresh a_uid_taken_in_another_project_is_free_here,
                    fresh listing_pages_and_filters_in_sequence_order,
                    fresh filter_language_semantics,
                    fresh the_largest_filters_run,
                    fresh deletes_are_all_or_none_inside_the_project,
                    fresh episodes_by_handle_keep_the_order_asked_and_the_project,
                    fresh episode_handles_name_this_projects_episodes_only,
                }
                feed {
                    fresh the_head_of_a_missing_project_is_not_found,
                    fresh adds_are_logged_in_order_one_change_each,
                    fresh deletes_are_logged_as_removed,
                    fresh stored_vectors_are_logged_for_their_embedder_only,
                    fresh index_pages_go_in_sequence_order_with_the_asked_vectors,
                    fresh reads_stop_at_the_limit_and_continue_from_through,
                    fresh a_pruned_log_no_longer_answers_old_readers,
                    fresh a_project_created_again_has_another_handle,
                }
                vectors {
                    fresh queue_missing_queues_and_dequeues_per_project,
                    fresh a_new_embedder_requeues_everything,
                    fresh a_claim_leases_what_it_returns_oldest_first,
                    fresh an_expired_lease_is_taken_over,
                    fresh released_episodes_are_claimable_at_once,
                    fresh abandoned_episodes_leave_the_queue,
                    fresh stored_vectors_dequeue_and_deleted_episodes_are_skipped,
                    fresh a_vector_for_the_old_embedder_leaves_the_new_queue_alone,
                    fresh vectors_are_read_by_handle_for_the_project_and_embedder,
                }
                keys {
                    fresh api_keys_are_kept_listed_and_revoked,
                }
                legacy {
                    fresh sessions_open_merge_and_keep_their_configuration,
                    fresh sessions_list_by_project_user_and_agent_in_key_order,
                    fresh groups_are_the_orgs_projects_with_their_configuration,
                    fresh deleting_a_project_deletes_its_sessions_and_group,
                    pair concurrent_opens_of_one_session_both_land,
                }
                stats {
                    fresh stats_count_episodes_and_the_embedding_queue,
                }
                retention {
                    pair a_lease_has_one_holder_until_it_expires_or_is_released,
                    fresh expired_episodes_are_past_their_expiry_or_their_projects_retention,
                }
                settings {
                    fresh runtime_settings_are_replaced_under_their_version,
                    pair one_of_two_replicas_racing_on_the_settings_wins,
                }
                usage {
                    fresh usage_adds_up_per_bucket_and_is_read_since_an_hour,
                    pair usage_recorded_by_two_replicas_at_once_adds_up,
                    fresh budgets_and_pauses_are_kept_per_org,
                    fresh a_paused_orgs_sets_are_not_claimed_and_keep_their_queue,
                }
                shared {
                    pair writes_through_one_handle_are_seen_through_the_other,
                    pair concurrent_claimers_never_share_an_episode,
                    pair an_expired_lease_is_taken_over_by_the_other_handle,
                }
                ranking {
                    fresh lexical_ranking_stays_inside_the_project,
                    fresh filters_apply_before_the_cut,
                    fresh the_index_evaluates_filters_as_the_store_does,
                    fresh the_largest_filters_run_in_the_index,
                    fresh the_index_sees_every_acknowledged_change,
                    fresh dense_ranking_uses_stored_vectors_of_the_project,
                    fresh hybrid_ranking_fuses_text_and_vectors,
                    fresh another_embedders_vectors_are_not_ranked,
                    fresh abandoned_episodes_are_still_found_by_their_words,
                    fresh neighbours_are_in_order_and_filtered,
                    fresh a_project_created_again_starts_empty,
                    pair a_write_through_one_handle_is_read_through_the_other,
                    pair a_delete_through_one_handle_is_read_through_the_other,
                    fresh a_tiny_budget_still_answers_every_project,
                    fresh the_budget_counts_each_indexs_fixed_cost,
                }
                semantic {
                    fresh routed_episodes_are_stored_queued_and_claimed_by_count,
                    fresh keyed_duplicates_are_neither_stored_nor_queued,
                    fresh an_old_enough_message_makes_a_set_ready,
                    fresh a_lease_holds_until_it_expires_and_only_its_holder_applies,
                    fresh released_batches_wait_and_failed_ones_stop,
                    fresh the_same_fact_again_cites_instead_of_copying,
                    fresh updates_set_values_and_deletes_remove_by_key,
                    fresh manual_feature_changes,
                    fresh category_features_match_the_category_key_exactly,
                    fresh deleting_an_episode_drops_its_citations_and_the_features_left_without,
                    fresh deleting_a_project_keeps_only_org_level_sets_and_others_citations,
                    fresh consolidation_replaces_features_citing_the_union,
                    fresh summaries_compare_and_set_and_deleted_episodes_invalidate_them,
                    fresh the_semantic_version_moves_with_every_feature_change,
                    fresh feature_vectors_are_queued_stored_and_abandoned,
                    fresh feature_vector_leases_hold_until_released_or_expired,
                    fresh set_types_are_unique_per_level_and_tags_and_seen_by_their_org,
                    fresh categories_and_tags_are_named_once_per_owner,
                    fresh episodes_resolve_within_their_project_only,
                    fresh each_message_knows_what_came_before_it_in_its_project,
                    pair rows_read_per_search_follow_every_write_at_once,
                }
                history {
                    fresh versions_are_kept_on_every_change_and_on_deletion,
                    fresh the_bound_drops_the_oldest_versions,
                    fresh consolidation_keeps_its_sources_history,
                    fresh versions_are_dropped_by_feature_and_by_cited_episode,
                    fresh deleting_a_project_drops_its_sets_history_only,
                }
                memory_feed {
                    fresh episodes_are_logged_with_their_uid_also_once_deleted,
                    fresh vector_entries_are_skipped_but_passed,
                    fresh features_are_logged_added_updated_and_deleted,
                    fresh a_deleted_episode_deletes_the_features_left_citing_nothing,
                    fresh a_dropped_set_logs_each_of_its_features_deleted,
                    fresh org_level_features_are_not_followed,
                    fresh summaries_are_logged_replaced,
                    fresh a_deleted_project_is_gone_and_left_out_of_the_heads,
                    fresh many_heads_are_read_at_once,
                    fresh a_pruned_log_names_its_oldest_change,
                    fresh the_index_feed_ignores_feature_and_summary_entries,
                    fresh extraction_and_consolidation_are_logged,
                    pair concurrent_writers_keep_the_ids_gap_free,
                }
                forget {
                    fresh deleting_episodes_deletes_the_features_left_citing_nothing,
                    fresh forgetting_counts_what_it_removes_in_batches_as_previewed,
                }
            }
        }
    };
}

conformance!(sqlite, crate::conformance::SqliteBackend);
conformance!(postgres, crate::conformance::PostgresBackend);
