//! The domain's one ranking path over the backend: an `IndexCache` kept current from
//! the store's change feed ranks (`episodic::ranking::rank`), the store gives the rows.

use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Error;
use memmachine_core::model::filter::{Expr, parse};
use memmachine_core::model::{EpisodeHandle, ScoredEpisode};
use memmachine_domain::embed::Embedder;
use memmachine_domain::episodic::ranking::{Mode, RankQuery, rank};
use memmachine_domain::retrieval::index_cache::IndexCache;
use memmachine_domain::retrieval::tokenize::query_terms;

use crate::conformance::support::{
    FILTER_CASES, TestEmbedder, add, contents, embed_all, episode, filter_project, handles,
    largest_filters, names, numbered, project, project_in,
};

const BUDGET: usize = 64 << 20;

fn filter(text: &str) -> Expr {
    parse(text).unwrap().expect("not blank")
}

/// One ranking as the server runs it, over `cache`.
struct Ranker<'a> {
    store: &'a Arc<dyn Store>,
    cache: &'a IndexCache,
    embedder: Option<Arc<dyn Embedder>>,
}

impl<'a> Ranker<'a> {
    fn new(store: &'a Arc<dyn Store>, cache: &'a IndexCache) -> Ranker<'a> {
        Ranker {
            store,
            cache,
            embedder: None,
        }
    }

    fn with(
        store: &'a Arc<dyn Store>,
        cache: &'a IndexCache,
        embedder: &Arc<TestEmbedder>,
    ) -> Ranker<'a> {
        Ranker {
            store,
            cache,
            embedder: Some(embedder.as_dyn()),
        }
    }

    async fn try_rank(
        &self,
        mode: Mode,
        key: &ProjectAccess,
        query: &str,
        filter: Option<&Expr>,
        top_k: usize,
    ) -> Result<Vec<ScoredEpisode>, Error> {
        let asked = RankQuery {
            mode,
            key,
            query,
            participant_aware: true,
            filter,
            top_k,
            weights: Default::default(),
            explain: false,
        };
        let vectors = self.embedder.as_ref().map(|e| e.id());
        let view = self.cache.view(key, vectors).await?;
        let hits = rank(self.store, &view, self.embedder.as_ref(), asked).await?;
        Ok(hits.into_iter().map(|hit| hit.scored).collect())
    }

    async fn rank(
        &self,
        mode: Mode,
        key: &ProjectAccess,
        query: &str,
        filter: Option<&Expr>,
        top_k: usize,
    ) -> Vec<ScoredEpisode> {
        let hits = self
            .try_rank(mode, key, query, filter, top_k)
            .await
            .unwrap();
        assert!(hits.len() <= top_k);
        assert!(
            hits.windows(2).all(|w| w[0].score >= w[1].score),
            "best first"
        );
        hits
    }

    async fn lexical(&self, key: &ProjectAccess, query: &str, top_k: usize) -> Vec<String> {
        texts(&self.rank(Mode::Lexical, key, query, None, top_k).await)
    }
}

/// How many episodes the project's index holds (a deleted one it still held would
/// take a place in every cut before the store's rows left it out).
async fn indexed(cache: &IndexCache, key: &ProjectAccess) -> usize {
    cache.read(key, None, |index| index.len()).await.unwrap()
}

fn texts(hits: &[ScoredEpisode]) -> Vec<String> {
    hits.iter().map(|h| h.episode.content.clone()).collect()
}

pub async fn lexical_ranking_stays_inside_the_project(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::new(&store, &cache);
    let a = project(&store).await;
    let other = project(&store).await;
    let adopted = "I adopted a golden retriever named Max last week.";
    let batch = vec![
        episode(adopted, "Caroline", &[], 1),
        episode("Max loves playing fetch at the beach.", "Caroline", &[], 2),
        episode("I went hiking in Yosemite with my kids.", "Melanie", &[], 3),
    ];
    add(&store, &a, batch).await;
    add(
        &store,
        &other,
        vec![episode("my retriever dog Max", "x", &[], 1)],
    )
    .await;
    let hits = ranker
        .rank(
            Mode::Lexical,
            &a,
            "What is the name of the retriever Caroline adopted?",
            None,
            10,
        )
        .await;
    assert_eq!(hits[0].episode.content, adopted);
    assert!(hits.iter().all(|h| h.score > 0.0));
    assert!(
        texts(&hits).iter().all(|c| !c.contains("my retriever dog")),
        "another project's"
    );
    // Stemming: "hike" finds "hiking" first.
    assert_eq!(
        ranker.lexical(&a, "hike", 10).await[0],
        "I went hiking in Yosemite with my kids."
    );
    assert_eq!(ranker.lexical(&a, "max", 1).await.len(), 1);
    assert!(ranker.lexical(&a, "???", 10).await.is_empty());
    assert!(ranker.lexical(&a, "zebra", 10).await.is_empty());
    assert_eq!(
        ranker.lexical(&other, "retriever", 10).await,
        ["my retriever dog Max"]
    );
}

pub async fn filters_apply_before_the_cut(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::new(&store, &cache);
    let k = project(&store).await;
    let mut batch: Vec<_> = (0..20)
        .map(|i| episode("coffee coffee coffee", "alice", &[], i))
        .collect();
    batch.push(episode("coffee", "bob", &[], 100));
    add(&store, &k, batch).await;
    let bob = filter("producer_id = 'bob'");
    let hits = ranker
        .rank(Mode::Lexical, &k, "coffee", Some(&bob), 5)
        .await;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].episode.producer_id, "bob");
}

pub async fn the_index_evaluates_filters_as_the_store_does(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::new(&store, &cache);
    let k = filter_project(&store).await;
    for (text, expected) in FILTER_CASES {
        let f = filter(text);
        let mut ranked = names(texts(
            &ranker
                .rank(Mode::Lexical, &k, "episode", Some(&f), 100)
                .await,
        ));
        ranked.sort();
        assert_eq!(&ranked, expected, "ranked with filter {text}");
        let newest = f.clone();
        let handles = cache
            .read(&k, None, move |index| {
                let newest = index.newest(&newest, 100).into_iter();
                newest.map(EpisodeHandle::from_raw).collect::<Vec<_>>()
            })
            .await
            .unwrap();
        let rows = store.episodes_by_handle(&k, &handles).await.unwrap();
        let rows: Vec<_> = rows.into_iter().map(|(_, e)| e).collect();
        assert_eq!(
            &names(contents(&rows)),
            expected,
            "newest with filter {text}"
        );
    }
}

pub async fn the_largest_filters_run_in_the_index(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::new(&store, &cache);
    let k = project(&store).await;
    add(
        &store,
        &k,
        vec![episode("e", "u", &[("n", "8"), ("s", "v7")], 1)],
    )
    .await;
    for text in largest_filters() {
        let hits = ranker
            .rank(Mode::Lexical, &k, "e", Some(&filter(&text)), 10)
            .await;
        assert_eq!(hits.len(), 1, "{}", &text[..40]);
    }
}

pub async fn the_index_sees_every_acknowledged_change(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::new(&store, &cache);
    let k = project(&store).await;
    let first = episode("the kettle is in the cupboard", "u", &[], 1);
    add(&store, &k, vec![first.clone()]).await;
    // The first read loads the project's index; later writes must reach it.
    assert_eq!(ranker.lexical(&k, "kettle", 10).await.len(), 1);
    let second = episode("a new kettle arrived", "u", &[], 2);
    add(&store, &k, vec![second.clone()]).await;
    assert_eq!(ranker.lexical(&k, "kettle", 10).await.len(), 2);
    store.delete_episodes(&k, &[first.uid]).await.unwrap();
    assert_eq!(
        indexed(&cache, &k).await,
        1,
        "the deleted one left the index"
    );
    let hits = ranker
        .rank(Mode::Lexical, &k, "kettle cupboard", None, 1)
        .await;
    assert_eq!(
        hits.iter().map(|h| h.episode.uid).collect::<Vec<_>>(),
        [second.uid]
    );
    // More than one page of the feed at once (the cache reads 2048 entries a page).
    add(&store, &k, numbered("kettle number", 2100)).await;
    assert_eq!(ranker.lexical(&k, "kettle", 5000).await.len(), 2101);
    // And a fresh cache, loading it in pages, agrees.
    let fresh = IndexCache::new(store.clone(), BUDGET);
    assert_eq!(
        Ranker::new(&store, &fresh)
            .lexical(&k, "kettle", 5000)
            .await
            .len(),
        2101
    );
}

/// A project holding three episodes, one of them `bob_says` (and another project
/// holding a lookalike), queued for `embedder`; returns the project and bob's episode.
async fn fruit(
    store: &Arc<dyn Store>,
    embedder: &TestEmbedder,
    bob_says: &str,
) -> (ProjectAccess, memmachine_core::model::NewEpisode) {
    let k = project(store).await;
    let other = project(store).await;
    let bobs = episode(bob_says, "bob", &[], 2);
    let batch = vec![
        episode("the red apple is ripe", "alice", &[], 1),
        bobs.clone(),
        episode("stock prices fell", "alice", &[], 3),
    ];
    store
        .add_episodes(&k, batch, Some(embedder.id()))
        .await
        .unwrap();
    store
        .add_episodes(
            &other,
            vec![episode("red apple", "x", &[], 1)],
            Some(embedder.id()),
        )
        .await
        .unwrap();
    (k, bobs)
}

pub async fn dense_ranking_uses_stored_vectors_of_the_project(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(64);
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::with(&store, &cache, &embedder);
    let (k, bobs) = fruit(&store, &embedder, "red apples and green pears").await;
    assert!(
        ranker
            .rank(Mode::Dense, &k, "red apple", None, 10)
            .await
            .is_empty(),
        "no vector yet"
    );
    assert_eq!(embed_all(&store, &embedder).await, 4);
    let hits = ranker.rank(Mode::Dense, &k, "red apple", None, 10).await;
    assert_eq!(hits.len(), 3, "only this project's episodes");
    assert_eq!(hits[0].episode.content, "the red apple is ripe");
    let bob = filter("producer_id = 'bob'");
    let filtered = ranker
        .rank(Mode::Dense, &k, "red apple", Some(&bob), 10)
        .await;
    assert_eq!(texts(&filtered), ["red apples and green pears"]);
    store.delete_episodes(&k, &[bobs.uid]).await.unwrap();
    assert_eq!(
        ranker
            .rank(Mode::Dense, &k, "red apple", None, 10)
            .await
            .len(),
        2
    );
    // Dense ranking without an embedder is refused.
    let without = Ranker::new(&store, &cache);
    let refused = without
        .try_rank(Mode::Dense, &k, "red apple", None, 10)
        .await;
    assert!(
        matches!(refused, Err(Error::FailedPrecondition(_))),
        "{refused:?}"
    );
}

pub async fn hybrid_ranking_fuses_text_and_vectors(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(64);
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::with(&store, &cache, &embedder);
    let (k, _) = fruit(&store, &embedder, "a quiet afternoon").await;
    // Before any vector exists, text alone ranks.
    let early = ranker.rank(Mode::Hybrid, &k, "red apple", None, 10).await;
    assert_eq!(early[0].episode.content, "the red apple is ripe");
    embed_all(&store, &embedder).await;
    let hits = ranker.rank(Mode::Hybrid, &k, "red apple", None, 10).await;
    assert_eq!(hits.len(), 3, "every episode of this project, no other");
    assert_eq!(hits[0].episode.content, "the red apple is ripe");
    let bob = filter("producer_id = 'bob'");
    let filtered = ranker
        .rank(Mode::Hybrid, &k, "red apple", Some(&bob), 1)
        .await;
    assert_eq!(
        texts(&filtered),
        ["a quiet afternoon"],
        "filtered before the cut"
    );
}

pub async fn another_embedders_vectors_are_not_ranked(store: Arc<dyn Store>) {
    let (first, second) = (TestEmbedder::new(32), TestEmbedder::new(48));
    let cache = IndexCache::new(store.clone(), BUDGET);
    let (by_first, by_second) = (
        Ranker::with(&store, &cache, &first),
        Ranker::with(&store, &cache, &second),
    );
    let k = project(&store).await;
    store
        .add_episodes(&k, numbered("note", 5), Some(first.id()))
        .await
        .unwrap();
    assert_eq!(embed_all(&store, &first).await, 5);
    assert_eq!(
        by_first
            .rank(Mode::Dense, &k, "note 1", None, 10)
            .await
            .len(),
        5
    );
    store
        .queue_missing(vec![(k.key().clone(), Some(second.id().to_string()))])
        .await
        .unwrap();
    // Until re-embedded, the old vectors are not ranked (another embedder's space)...
    assert!(
        by_second
            .rank(Mode::Dense, &k, "note 1", None, 10)
            .await
            .is_empty()
    );
    // ...but text still is, and hybrid ranking ranks by it meanwhile.
    let meanwhile = by_second.rank(Mode::Hybrid, &k, "note 1", None, 10).await;
    assert_eq!(meanwhile.len(), 5);
    assert_eq!(meanwhile[0].episode.content, "note 1");
    assert_eq!(embed_all(&store, &second).await, 5);
    let hits = by_second.rank(Mode::Dense, &k, "note 1", None, 10).await;
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[0].episode.content, "note 1");
}

pub async fn abandoned_episodes_are_still_found_by_their_words(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(32);
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::with(&store, &cache, &embedder);
    let k = project(&store).await;
    let batch = vec![
        episode("an ordinary note", "u", &[], 1),
        episode("a text the model refuses", "u", &[], 2),
    ];
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let refused = handles(&store, &k, &batch).await[1];
    assert_eq!(store.abandon_embeddings(&[refused]).await.unwrap(), 1);
    assert_eq!(embed_all(&store, &embedder).await, 1);
    let found = ranker.rank(Mode::Hybrid, &k, "refuses", None, 10).await;
    assert_eq!(
        found[0].episode.content, "a text the model refuses",
        "found by its words"
    );
    let dense = ranker.rank(Mode::Dense, &k, "refuses", None, 10).await;
    assert_eq!(texts(&dense), ["an ordinary note"], "it has no vector");
}

pub async fn neighbours_are_in_order_and_filtered(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let k = project(&store).await;
    let other = project(&store).await;
    let turns: Vec<_> = (0..8)
        .map(|i| {
            episode(
                &format!("turn {i}"),
                if i % 2 == 0 { "even" } else { "odd" },
                &[],
                i,
            )
        })
        .collect();
    add(&store, &k, turns.clone()).await;
    let stranger = numbered("elsewhere", 1);
    add(&store, &other, stranger.clone()).await;
    let h = handles(&store, &k, &turns).await;
    let stranger = handles(&store, &other, &stranger).await[0];
    let window = |handle: EpisodeHandle, before: usize, after: usize, f: Option<Expr>| {
        let (store, cache, k) = (store.clone(), &cache, k.clone());
        async move {
            let ids = cache
                .read(&k, None, move |index| {
                    let window = index.neighbours(handle.raw(), before, after, f.as_ref());
                    window
                        .into_iter()
                        .map(EpisodeHandle::from_raw)
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap();
            let rows = store.episodes_by_handle(&k, &ids).await.unwrap();
            rows.into_iter().map(|(_, e)| e.content).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        window(h[4], 1, 2, None).await,
        ["turn 3", "turn 4", "turn 5", "turn 6"]
    );
    assert_eq!(
        window(h[0], 1, 2, None).await,
        ["turn 0", "turn 1", "turn 2"]
    );
    assert!(
        window(stranger, 1, 2, None).await.is_empty(),
        "another project's episode"
    );
    let even = filter("producer_id = 'even'");
    assert_eq!(
        window(h[4], 1, 1, Some(even)).await,
        ["turn 2", "turn 4", "turn 6"]
    );
    store.delete_episodes(&k, &[turns[5].uid]).await.unwrap();
    assert_eq!(window(h[4], 0, 1, None).await, ["turn 4", "turn 6"]);
}

pub async fn a_project_created_again_starts_empty(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), BUDGET);
    let ranker = Ranker::new(&store, &cache);
    let k = project(&store).await;
    add(
        &store,
        &k,
        vec![episode("the secret word is plum", "u", &[], 1)],
    )
    .await;
    assert_eq!(ranker.lexical(&k, "plum", 10).await.len(), 1);
    store.delete_project(&k).await.unwrap();
    let gone = ranker.try_rank(Mode::Lexical, &k, "plum", None, 10).await;
    assert!(matches!(gone, Err(Error::NotFound(_))), "{gone:?}");
    project_in(&store, &k.org_id, &k.project_id).await;
    assert!(
        ranker.lexical(&k, "plum", 10).await.is_empty(),
        "the old index is not reused"
    );
    add(&store, &k, vec![episode("a fresh plum", "u", &[], 2)]).await;
    assert_eq!(ranker.lexical(&k, "plum", 10).await, ["a fresh plum"]);
}

pub async fn a_write_through_one_handle_is_read_through_the_other(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let embedder = TestEmbedder::new(32);
    let cache = IndexCache::new(other.clone(), BUDGET);
    let ranker = Ranker::with(&other, &cache, &embedder);
    let k = project(&one).await;
    one.add_episodes(
        &k,
        vec![episode("the kettle is in the cupboard", "u", &[], 1)],
        Some(embedder.id()),
    )
    .await
    .unwrap();
    assert_eq!(
        ranker.lexical(&k, "kettle", 10).await.len(),
        1,
        "loaded through the other"
    );
    one.add_episodes(
        &k,
        vec![episode("a new kettle arrived", "u", &[], 2)],
        Some(embedder.id()),
    )
    .await
    .unwrap();
    let hits = ranker.lexical(&k, "kettle arrived", 10).await;
    assert_eq!(hits[0], "a new kettle arrived", "on the next read");
    assert_eq!(hits.len(), 2);
    // Vectors stored through the first handle too.
    assert!(
        ranker
            .rank(Mode::Dense, &k, "kettle", None, 10)
            .await
            .is_empty()
    );
    assert_eq!(embed_all(&one, &embedder).await, 2);
    assert_eq!(
        ranker.rank(Mode::Dense, &k, "kettle", None, 10).await.len(),
        2
    );
}

pub async fn a_delete_through_one_handle_is_read_through_the_other(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let cache = IndexCache::new(other.clone(), BUDGET);
    let ranker = Ranker::new(&other, &cache);
    let k = project(&one).await;
    let doomed = episode("the kettle is in the cupboard", "u", &[], 1);
    add(
        &one,
        &k,
        vec![doomed.clone(), episode("a new kettle arrived", "u", &[], 2)],
    )
    .await;
    assert_eq!(ranker.lexical(&k, "kettle", 10).await.len(), 2);
    one.delete_episodes(&k, &[doomed.uid]).await.unwrap();
    assert_eq!(
        ranker.lexical(&k, "kettle cupboard", 1).await,
        ["a new kettle arrived"],
        "the best hit left the other's index, not only its rows"
    );
    assert_eq!(indexed(&cache, &k).await, 1);
    one.delete_project(&k).await.unwrap();
    let gone = ranker.try_rank(Mode::Lexical, &k, "kettle", None, 10).await;
    assert!(matches!(gone, Err(Error::NotFound(_))), "{gone:?}");
}

pub async fn a_tiny_budget_still_answers_every_project(store: Arc<dyn Store>) {
    let cache = IndexCache::new(store.clone(), 1);
    let ranker = Ranker::new(&store, &cache);
    let mut projects = Vec::new();
    for word in ["apple", "pear", "plum", "fig"] {
        let k = project(&store).await;
        add(
            &store,
            &k,
            vec![episode(&format!("{word} talk"), "u", &[], 0)],
        )
        .await;
        projects.push((k, word));
    }
    for round in 1..=3usize {
        for (k, word) in &projects {
            let hits = ranker.lexical(k, &format!("{word} talk"), 10).await;
            assert_eq!(hits.len(), round, "{word} in round {round}: {hits:?}");
            assert!(hits.iter().all(|h| h.starts_with(word)), "{hits:?}");
            assert_eq!(
                cache.usage().1,
                1,
                "over budget: only the project being read stays"
            );
            add(
                &store,
                k,
                vec![episode(&format!("{word} again"), "u", &[], round as i64)],
            )
            .await;
        }
    }
    let terms = query_terms("fig");
    let (k, _) = &projects[3];
    let count = cache
        .read(k, None, move |index| index.lexical(&terms, None, 10).len())
        .await
        .unwrap();
    assert_eq!(count, 4);
}

pub async fn the_budget_counts_each_indexs_fixed_cost(store: Arc<dyn Store>) {
    // One small project's index: the cache counts its whole heap (the tables and
    // buffers every index has, whatever its size), not a guess per episode.
    let mut projects = Vec::new();
    for i in 0..24 {
        let k = project(&store).await;
        let text = format!("note {i:02} about the kettle");
        add(&store, &k, vec![episode(&text, "u", &[], 0)]).await;
        projects.push(k);
    }
    let roomy = IndexCache::new(store.clone(), BUDGET);
    let heap = roomy
        .read(&projects[0], None, |index| index.heap_bytes())
        .await
        .unwrap();
    assert_eq!(roomy.usage(), (heap, 1), "counted as its heap");
    assert!(
        heap > 1024,
        "an index's fixed cost is counted: {heap} bytes"
    );
    // Room for eight such indexes: the cache keeps no more, and evicts to 15/16.
    let budget = heap * 8 + heap / 2;
    let cache = IndexCache::new(store.clone(), budget);
    let ranker = Ranker::new(&store, &cache);
    for k in &projects {
        assert_eq!(ranker.lexical(k, "kettle", 10).await.len(), 1);
        let (bytes, loaded) = cache.usage();
        assert!(
            bytes <= budget,
            "{bytes} bytes held over a budget of {budget}"
        );
        assert!(
            loaded <= 8,
            "{loaded} indexes of about {heap} bytes in {budget}"
        );
    }
    assert!(
        cache.usage().1 >= 6,
        "eviction stops at 15/16 of the budget"
    );
}
