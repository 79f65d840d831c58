//! `ForgetStore`, and what every episode deletion shares: a feature goes with the last
//! episode it cited; forgetting runs in batches that count what they remove, skip what
//! is already gone, and match the preview; receipts are kept per org.

use std::sync::Arc;

use memmachine::store::{ForgetCounts, ForgetReceipt, ProjectForget, Store};
use memmachine_core::access::{Access, ProjectAccess};
use memmachine_core::model::{EpisodeHandle, NewEpisode};
use memmachine_domain::embed::Embedders;
use memmachine_domain::forget::Forget;
use memmachine_domain::limits::Limits;
use memmachine_domain::projects::Projects;
use memmachine_domain::retrieval::index_cache::IndexCache;
use memmachine_domain::semantic::features::new_feature;
use memmachine_domain::semantic::model::{NewFeature, Summary};
use memmachine_domain::semantic::sets::{org_set, project_set, user_set};

use crate::conformance::support::{episode, org, project_in as project};

fn fact(name: &str) -> NewFeature {
    new_feature("Profile", "cat-1", "t", name, name, serde_json::json!({}))
}

fn said(content: &str, producer: &str, produced_for: &str) -> NewEpisode {
    NewEpisode {
        produced_for_id: produced_for.into(),
        ..episode(content, producer, &[], 1)
    }
}

async fn stored(
    store: &Arc<dyn Store>,
    k: &ProjectAccess,
    episodes: &[NewEpisode],
) -> Vec<EpisodeHandle> {
    store
        .add_episodes(k, episodes.to_vec(), None)
        .await
        .unwrap();
    let uids: Vec<_> = episodes.iter().map(|e| e.uid).collect();
    store.resolve_episodes(k, &uids).await.unwrap()
}

pub async fn deleting_episodes_deletes_the_features_left_citing_nothing(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].internal_id;
    let episodes = [said("a", "alice", ""), said("b", "bob", "")];
    let h = stored(&store, &k, &episodes).await;
    let only = store
        .add_feature(set, fact("only"), &[h[0]], None)
        .await
        .unwrap();
    let both = store
        .add_feature(set, fact("both"), &[h[0], h[1]], None)
        .await
        .unwrap();
    let manual = store
        .add_feature(set, fact("manual"), &[], None)
        .await
        .unwrap();
    let version = store.semantic_version(&o).await.unwrap();

    assert_eq!(
        store.delete_episodes(&k, &[episodes[0].uid]).await.unwrap(),
        1
    );
    assert!(store.find_feature(&only.id).await.unwrap().is_none());
    let both = store.find_feature(&both.id).await.unwrap().unwrap();
    assert_eq!(both.citations, vec![episodes[1].uid]);
    assert!(store.find_feature(&manual.id).await.unwrap().is_some());
    assert!(
        store.semantic_version(&o).await.unwrap() > version,
        "caches on every replica see the feature go"
    );
}

pub async fn forgetting_counts_what_it_removes_in_batches_as_previewed(store: Arc<dyn Store>) {
    let o = org();
    let (k, other) = (
        project(&store, &o, "p").await,
        project(&store, &o, "q").await,
    );
    let episodes = [
        said("one", "alice", ""),
        said("two", "bot", "alice"),
        said("three", "alice", "bot"),
        said("four", "bob", ""),
    ];
    let h = stored(&store, &k, &episodes).await;
    let elsewhere = said("five", "alice", "");
    stored(&store, &other, std::slice::from_ref(&elsewhere)).await;
    let sets = store
        .ensure_sets(
            &k,
            vec![user_set(&k, "alice"), project_set(&k), org_set(&k)],
        )
        .await
        .unwrap();
    let (hers, shared, org_level) = (
        sets[0].internal_id,
        sets[1].internal_id,
        sets[2].internal_id,
    );
    store
        .add_feature(hers, fact("profile"), &[h[0]], None)
        .await
        .unwrap();
    store
        .add_feature(hers, fact("uncited"), &[], None)
        .await
        .unwrap();
    store
        .add_feature(shared, fact("hers"), &[h[0], h[1]], None)
        .await
        .unwrap();
    let mixed = store
        .add_feature(shared, fact("mixed"), &[h[2], h[3]], None)
        .await
        .unwrap();
    store
        .add_feature(org_level, fact("org"), &[h[1]], None)
        .await
        .unwrap();
    let summary = Summary {
        text: "a summary".into(),
        first_seq: 1,
        last_seq: 4,
        updated_at_micros: 1,
    };
    assert!(store.put_summary(&k, summary, None).await.unwrap());

    let preview = store
        .forget_preview(&k, "alice", &[], &[hers])
        .await
        .unwrap();
    let expected = ForgetCounts {
        episodes: 3,
        // profile and uncited (her set), hers and org (left citing nothing).
        features: 4,
        // hers x2, mixed x1, org x1.
        citations: 4,
        summaries: 1,
        sets: 1,
    };
    assert_eq!(preview, expected);
    assert_eq!(
        store.count_episodes(&k).await.unwrap(),
        4,
        "a preview removes nothing"
    );

    // Oldest first, in batches; a re-run of a batch finds nothing left to remove.
    let first = store.subject_episodes(&k, "alice", 2).await.unwrap();
    assert_eq!(first, vec![episodes[0].uid, episodes[1].uid]);
    let mut done = ForgetCounts {
        sets: 1,
        features: store.drop_set(hers).await.unwrap().len() as u64,
        ..Default::default()
    };
    assert!(store.drop_set(hers).await.unwrap().is_empty());
    done.add(store.forget_episodes(&k, &first).await.unwrap().counts);
    assert_eq!(
        store.forget_episodes(&k, &first).await.unwrap().counts,
        ForgetCounts::default()
    );
    let rest = store.subject_episodes(&k, "alice", 2).await.unwrap();
    assert_eq!(rest, vec![episodes[2].uid]);
    let last = store.forget_episodes(&k, &rest).await.unwrap();
    assert!(last.features.is_empty(), "mixed still cites bob's");
    done.add(last.counts);
    assert_eq!(done, expected);
    assert!(
        store
            .subject_episodes(&k, "alice", 2)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.summary(&k).await.unwrap().is_none());
    let mixed = store.find_feature(&mixed.id).await.unwrap().unwrap();
    assert_eq!(mixed.citations, vec![episodes[3].uid]);
    assert!(store.find_set(&sets[0].set_id).await.unwrap().is_none());
    assert_eq!(
        store.count_episodes(&other).await.unwrap(),
        1,
        "only where asked"
    );

    let receipt = ForgetReceipt {
        receipt_id: uuid::Uuid::new_v4().to_string(),
        org_id: o.clone(),
        subject: "alice".into(),
        dry_run: false,
        completed_at_micros: 42,
        projects: vec![ProjectForget {
            project_id: "p".into(),
            counts: done,
        }],
    };
    store.save_forget_receipt(&receipt).await.unwrap();
    assert_eq!(
        store
            .forget_receipt(&Access::system_org(&o), &receipt.receipt_id)
            .await
            .unwrap(),
        Some(receipt.clone())
    );
    assert_eq!(
        store
            .forget_receipt(&Access::system_org(&org()), &receipt.receipt_id)
            .await
            .unwrap(),
        None,
        "another org's receipt is not found"
    );
}

/// The server's limits as its flags default them.
fn default_limits() -> Limits {
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        limits: Limits,
    }
    <Flags as clap::Parser>::parse_from(["memmachine"]).limits
}

pub async fn a_forget_brings_the_cached_index_up_to_date_itself(store: Arc<dyn Store>) {
    let o = org();
    let (k, other) = (
        project(&store, &o, "p").await,
        project(&store, &o, "q").await,
    );
    let episodes = [
        said("one", "alice", ""),
        said("two", "bot", "alice"),
        said("three", "bob", ""),
        said("four", "alice", "bot"),
        said("five", "bob", "bot"),
    ];
    stored(&store, &k, &episodes).await;
    stored(&store, &other, &[said("six", "alice", "")]).await;
    let cache = Arc::new(IndexCache::new(store.clone(), 64 << 20));
    // A search's view of the index, taken before: reading it catches nothing up.
    let view = cache.view(&k, None).await.unwrap();
    assert_eq!(view.read(|index| index.len()).await.unwrap(), 5);

    let projects = Projects::new(store.clone(), default_limits(), Embedders::default());
    let forget = Forget::new(store.clone(), projects).with_index(cache.clone());
    let receipt = forget
        .forget_subject(&Access::system_org(&o), "alice", &[], false)
        .await
        .unwrap();
    let episodes: u64 = receipt.projects.iter().map(|p| p.counts.episodes).sum();
    assert_eq!(episodes, 4);
    assert_eq!(
        view.read(|index| index.len()).await.unwrap(),
        2,
        "the forget removed its episodes from the cached index, not the next search"
    );
    assert_eq!(
        cache.usage().1,
        1,
        "a project not loaded is not loaded by the forget"
    );
}
