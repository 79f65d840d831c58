//! `EpisodeStore`.

use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::error::Error;
use memmachine_core::model::filter::parse;
use memmachine_core::model::{EpisodeHandle, EpisodicConfigUpdate};

use crate::conformance::support::{
    FILTER_CASES, add, contents, episode, filter_project, handles, key, largest_filters, names,
    numbered, org, project, queued_for, unique,
};

pub async fn unknown_projects_are_not_found_and_never_created(store: Arc<dyn Store>) {
    let k = key(&org(), "ghost");
    let nf = |what: &str, result: Result<(), Error>| {
        assert!(
            matches!(result, Err(Error::NotFound(_))),
            "{what}: {result:?}"
        );
    };
    let added = store.add_episodes(&k, numbered("x", 1), Some("e")).await;
    nf("add", added.map(drop));
    nf("count", store.count_episodes(&k).await.map(drop));
    nf("list", store.list_episodes(&k, None, 0, 10).await.map(drop));
    nf(
        "recent",
        store.recent_episodes(&k, None, 10).await.map(drop),
    );
    let uid = uuid::Uuid::new_v4();
    nf("delete", store.delete_episodes(&k, &[uid]).await.map(drop));
    nf(
        "by handle",
        store
            .episodes_by_handle(&k, &[EpisodeHandle::from_raw(1)])
            .await
            .map(drop),
    );
    nf("handles", store.episode_handles(&k, &[uid]).await.map(drop));
    assert!(store.get_project(&k).await.unwrap().is_none());
    let update = EpisodicConfigUpdate::default();
    assert!(
        store
            .update_episodic_config(&k, update)
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn episodes_get_consecutive_sequence_numbers(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    assert_eq!(add(&store, &k, numbered("m", 3)).await, [1, 2, 3]);
    assert_eq!(
        add(&store, &other, numbered("o", 2)).await,
        [1, 2],
        "per project"
    );
    assert_eq!(add(&store, &k, vec![episode("m3", "u", &[], 3)]).await, [4]);
    assert_eq!(add(&store, &k, vec![]).await, Vec::<i64>::new());
    assert_eq!(store.count_episodes(&k).await.unwrap(), 4);
    assert_eq!(store.count_episodes(&other).await.unwrap(), 2);
    let seqs: Vec<i64> = store
        .list_episodes(&k, None, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.sequence_num)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

pub async fn episodes_round_trip_every_field(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let mut e = episode(
        "hello there",
        "alice",
        &[("dia_id", "D1:1"), ("k.v", "x")],
        1_683_554_160_123_456,
    );
    e.producer_role = "assistant".into();
    e.produced_for_id = "bob".into();
    e.episode_type = "note".into();
    e.content_type = "text".into();
    e.expires_at_micros = Some(1_700_000_000_000_000);
    let plain = episode("", "bob", &[], -5);
    add(&store, &k, vec![e.clone(), plain.clone()]).await;
    let got = store.list_episodes(&k, None, 0, 10).await.unwrap();
    let expected =
        |new: &memmachine_core::model::NewEpisode, seq| memmachine_core::model::Episode {
            uid: new.uid,
            content: new.content.clone(),
            producer_id: new.producer_id.clone(),
            producer_role: new.producer_role.clone(),
            produced_for_id: new.produced_for_id.clone(),
            sequence_num: seq,
            episode_type: new.episode_type.clone(),
            content_type: new.content_type.clone(),
            created_at_micros: new.created_at_micros,
            metadata: new.metadata.clone(),
            expires_at_micros: new.expires_at_micros,
        };
    assert_eq!(got, [expected(&e, 1), expected(&plain, 2)]);
}

/// An episode's uid is its project's: one taken in another org's project, or in
/// another project of the same org, is free here (were it not, a caller choosing
/// uids would learn which exist elsewhere).
pub async fn a_uid_taken_in_another_project_is_free_here(store: Arc<dyn Store>) {
    let theirs = project(&store).await;
    let first = episode("theirs", "u", &[], 1);
    add(&store, &theirs, vec![first.clone()]).await;
    let sibling = crate::conformance::support::project_in(&store, &theirs.org_id, "q").await;
    for k in [project(&store).await, sibling] {
        let mut mine = first.clone();
        mine.content = "mine".into();
        assert_eq!(add(&store, &k, vec![mine.clone()]).await, [1], "{k:?}");
        let handles = store.episode_handles(&k, &[first.uid]).await.unwrap();
        let stored = store
            .episodes_by_handle(&k, &[handles[0].expect("stored under its uid")])
            .await
            .unwrap();
        let stored: Vec<_> = stored.into_iter().map(|(_, e)| e).collect();
        assert_eq!(contents(&stored), ["mine"], "{k:?}");
        // And taken now in this project, as anywhere.
        let again = store.add_episodes(&k, vec![mine], None).await;
        assert!(matches!(again, Err(Error::AlreadyExists(_))), "{again:?}");
    }
    let theirs_now = store.list_episodes(&theirs, None, 0, 10).await.unwrap();
    assert_eq!(contents(&theirs_now), ["theirs"], "untouched");
}

pub async fn a_failing_batch_stores_nothing_and_uses_no_numbers(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let first = episode("one", "u", &[], 1);
    add(&store, &k, vec![first.clone()]).await;
    let head = store.feed_head(&k).await.unwrap();
    // A uid already stored, or twice in the batch, fails the whole batch.
    let twice = episode("twice", "u", &[], 2);
    let embedder = format!("e-{}", unique());
    for batch in [
        vec![episode("two", "u", &[], 2), first.clone()],
        vec![twice.clone(), episode("between", "u", &[], 2), twice],
    ] {
        let result = store.add_episodes(&k, batch, Some(&embedder)).await;
        assert!(matches!(result, Err(Error::AlreadyExists(_))), "{result:?}");
    }
    assert_eq!(
        store.count_episodes(&k).await.unwrap(),
        1,
        "nothing of it stays"
    );
    assert_eq!(store.feed_head(&k).await.unwrap(), head, "nothing logged");
    assert!(
        queued_for(&store, &embedder).await.is_empty(),
        "nothing queued"
    );
    assert_eq!(
        add(&store, &k, vec![episode("three", "u", &[], 3)]).await,
        [2]
    );
}

pub async fn listing_pages_and_filters_in_sequence_order(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    let batch: Vec<_> = (0..6)
        .map(|i| {
            let who = if i % 2 == 0 { "even" } else { "odd" };
            episode(&format!("m{i}"), who, &[], i)
        })
        .collect();
    add(&store, &k, batch).await;
    add(&store, &other, numbered("elsewhere", 3)).await;
    let list = |after, limit| {
        let (store, k) = (store.clone(), k.clone());
        async move { contents(&store.list_episodes(&k, None, after, limit).await.unwrap()) }
    };
    assert_eq!(list(0, 2).await, ["m0", "m1"]);
    assert_eq!(list(2, 2).await, ["m2", "m3"], "after seq 2");
    assert_eq!(list(4, 10).await, ["m4", "m5"]);
    assert!(list(6, 10).await.is_empty());
    assert_eq!(list(i64::MIN, 100).await.len(), 6, "only this project's");
    let odd = parse("producer_id = 'odd'").unwrap();
    let listed = store.list_episodes(&k, odd.as_ref(), 2, 2).await.unwrap();
    assert_eq!(contents(&listed), ["m3", "m5"], "filtered, then paged");
    let recent = store.recent_episodes(&k, None, 3).await.unwrap();
    assert_eq!(contents(&recent), ["m3", "m4", "m5"], "oldest first");
    let recent = store.recent_episodes(&k, odd.as_ref(), 2).await.unwrap();
    assert_eq!(contents(&recent), ["m3", "m5"]);
    assert_eq!(store.recent_episodes(&k, None, 100).await.unwrap().len(), 6);
}

pub async fn filter_language_semantics(store: Arc<dyn Store>) {
    let k = filter_project(&store).await;
    for (text, expected) in FILTER_CASES {
        let filter = parse(text).unwrap();
        let listed = store
            .list_episodes(&k, filter.as_ref(), 0, 100)
            .await
            .unwrap();
        assert_eq!(&names(contents(&listed)), expected, "filter {text}");
        let recent = store
            .recent_episodes(&k, filter.as_ref(), 100)
            .await
            .unwrap();
        assert_eq!(
            &names(contents(&recent)),
            expected,
            "recent with filter {text}"
        );
    }
}

pub async fn the_largest_filters_run(store: Arc<dyn Store>) {
    let k = project(&store).await;
    add(
        &store,
        &k,
        vec![episode("e", "u", &[("n", "8"), ("s", "v7")], 1)],
    )
    .await;
    for text in largest_filters() {
        let filter = parse(&text).unwrap();
        let listed = store
            .list_episodes(&k, filter.as_ref(), 0, 10)
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "{}", &text[..40]);
        let recent = store
            .recent_episodes(&k, filter.as_ref(), 10)
            .await
            .unwrap();
        assert_eq!(recent.len(), 1, "{}", &text[..40]);
    }
}

pub async fn deletes_are_all_or_none_inside_the_project(store: Arc<dyn Store>) {
    let a = project(&store).await;
    let b = project(&store).await;
    let in_a = episode("apple pie recipe", "u", &[], 1);
    let kept = episode("apple crumble", "u", &[], 2);
    let in_b = episode("apple cider", "u", &[], 1);
    add(&store, &a, vec![in_a.clone(), kept.clone()]).await;
    add(&store, &b, vec![in_b.clone()]).await;
    let head = store.feed_head(&a).await.unwrap();
    // B's episode and an unknown uid through A: NotFound naming both (and not A's
    // own), and nothing is deleted.
    let unknown = uuid::Uuid::new_v4();
    match store
        .delete_episodes(&a, &[in_a.uid, in_b.uid, unknown])
        .await
    {
        Err(Error::NotFound(m)) => {
            assert!(m.contains(&in_b.uid.to_string()), "{m}");
            assert!(m.contains(&unknown.to_string()), "{m}");
            assert!(!m.contains(&in_a.uid.to_string()), "{m}");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert_eq!(store.count_episodes(&a).await.unwrap(), 2);
    assert_eq!(store.count_episodes(&b).await.unwrap(), 1);
    assert_eq!(store.feed_head(&a).await.unwrap(), head, "nothing logged");
    // A uid named twice is deleted once.
    assert_eq!(
        store
            .delete_episodes(&a, &[in_a.uid, in_a.uid])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        contents(&store.list_episodes(&a, None, 0, 10).await.unwrap()),
        ["apple crumble"]
    );
    assert_eq!(store.count_episodes(&b).await.unwrap(), 1);
    assert!(matches!(
        store.delete_episodes(&a, &[in_a.uid]).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(store.delete_episodes(&a, &[]).await.unwrap(), 0);
}

pub async fn episodes_by_handle_keep_the_order_asked_and_the_project(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    let mine = numbered("mine", 3);
    let theirs = numbered("theirs", 1);
    add(&store, &k, mine.clone()).await;
    add(&store, &other, theirs.clone()).await;
    let h = handles(&store, &k, &mine).await;
    let stranger = handles(&store, &other, &theirs).await[0];
    let got = store
        .episodes_by_handle(
            &k,
            &[
                h[2],
                stranger,
                h[0],
                EpisodeHandle::from_raw(i64::MAX),
                h[1],
            ],
        )
        .await
        .unwrap();
    let pairs: Vec<(EpisodeHandle, String)> =
        got.into_iter().map(|(h, e)| (h, e.content)).collect();
    assert_eq!(
        pairs,
        [
            (h[2], "mine 2".into()),
            (h[0], "mine 0".into()),
            (h[1], "mine 1".into())
        ],
        "in the order asked; another project's handle and an unknown one left out"
    );
    assert!(store.episodes_by_handle(&k, &[]).await.unwrap().is_empty());
    store.delete_episodes(&k, &[mine[0].uid]).await.unwrap();
    let left = store.episodes_by_handle(&k, &h).await.unwrap();
    assert_eq!(
        left.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
        [h[1], h[2]],
        "deleted: left out"
    );
}

pub async fn episode_handles_name_this_projects_episodes_only(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    let mine = numbered("mine", 2);
    let theirs = numbered("theirs", 1);
    add(&store, &k, mine.clone()).await;
    add(&store, &other, theirs.clone()).await;
    let got = store
        .episode_handles(
            &k,
            &[
                mine[1].uid,
                theirs[0].uid,
                uuid::Uuid::new_v4(),
                mine[0].uid,
            ],
        )
        .await
        .unwrap();
    assert!(got[1].is_none() && got[2].is_none(), "{got:?}");
    let (first, second) = (got[3].unwrap(), got[0].unwrap());
    assert_ne!(first, second);
    let rows = store
        .episodes_by_handle(&k, &[first, second])
        .await
        .unwrap();
    assert_eq!(rows[0].1.uid, mine[0].uid);
    assert_eq!(rows[1].1.uid, mine[1].uid);
    assert!(store.episode_handles(&k, &[]).await.unwrap().is_empty());
}
