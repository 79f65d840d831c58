//! A search's time by stage, over gRPC: a `SearchMemories` request carrying the
//! `memmachine-timing` header is answered with a `server-timing` entry (the total, the
//! embedding, lexical, dense, fusion and store stages); one without it gets none.

use memmachine::config::EmbedderKind;
use memmachine_domain::search_time::{ASK_HEADER, REPORT_HEADER, Timing};
use memmachine_domain::stage_time::Stage;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;

use crate::common::InProcess;

#[tokio::test]
async fn a_search_that_asks_is_told_where_its_time_went() {
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(EmbedderKind::Hash);
    })
    .await;
    let channel = server.channel().await;
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            description: String::new(),
            config: Some(pb::ProjectConfig {
                embedder: String::new(),
                reranker: "hybrid".into(),
            }),
        })
        .await
        .unwrap();
    let mut memories = MemoryServiceClient::new(channel);
    let messages = ["I adopted a dog named Rex", "a beagle, he loves the park"]
        .iter()
        .map(|text| pb::MemoryMessage {
            content: (*text).into(),
            producer: "ann".into(),
            ..Default::default()
        })
        .collect();
    memories
        .add_memories(pb::AddMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            messages,
            types: vec![pb::MemoryType::Episodic as i32],
        })
        .await
        .unwrap();
    let request = || pb::SearchMemoriesRequest {
        org_id: "o".into(),
        project_id: "p".into(),
        query: "Rex the dog".into(),
        top_k: Some(3),
        types: vec![pb::MemoryType::Episodic as i32],
        ..Default::default()
    };
    let mut asking = tonic::Request::new(request());
    asking
        .metadata_mut()
        .insert(ASK_HEADER, "1".parse().unwrap());
    let answered = memories.search_memories(asking).await.unwrap();
    let header = answered
        .metadata()
        .get(REPORT_HEADER)
        .expect("timing asked for");
    let timing = Timing::parse(header.to_str().unwrap()).expect("a total");
    let hits = answered
        .into_inner()
        .episodic_memory
        .unwrap()
        .long_term_memory;
    assert!(!hits.is_empty());
    // The store was read (the rows), and the stages fit in the total.
    assert!(timing.stage_us(Stage::Store) > 0, "{timing:?}");
    assert!(
        timing.stages_us.iter().sum::<u64>() <= timing.total_us,
        "{timing:?}"
    );
    let plain = memories.search_memories(request()).await.unwrap();
    assert!(plain.metadata().get(REPORT_HEADER).is_none(), "not asked");
    server.stop().await.unwrap();
}
