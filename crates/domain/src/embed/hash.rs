//! A deterministic embedder for tests: feature hashing of the analysed words (the same
//! stems as lexical search) into a fixed number of signed buckets, normalised. Texts
//! sharing words get similar vectors; nothing is learned.

use async_trait::async_trait;

use super::{EmbedError, Embedder, normalize};
use crate::retrieval::tokenize;

pub struct HashEmbedder {
    id: String,
    dimensions: usize,
}

impl HashEmbedder {
    pub fn new(dimensions: usize) -> HashEmbedder {
        HashEmbedder {
            id: format!("hash:{dimensions}"),
            dimensions: dimensions.max(1),
        }
    }

    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimensions];
        for word in tokenize::words(text) {
            let h = fnv1a(tokenize::stem(&word).as_bytes());
            let bucket = (h % self.dimensions as u64) as usize;
            v[bucket] += if (h >> 63) == 0 { 1.0 } else { -1.0 };
        }
        normalize(&mut v);
        v
    }
}

/// FNV-1a: stable across platforms and releases, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn is_deterministic_normalised_and_similar_for_shared_words() {
        let e = HashEmbedder::new(256);
        let a = e.embed_one("I adopted a golden retriever");
        assert_eq!(a, e.embed_one("I adopted a golden retriever"));
        assert_eq!(a.len(), 256);
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        let near = e.embed_one("golden retrievers are adopted");
        let far = e.embed_one("stock market prices fell");
        assert!(dot(&a, &near) > dot(&a, &far) + 0.3);
        assert!(e.embed_one("").iter().all(|x| *x == 0.0));
    }
}
